package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobdir/jobdir/jobstore"
)

// maxRunAtYear bounds Spec.RunAt: a job's JSON form cannot carry a later
// year.
const maxRunAtYear = 9999

func validateSpecs(specs []jobstore.Spec) error {
	for i, spec := range specs {
		if spec.RunAt.Year() > maxRunAtYear {
			return fmt.Errorf("spec %d: %w: run_at %s is after the year %d", i, jobstore.ErrInvalidInput, spec.RunAt, maxRunAtYear)
		}
	}
	return nil
}

// Submit creates a queued job from spec and reports created=true, or returns
// the job that already has spec.Key with created=false. Of any number of
// processes submitting one key at once, exactly one creates the job (the
// key has a unique index). Returns an error wrapping
// jobstore.ErrInvalidInput (or jobstore.ErrPayloadTooLarge) for an invalid
// spec.
func (s *Store) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	if err := spec.Validate(s.opts.MaxPayload); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("pgstore: submit: %w", err)
	}
	if spec.RunAt.Year() > maxRunAtYear {
		return jobstore.Job{}, false, fmt.Errorf("pgstore: submit: %w: run_at %s is after the year %d", jobstore.ErrInvalidInput, spec.RunAt, maxRunAtYear)
	}
	if err := s.check(ctx, "submit"); err != nil {
		return jobstore.Job{}, false, err
	}
	for try := 0; ; try++ {
		j := trimTimes(jobstore.NewJob(spec, time.Now()))
		doc, err := encodeDoc(j)
		if err != nil {
			return jobstore.Job{}, false, fmt.Errorf("pgstore: submit: %w", err)
		}
		var id string
		err = s.pool.QueryRow(ctx, s.q.insert, j.ID, nullKey(j.Key), j.Kind, j.Priority, j.RunAt, j.UpdatedAt,
			nullBytes(j.Payload), doc).Scan(&id)
		if err == nil {
			s.announceWork()
			return j, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return jobstore.Job{}, false, s.fail(ctx, "submit", err)
		}
		// The key has a job.
		r, err := scanRow(s.pool.QueryRow(ctx, s.q.byKey, j.Key))
		if err == nil {
			return r.job, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) || try >= 3 {
			return jobstore.Job{}, false, s.fail(ctx, "submit", err)
		}
		// Pruned between the insert and the read: the key is free again.
	}
}

