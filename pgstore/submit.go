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
	"github.com/jobdir/jobdir/jobstore/storekit"
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
	if needsPlan([]jobstore.Spec{spec}) {
		out, queued, err := s.submitPlanned(ctx, s.pool, []jobstore.Spec{spec}, false)
		if err != nil {
			return jobstore.Job{}, false, s.submitErr(ctx, "submit", err)
		}
		if queued {
			s.announceWork()
		}
		return out[0].Job, out[0].Created, nil
	}
	j, created, err := s.insertJob(ctx, s.pool, spec, "submit", func(err error) error { return s.fail(ctx, "submit", err) })
	if created {
		s.announceWork()
	}
	return j, created, err
}

// insertJob inserts a job of spec through q (the store's pool, or a
// caller's transaction) and reports created=true, or returns the job that
// holds spec.Key, as Submit describes; dbErr wraps the database's errors,
// op names the operation in the others.
func (s *Store) insertJob(ctx context.Context, q querier, spec jobstore.Spec, op string, dbErr func(error) error) (jobstore.Job, bool, error) {
	for try := 0; ; try++ {
		j := trimTimes(jobstore.NewJob(spec, time.Now()))
		doc, err := encodeDoc(j)
		if err != nil {
			return jobstore.Job{}, false, fmt.Errorf("pgstore: %s: %w", op, err)
		}
		tags, meta, err := labels(j)
		if err != nil {
			return jobstore.Job{}, false, fmt.Errorf("pgstore: %s: %w", op, err)
		}
		var id string
		err = q.QueryRow(ctx, s.q.insert, j.ID, nullKey(j.Key), j.Kind, j.Priority, j.RunAt, j.UpdatedAt,
			nullBytes(j.Payload), doc, j.Queue, nullKey(j.Partition), tags, meta).Scan(&id)
		if err == nil {
			return j, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return jobstore.Job{}, false, dbErr(err)
		}
		// The key has a job.
		r, err := scanRow(q.QueryRow(ctx, s.q.byKey, j.Key))
		if err == nil {
			return r.job, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) || try >= 3 {
			return jobstore.Job{}, false, dbErr(err)
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
	if needsPlan(specs) {
		if err := s.validateBatch(ctx, "submit batch", specs); err != nil {
			return nil, err
		}
		out, queued, err := s.submitPlanned(ctx, s.pool, specs, true)
		if err != nil {
			return nil, s.submitErr(ctx, "submit batch", err)
		}
		if queued {
			s.announceWork()
		}
		return out, nil
	}
	b, err := s.newBatch(ctx, "submit batch", specs)
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return b.out, nil
	}
	if len(b.keyed) == 0 {
		// No key can be taken: one statement inserts every job, one
		// round trip and one commit.
		tag, err := s.pool.Exec(ctx, s.q.insertManyNew, b.ids, b.kinds, b.prios, b.runAts, b.updated, b.payloads, b.docs, b.queues, b.parts, b.tags, b.metas)
		if err == nil && tag.RowsAffected() != int64(len(b.rows)) {
			err = fmt.Errorf("inserted %d jobs of %d", tag.RowsAffected(), len(b.rows))
		}
		if err != nil {
			return nil, s.fail(ctx, "submit batch", err)
		}
		for i := range b.out {
			b.out[i].Created = true
		}
		s.announceWork()
		return b.out, nil
	}
	for try := 0; ; try++ {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.insertBatch(ctx, tx, b) })
		if err == nil {
			break
		}
		if (errors.Is(err, errRetry) || isRetryable(err)) && try < 5 {
			continue
		}
		return nil, s.fail(ctx, "submit batch", err)
	}
	out := b.results(specs)
	if len(b.created) > 0 {
		s.announceWork()
	}
	return out, nil
}

// batch is a SubmitBatch being made: the jobs of its specs, the columns
// of the rows it inserts, and what the insert found.
type batch struct {
	out             []jobstore.Submitted
	first           map[string]int // key -> index of the first spec with it
	rows            []int          // the specs that make a job, unless their key has one
	ids, kinds      []string
	queues          []string
	keys, parts     []*string // NULL for none
	tags, metas     []*string // NULL for none
	prios           []int32
	runAts, updated []time.Time
	payloads, docs  [][]byte
	keyed           []string
	created         map[string]bool
	existing        map[string]jobstore.Job
}

// validateBatch checks the specs of a SubmitBatch op, and that it may
// proceed.
func (s *Store) validateBatch(ctx context.Context, op string, specs []jobstore.Spec) error {
	if err := storekit.ValidateBatch(specs, s.opts.MaxPayload); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if err := validateSpecs(specs); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return s.check(ctx, op)
}

