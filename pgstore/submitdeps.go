package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// needsPlan reports whether a submit of specs must read the store before
// it inserts: a spec names dependencies or a batch. Other submits are the
// statements they always were.
func needsPlan(specs []jobstore.Spec) bool {
	for _, spec := range specs {
		if spec.HasDeps() || spec.Batch != "" {
			return true
		}
	}
	return false
}

// submitPlanned submits specs (a SubmitBatch if many, else one Submit)
// that name dependencies or batches, in one transaction of db (a
// savepoint if db is a transaction): plan reads and locks what they name,
// works out each job, and inserts them all, or nothing. It runs again if
// a key was taken meanwhile. It reports whether it queued a job (to be
// announced once committed). An error the rules give (a missing
// dependency, a closed batch) is a *refusal.
func (s *Store) submitPlanned(ctx context.Context, db dbtx, specs []jobstore.Spec, many bool) ([]jobstore.Submitted, bool, error) {
	for try := 0; ; try++ {
		var out []jobstore.Submitted
		err := inTx(ctx, db, func(tx pgx.Tx) error {
			var err error
			out, err = s.plan(ctx, tx, specs, many)
			return err
		})
		if errors.Is(err, errRetry) && try < 5 {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		queued := false
		for _, r := range out {
			queued = queued || (r.Created && r.Job.State == jobstore.StateQueued)
		}
		return out, queued, nil
	}
}

// plan is submitPlanned's transaction, in the steps of memstore's plan:
//
//  1. the batches the specs join are locked FOR SHARE, those they close
//     FOR UPDATE (in name order), and a closed batch's jobs read;
//  2. the jobs of the keys they give and name are read;
//  3. the jobs they name are marked depended on and locked FOR SHARE, and
//     their states read (lockDeps);
//  4. each spec's job is worked out in order: the job of its key, or a new
//     one with its dependencies resolved (storekit.ResolveAfter) and
//     settled (storekit.Settle: waiting, queued, or canceled);
//  5. the new jobs are inserted in one statement (errRetry if a key was
//     taken meanwhile), and the batches closed.
func (s *Store) plan(ctx context.Context, tx pgx.Tx, specs []jobstore.Spec, many bool) ([]jobstore.Submitted, error) {
	now := usec(time.Now())
	// 1. Batches.
	exclusive := map[string]bool{}
	for _, spec := range specs {
		if _, ok := exclusive[spec.Batch]; !ok && spec.Batch != "" {
			exclusive[spec.Batch] = false
		}
		if spec.AfterBatch != "" {
			exclusive[spec.AfterBatch] = true
		}
	}
	closed := map[string]bool{}
	members := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(exclusive)) {
		c, err := s.lockBatch(ctx, tx, name, exclusive[name])
		if err != nil {
			return nil, err
		}
		closed[name] = c
		if exclusive[name] {
			if members[name], err = s.members(ctx, tx, name); err != nil {
				return nil, err
			}
		}
	}
	// 2. Keys.
	var keys []string
	for _, spec := range specs {
		if spec.Key != "" {
			keys = append(keys, spec.Key)
		}
		keys = append(keys, spec.AfterKeys...)
	}
	existing := map[string]jobstore.Job{}
	if len(keys) > 0 {
		rs, err := tx.Query(ctx, s.q.byKeys, keys)
		if err != nil {
			return nil, err
		}
		var sc rowScanner
		for rs.Next() {
			r, err := sc.scan(rs)
			if err != nil {
				rs.Close()
				return nil, err
			}
			existing[r.job.Key] = r.job
		}
		if err := rs.Err(); err != nil {
			return nil, err
		}
	}
	// 3. The jobs named.
	named := map[string]bool{}
	for _, spec := range specs {
		for _, id := range spec.After {
			named[id] = true
		}
		for _, k := range spec.AfterKeys {
			if j, ok := existing[k]; ok {
				named[j.ID] = true
			}
		}
	}
	for _, ms := range members {
		for _, id := range ms {
			named[id] = true
		}
	}
	states, err := s.lockDeps(ctx, tx, slices.Sorted(maps.Keys(named)))
	if err != nil {
		return nil, err
	}
	// 4. Each spec's job.
	out := make([]jobstore.Submitted, len(specs))
	earlier := make([]string, 0, len(specs))
	byKey := map[string]string{}    // keys of the new jobs
	joined := map[string][]string{} // batch -> its new jobs
	closing := map[string]bool{}    // batches a callback closes
	planned := map[string]int{}     // new job ID -> its spec
	refuse := func(i int, err error) error {
		if many {
			err = fmt.Errorf("spec %d: %w", i, err)
		}
		return &refusal{err}
	}
	for i, spec := range specs {
		if spec.Key != "" {
			if id, ok := byKey[spec.Key]; ok {
				out[i] = jobstore.Submitted{Job: out[planned[id]].Job}
				earlier = append(earlier, id)
				continue
			}
			if j, ok := existing[spec.Key]; ok {
				out[i] = jobstore.Submitted{Job: j}
				earlier = append(earlier, j.ID)
				continue
			}
		}
		var prior []string
		if many {
			prior = earlier
		}
		ids, err := storekit.ResolveAfter(spec, func(key string) (string, error) {
			if id, ok := byKey[key]; ok {
				return id, nil
			}
			return existing[key].ID, nil
		}, prior)
		if err != nil {
			return nil, refuse(i, err)
		}
		for _, id := range spec.After {
			if _, ok := states[id]; !ok {
				return nil, refuse(i, storekit.DependencyMissing(id))
			}
		}
		if b := spec.Batch; b != "" && (closing[b] || closed[b]) {
			return nil, refuse(i, storekit.BatchClosed(b))
		}
		if b := spec.AfterBatch; b != "" {
			var ms []string
			for _, id := range members[b] {
				if _, ok := states[id]; ok { // not pruned since it was read
					ms = append(ms, id)
				}
			}
			ms = append(ms, joined[b]...)
			if len(ms) == 0 {
				return nil, refuse(i, storekit.BatchEmpty(b))
			}
			if len(ms) > jobstore.MaxAfter {
				return nil, refuse(i, storekit.BatchTooLarge(b, len(ms)))
			}
			ids = append(ids, ms...)
			closing[b] = true
		}
		j := trimTimes(jobstore.NewJob(spec, now))
		j.SetAfter(ids)
		j, _, _ = storekit.Settle(j, "", lookupIn(states), now)
		states[j.ID] = j.State
		if spec.Key != "" {
			byKey[spec.Key] = j.ID
		}
		if spec.Batch != "" {
			joined[spec.Batch] = append(joined[spec.Batch], j.ID)
		}
		planned[j.ID] = i
		out[i] = jobstore.Submitted{Job: j, Created: true}
		earlier = append(earlier, j.ID)
	}
	// 5. Insert, close.
	if err := s.insertPlanned(ctx, tx, out); err != nil {
		return nil, err
	}
	if len(closing) > 0 {
		if _, err := tx.Exec(ctx, s.q.deps.closeBatches, slices.Sorted(maps.Keys(closing))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// insertPlanned inserts the new jobs of out in one statement, in key
// order (as SubmitBatch does, so that submits of common keys do not
// deadlock), each marked depended on if a later one names it. It returns
// errRetry if a key was taken since plan read it.
func (s *Store) insertPlanned(ctx context.Context, tx pgx.Tx, out []jobstore.Submitted) error {
	var jobs []jobstore.Job
	named := map[string]bool{}
	for _, r := range out {
		if r.Created {
			jobs = append(jobs, r.Job)
			for _, id := range r.Job.After {
				named[id] = true
			}
		}
	}
	slices.SortStableFunc(jobs, func(a, b jobstore.Job) int { return cmp.Compare(a.Key, b.Key) })
	n := len(jobs)
	var (
		ids, kinds, queues, states = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		keys, parts                = make([]*string, n), make([]*string, n)
		tags, metas                = make([]*string, n), make([]*string, n)
		after, batches, callbacks  = make([]*string, n), make([]*string, n), make([]*string, n)
		prios                      = make([]int32, n)
		runAts, updated, finished  = make([]time.Time, n), make([]time.Time, n), make([]*time.Time, n)
		payloads, docs             = make([][]byte, n), make([][]byte, n)
		anys, depended             = make([]bool, n), make([]bool, n)
	)
	for k, j := range jobs {
		doc, err := encodeDoc(j)
		if err != nil {
			return &refusal{fmt.Errorf("job %s: %w", j.ID, err)}
		}
		if tags[k], metas[k], err = labels(j); err != nil {
			return &refusal{fmt.Errorf("job %s: %w", j.ID, err)}
		}
		ids[k], kinds[k], queues[k], states[k] = j.ID, j.Kind, j.Queue, string(j.State)
		keys[k], parts[k] = nullString(j.Key), nullString(j.Partition)
		prios[k], runAts[k], updated[k] = int32(j.Priority), j.RunAt, j.UpdatedAt
		if !j.FinishedAt.IsZero() {
			finished[k] = &jobs[k].FinishedAt
		}
		if len(j.Payload) > 0 {
			payloads[k] = j.Payload
		}
		docs[k] = doc
		after[k], anys[k] = joinIDs(j.After), j.AfterAny
		batches[k], callbacks[k] = nullString(j.Batch), nullString(j.AfterBatch)
		depended[k] = named[j.ID]
	}
	rs, err := tx.Query(ctx, s.q.deps.insert, ids, keys, kinds, queues, parts, states, prios, runAts, updated, finished,
		payloads, docs, tags, metas, after, anys, batches, callbacks, depended)
	if err != nil {
		return err
	}
	got, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(got) < n {
		return errRetry // a key was taken meanwhile: plan again, and find its job
	}
	return nil
}

// submitErr is the error of a planned submit op: a refusal as it is,
// with the op; others as s.fail says.
func (s *Store) submitErr(ctx context.Context, op string, err error) error {
	if _, ok := errors.AsType[*refusal](err); ok {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return s.fail(ctx, op, err)
}