// SubmitBatch submits every spec as Submit would, in one transaction with
// one multi-row insert, and returns one result per spec in order. A batch
// without keys is one statement. Returns
// an error wrapping jobstore.ErrInvalidInput (or
// jobstore.ErrPayloadTooLarge), naming the index, and submits nothing if
// any spec is invalid; on any other error the transaction is rolled back
// and nothing is submitted either.
func (s *Store) SubmitBatch(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
	if err := jobstore.ValidateBatch(specs, s.opts.MaxPayload); err != nil {
		return nil, fmt.Errorf("pgstore: submit batch: %w", err)
	}
	if err := validateSpecs(specs); err != nil {
		return nil, fmt.Errorf("pgstore: submit batch: %w", err)
	}
	if err := s.check(ctx, "submit batch"); err != nil {
		return nil, err
	}
	out := make([]jobstore.Submitted, len(specs))
	if len(specs) == 0 {
		return out, nil
	}
	now := time.Now()
	first := map[string]int{} // key -> index of the first spec with it
	var rows []int            // the specs that make a job, unless their key has one
	for i, spec := range specs {
		if spec.Key != "" {
			if _, dup := first[spec.Key]; dup {
				continue
			}
			first[spec.Key] = i
		}
		out[i].Job = trimTimes(jobstore.NewJob(spec, now))
		rows = append(rows, i)
	}
	// Insert in key order, so that batches with common keys wait for each
	// other's key locks in one order and cannot deadlock.
	slices.SortStableFunc(rows, func(a, b int) int { return cmp.Compare(specs[a].Key, specs[b].Key) })
	n := len(rows)
	ids, kinds := make([]string, n), make([]string, n)
	keys := make([]*string, n)
	prios := make([]int32, n)
	runAts, updated := make([]time.Time, n), make([]time.Time, n)
	payloads, docs := make([][]byte, n), make([][]byte, n)
	var keyed []string
	for k, i := range rows {
		j := out[i].Job
		doc, err := encodeDoc(j)
		if err != nil {
			return nil, fmt.Errorf("pgstore: submit batch: spec %d: %w", i, err)
		}
		ids[k], kinds[k], prios[k] = j.ID, j.Kind, int32(j.Priority)
		runAts[k], updated[k], docs[k] = j.RunAt, j.UpdatedAt, doc
		if len(j.Payload) > 0 {
			payloads[k] = j.Payload
		}
		if j.Key != "" {
			keys[k] = &j.Key
			keyed = append(keyed, j.Key)
		}
	}

	if len(keyed) == 0 {
		// No key can be taken: one statement inserts every job, one
		// round trip and one commit.
		tag, err := s.pool.Exec(ctx, s.q.insertManyNew, ids, kinds, prios, runAts, updated, payloads, docs)
		if err == nil && tag.RowsAffected() != int64(n) {
			err = fmt.Errorf("inserted %d jobs of %d", tag.RowsAffected(), n)
		}
		if err != nil {
			return nil, s.fail(ctx, "submit batch", err)
		}
		for i := range out {
			out[i].Created = true
		}
		s.announceWork()
		return out, nil
	}
	var created map[string]bool
	var existing map[string]jobstore.Job
	for try := 0; ; try++ {
		var gone bool
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			created, existing, gone = map[string]bool{}, map[string]jobstore.Job{}, false
			rs, err := tx.Query(ctx, s.q.insertMany, ids, keys, kinds, prios, runAts, updated, payloads, docs)
			if err != nil {
				return err
			}
			for rs.Next() {
				var id string
				if err := rs.Scan(&id); err != nil {
					rs.Close()
					return err
				}
				created[id] = true
			}
			if err := rs.Err(); err != nil {
				return err
			}
			if len(created) < n && len(keyed) > 0 {
				rs, err := tx.Query(ctx, s.q.byKeys, keyed)
				if err != nil {
					return err
				}
				for rs.Next() {
					r, err := scanRow(rs)
					if err != nil {
						rs.Close()
						return err
					}
					existing[r.job.Key] = r.job
				}
				if err := rs.Err(); err != nil {
					return err
				}
			}
			for _, i := range rows {
				j := out[i].Job
				if !created[j.ID] && j.Key != "" {
					if _, ok := existing[j.Key]; !ok {
						gone = true // its job was pruned meanwhile: try again
					}
				}
			}
			if gone {
				return errRetry
			}
			return nil
		})
		if err == nil {
			break
		}
		if (errors.Is(err, errRetry) || isRetryable(err)) && try < 5 {
			continue
		}
		return nil, s.fail(ctx, "submit batch", err)
	}
	for i, spec := range specs {
		if spec.Key != "" && first[spec.Key] != i {
			continue
		}
		if created[out[i].Job.ID] {
			out[i].Created = true
			continue
		}
		out[i].Job = existing[spec.Key]
	}
	// A spec whose key an earlier spec took shares that job (found above,
	// or created by the earlier spec).
	for i, spec := range specs {
		if spec.Key != "" && first[spec.Key] != i {
			out[i] = jobstore.Submitted{Job: out[first[spec.Key]].Job}
		}
	}
	if len(created) > 0 {
		s.announceWork()
	}
	return out, nil
}

// errRetry makes a transaction roll back and run again.
var errRetry = errors.New("retry")

// isRetryable reports whether err is a deadlock or serialization failure,
// after which the transaction may simply run again.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}
