package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.Importer = (*Store)(nil)

// errKeyTaken rolls back an Import whose job's key names another job.
type errKeyTaken struct{ id, key, owner string }

func (e *errKeyTaken) Error() string {
	return fmt.Sprintf("job %s: %v: key %q belongs to job %s", e.id, jobstore.ErrKeyTaken, e.key, e.owner)
}

func (e *errKeyTaken) Unwrap() error { return jobstore.ErrKeyTaken }

// Import adds jobs made by another store, keeping their IDs and every
// field, as jobstore.Importer says; a job whose ID is here already is left
// alone. The jobs are inserted in one statement of one transaction: on an
// error none of them is added.
func (s *Store) Import(ctx context.Context, jobs []jobstore.Job) (int, error) {
	if err := storekit.ValidateImports(jobs, s.opts.MaxPayload); err != nil {
		return 0, fmt.Errorf("pgstore: import: %w", err)
	}
	for _, j := range jobs {
		if j.RunAt.Year() > maxRunAtYear {
			return 0, fmt.Errorf("pgstore: import: job %s: %w: run_at %s is after the year %d", j.ID, jobstore.ErrInvalidInput, j.RunAt, maxRunAtYear)
		}
	}
	if err := s.check(ctx, "import"); err != nil {
		return 0, err
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	n := len(jobs)
	var (
		ids, kinds, states, workers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		queues                      = make([]string, n)
		keys, parts                 = make([]*string, n), make([]*string, n)
		prios, attempts             = make([]int32, n), make([]int32, n)
		runAts, updated             = make([]time.Time, n), make([]time.Time, n)
		started, finished           = make([]*time.Time, n), make([]*time.Time, n)
		cancels                     = make([]bool, n)
		payloads, results, docs     = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		tags, metas                 = make([]*string, n), make([]*string, n)
		after, batches, callbacks   = make([]*string, n), make([]*string, n), make([]*string, n)
		anys, depended              = make([]bool, n), make([]bool, n)
		queued                      bool
		// named holds the jobs the imported jobs name; outside lists
		// those of them not imported here, which a submit would lock;
		// batchNames and closing the batches of the imported jobs.
		named       = map[string]bool{}
		outside     []string
		batchNames  []string
		closing     []bool
		waitingJobs bool
	)
	imported := make(map[string]bool, n)
	for _, j := range jobs {
		imported[j.ID] = true
		for _, id := range j.After {
			named[id] = true
		}
		waitingJobs = waitingJobs || j.State == jobstore.StateWaiting
	}
	for id := range named {
		if !imported[id] {
			outside = append(outside, id)
		}
	}
	slices.Sort(outside)
	for i, j := range jobs {
		j = trimTimes(j)
		doc, err := encodeDoc(j)
		if err != nil {
			return 0, fmt.Errorf("pgstore: import: job %s: %w", j.ID, err)
		}
		if tags[i], metas[i], err = labels(j); err != nil {
			return 0, fmt.Errorf("pgstore: import: job %s: %w", j.ID, err)
		}
		ids[i], kinds[i], states[i], workers[i] = j.ID, j.Kind, string(j.State), j.Worker
		queues[i] = jobstore.QueueOf(j.Queue)
		if j.Key != "" {
			keys[i] = &j.Key
		}
		if j.Partition != "" {
			parts[i] = &j.Partition
		}
		prios[i], attempts[i] = int32(j.Priority), int32(j.Attempt)
		runAts[i], updated[i] = j.RunAt, j.UpdatedAt
		if !j.StartedAt.IsZero() {
			started[i] = &j.StartedAt
		}
		if !j.FinishedAt.IsZero() {
			finished[i] = &j.FinishedAt
		}
		cancels[i] = j.CancelRequested
		if len(j.Payload) > 0 {
			payloads[i] = j.Payload
		}
		if len(j.Result) > 0 {
			results[i] = j.Result
		}
		docs[i] = doc
		queued = queued || j.State == jobstore.StateQueued
		after[i], anys[i] = joinIDs(j.After), j.AfterAny
		batches[i], callbacks[i] = nullString(j.Batch), nullString(j.AfterBatch)
		depended[i] = named[j.ID]
		if j.Batch != "" {
			batchNames, closing = append(batchNames, j.Batch), append(closing, false)
		}
		if j.AfterBatch != "" {
			batchNames, closing = append(batchNames, j.AfterBatch), append(closing, true)
		}
	}
	added := 0
	var st settled
	insert := func(tx pgx.Tx) error {
		added, st = 0, settled{}
		// The jobs of the store that imported jobs name are marked and
		// locked as a submit's dependencies are (see settle.go).
		if _, err := s.lockDeps(ctx, tx, outside); err != nil {
			return err
		}
		rs, err := tx.Query(ctx, s.q.importMany, ids, keys, kinds, states, prios, runAts, attempts, workers,
			started, updated, finished, cancels, payloads, results, docs, queues, parts, tags, metas,
			after, anys, batches, callbacks, depended)
		if err != nil {
			return err
		}
		inserted := map[string]bool{}
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return err
			}
			inserted[id] = true
		}
		if err := rs.Err(); err != nil {
			return err
		}
		added = len(inserted)
		if len(batchNames) > 0 {
			if _, err := tx.Exec(ctx, s.q.importBatches, batchNames, closing); err != nil {
				return err
			}
		}
		if waitingJobs {
			// Imported jobs that wait may find their dependencies ended.
			var waiting []string
			for _, j := range jobs {
				if j.State == jobstore.StateWaiting && inserted[j.ID] {
					waiting = append(waiting, j.ID)
				}
			}
			if st, err = s.settleWaiting(ctx, tx, waiting); err != nil {
				return err
			}
		}
		if added == n {
			if queued {
				_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.q.chanWork)
			}
			return err
		}
		// The jobs not inserted either exist (fine) or have a key that
		// another job holds.
		var present []string
		if err := tx.QueryRow(ctx, s.q.presentIDs, ids).Scan(&present); err != nil {
			return err
		}
		here := map[string]bool{}
		for _, id := range present {
			here[id] = true
		}
		for _, j := range jobs {
			if inserted[j.ID] || here[j.ID] {
				continue
			}
			var owner string
			if err := tx.QueryRow(ctx, `SELECT id FROM `+s.q.schema+`.jobs WHERE key = $1`, j.Key).Scan(&owner); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					// Its key's job was pruned meanwhile; so was its
					// place in this insert: run again.
					return errRetry
				}
				return err
			}
			return &errKeyTaken{id: j.ID, key: j.Key, owner: owner}
		}
		if queued && added > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.q.chanWork)
		}
		return err
	}
	for try := 0; ; try++ {
		err := pgx.BeginFunc(ctx, s.pool, insert)
		var kt *errKeyTaken
		switch {
		case err == nil:
		case errors.As(err, &kt):
			return 0, fmt.Errorf("pgstore: import: %w", err)
		case (errors.Is(err, errRetry) || isRetryable(err)) && try < 5:
			continue
		default:
			return 0, s.fail(ctx, "import", err)
		}
		break
	}
	if queued && added > 0 {
		s.announceWork() // workers of other processes may wait for these too
	}
	s.signalSettled(st)
	return added, nil
}