// newBatch validates specs and makes their jobs and rows.
func (s *Store) newBatch(ctx context.Context, op string, specs []jobstore.Spec) (*batch, error) {
	b := &batch{out: make([]jobstore.Submitted, len(specs)), first: map[string]int{}}
	if err := s.validateBatch(ctx, op, specs); err != nil {
		return b, err
	}
	now := time.Now()
	for i, spec := range specs {
		if spec.Key != "" {
			if _, dup := b.first[spec.Key]; dup {
				continue
			}
			b.first[spec.Key] = i
		}
		b.out[i].Job = trimTimes(jobstore.NewJob(spec, now))
		b.rows = append(b.rows, i)
	}
	// Insert in key order, so that batches with common keys wait for each
	// other's key locks in one order and cannot deadlock.
	slices.SortStableFunc(b.rows, func(x, y int) int { return cmp.Compare(specs[x].Key, specs[y].Key) })
	n := len(b.rows)
	b.ids, b.kinds, b.queues = make([]string, n), make([]string, n), make([]string, n)
	b.keys, b.parts = make([]*string, n), make([]*string, n)
	b.tags, b.metas = make([]*string, n), make([]*string, n)
	b.prios = make([]int32, n)
	b.runAts, b.updated = make([]time.Time, n), make([]time.Time, n)
	b.payloads, b.docs = make([][]byte, n), make([][]byte, n)
	for k, i := range b.rows {
		j := b.out[i].Job
		doc, err := encodeDoc(j)
		if err != nil {
			return b, fmt.Errorf("pgstore: %s: spec %d: %w", op, i, err)
		}
		if b.tags[k], b.metas[k], err = labels(j); err != nil {
			return b, fmt.Errorf("pgstore: %s: spec %d: %w", op, i, err)
		}
		b.ids[k], b.kinds[k], b.queues[k], b.prios[k] = j.ID, j.Kind, j.Queue, int32(j.Priority)
		b.runAts[k], b.updated[k], b.docs[k] = j.RunAt, j.UpdatedAt, doc
		if len(j.Payload) > 0 {
			b.payloads[k] = j.Payload
		}
		if j.Partition != "" {
			b.parts[k] = &b.out[i].Job.Partition
		}
		if j.Key != "" {
			b.keys[k] = &b.out[i].Job.Key
			b.keyed = append(b.keyed, j.Key)
		}
	}
	return b, nil
}

// insertBatch inserts b's rows in tx and reads the jobs that hold the
// keys of those it did not insert. It returns errRetry if such a job was
// pruned meanwhile.
func (s *Store) insertBatch(ctx context.Context, tx pgx.Tx, b *batch) error {
	b.created, b.existing = map[string]bool{}, map[string]jobstore.Job{}
	rs, err := tx.Query(ctx, s.q.insertMany, b.ids, b.keys, b.kinds, b.prios, b.runAts, b.updated, b.payloads, b.docs, b.queues, b.parts, b.tags, b.metas)
	if err != nil {
		return err
	}
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return err
		}
		b.created[id] = true
	}
	if err := rs.Err(); err != nil {
		return err
	}
	if len(b.created) < len(b.rows) && len(b.keyed) > 0 {
		rs, err := tx.Query(ctx, s.q.byKeys, b.keyed)
		if err != nil {
			return err
		}
		var sc rowScanner
		for rs.Next() {
			r, err := sc.scan(rs)
			if err != nil {
				rs.Close()
				return err
			}
			b.existing[r.job.Key] = r.job
		}
		if err := rs.Err(); err != nil {
			return err
		}
	}
	for _, i := range b.rows {
		j := b.out[i].Job
		if !b.created[j.ID] && j.Key != "" {
			if _, ok := b.existing[j.Key]; !ok {
				return errRetry // its job was pruned meanwhile: try again
			}
		}
	}
	return nil
}

// results is what SubmitBatch returns for specs once b is inserted.
func (b *batch) results(specs []jobstore.Spec) []jobstore.Submitted {
	out := b.out
	for i, spec := range specs {
		if spec.Key != "" && b.first[spec.Key] != i {
			continue
		}
		if b.created[out[i].Job.ID] {
			out[i].Created = true
			continue
		}
		out[i].Job = b.existing[spec.Key]
	}
	// A spec whose key an earlier spec took shares that job (found above,
	// or created by the earlier spec).
	for i, spec := range specs {
		if spec.Key != "" && b.first[spec.Key] != i {
			out[i] = jobstore.Submitted{Job: out[b.first[spec.Key]].Job}
		}
	}
	return out
}

// errRetry makes a transaction roll back and run again.
var errRetry = errors.New("retry")

// isRetryable reports whether err is a deadlock or serialization failure,
// after which the transaction may simply run again.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}
