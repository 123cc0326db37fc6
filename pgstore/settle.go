package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// How the end of a job settles the jobs that wait for it.
//
// A submit that names a job (After, AfterKeys, AfterSpecs, a batch's
// jobs for a callback) first marks it depended on and holds it FOR SHARE
// (lockDeps), then reads its state, in its own transaction, before it
// inserts the waiting job. A write that ends a job (Complete, Cancel,
// Release, a dead worker's recovery: every write goes through write) takes
// the job's row lock, so it either comes before such a submit, which then
// waits for its commit and sees the job ended, or after it, when the
// submit has committed. If the write read the job depended on, it settles
// the job's waiting dependents in its own transaction, after its update
// (settleDependents): it locks them FOR UPDATE, then reads the states of
// their dependencies in a later statement, whose snapshot sees every
// commit made before the lock was granted. Of two transactions that end
// the last two dependencies of a job at once, the second to lock the job
// waits for the first to commit and sees both ends: the job is promoted
// once, by the second, never by neither. If the write read the job
// without the flag, its update is conditional on the version it read, and
// setting the flag counts a version: a submit that flagged the job first
// makes the write read the job again.
//
// A job that no one names pays nothing for this: its writes are the
// statements they were (Complete's batched statement included).

// settled is what settling wrote: the jobs, and how many are queued now.
type settled struct {
	ids    []string
	queued int
}

func (st *settled) add(o settled) {
	st.ids = append(st.ids, o.ids...)
	st.queued += o.queued
}

// signalSettled tells this store's waiters of the jobs settling wrote, once
// their transaction has committed; the other stores heard of them by the
// notifications of that transaction.
func (s *Store) signalSettled(st settled) {
	for _, id := range st.ids {
		s.signalJob(id)
	}
	if st.queued > 0 {
		s.signalWork()
	}
}

// writeEnd is write of a job that ends (j is terminal, r was not) and
// that others name (r.depended): the write and the settling of its
// waiting dependents are one transaction (a savepoint if q is a
// transaction).
func (s *Store) writeEnd(ctx context.Context, q dbtx, r row, j jobstore.Job, notifyJob bool) (row, error) {
	var nr row
	var st settled
	err := inTx(ctx, q, func(tx pgx.Tx) error {
		var err error
		if nr, err = s.writeRow(ctx, tx, r, j, notifyJob); err != nil {
			return err
		}
		st, err = s.settleDependents(ctx, tx, map[string]jobstore.State{j.ID: j.State})
		return err
	})
	if err != nil {
		return row{}, err
	}
	s.signalSettled(st)
	return nr, nil
}

// writeWaiting is write of a job that becomes waiting again (a Retry of
// a job with dependencies): its dependencies are locked as a submit
// locks them and it is settled at once (storekit.SettleRetry), in one
// transaction with its write. It returns an error wrapping
// jobstore.ErrDependencyFailed if a dependency is still failed or
// canceled.
func (s *Store) writeWaiting(ctx context.Context, q dbtx, r row, j jobstore.Job, notifyJob bool) (row, error) {
	var nr row
	err := inTx(ctx, q, func(tx pgx.Tx) error {
		states, err := s.lockDeps(ctx, tx, j.After)
		if err != nil {
			return err
		}
		sj, err := storekit.SettleRetry(j, lookupIn(states), usec(time.Now()))
		if err != nil {
			return &refusal{err}
		}
		nr, err = s.writeRow(ctx, tx, r, sj, notifyJob)
		return err
	})
	return nr, err
}

// refusal is an error of a change that the rules refuse, not of the
// database: change returns it without retrying.
type refusal struct{ err error }

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// lookupIn is a storekit.DepLookup of states: a job absent from it is
// gone.
func lookupIn(states map[string]jobstore.State) storekit.DepLookup {
	return func(id string) (jobstore.State, bool, error) {
		st, ok := states[id]
		return st, ok, nil
	}
}

// settleDependents settles the waiting jobs that name one of ended (the
// jobs tx has ended, and their states), and in turn the dependents of
// those it cancels. It returns what it wrote.
func (s *Store) settleDependents(ctx context.Context, tx pgx.Tx, ended map[string]jobstore.State) (settled, error) {
	var out settled
	for len(ended) > 0 {
		ids := slices.Sorted(maps.Keys(ended))
		st, next, err := s.settleSome(ctx, tx, s.q.deps.lockDependents, s.q.deps.depStates, ids, ended)
		if err != nil {
			return out, err
		}
		out.add(st)
		ended = next
	}
	return out, nil
}

// settleWaiting settles the waiting jobs ids, and the dependents of
// those it cancels: a sweep, an import.
func (s *Store) settleWaiting(ctx context.Context, tx pgx.Tx, ids []string) (settled, error) {
	st, ended, err := s.settleSome(ctx, tx, s.q.deps.lockWaiting, s.q.deps.waitingStates, ids, nil)
	if err != nil {
		return st, err
	}
	more, err := s.settleDependents(ctx, tx, ended)
	st.add(more)
	return st, err
}

// settleSome locks the waiting jobs that lock selects with arg, reads the
// states of their dependencies in a later statement (states, same
// argument), settles each (storekit.Settle, looking first at the one of
// ended it names, whose state ended gives), and writes those that
// change. It returns what it wrote and the jobs it canceled that others
// name.
func (s *Store) settleSome(ctx context.Context, tx pgx.Tx, lock, states string, arg []string, ended map[string]jobstore.State) (settled, map[string]jobstore.State, error) {
	b := &pgx.Batch{}
	b.Queue(lock, arg)
	b.Queue(states, arg)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rs, err := br.Query()
	if err != nil {
		return settled{}, nil, err
	}
	var waiting []row
	var sc rowScanner
	for rs.Next() {
		r, err := sc.scan(rs)
		if err != nil {
			rs.Close()
			return settled{}, nil, err
		}
		waiting = append(waiting, r)
	}
	if err := rs.Err(); err != nil {
		return settled{}, nil, err
	}
	// By dependent, the first of ended it names, and the states read of
	// its dependencies, in order: one absent succeeded, or does not
	// decide (see depStates).
	type deps struct {
		first  string
		after  []string
		states map[string]*string
	}
	got := map[string]*deps{}
	rs, err = br.Query()
	if err != nil {
		return settled{}, nil, err
	}
	for rs.Next() {
		var c string
		var first, dep, st *string
		if err := rs.Scan(&c, &first, &dep, &st); err != nil {
			rs.Close()
			return settled{}, nil, err
		}
		d := got[c]
		if d == nil {
			d = &deps{states: map[string]*string{}}
			got[c] = d
		}
		if first != nil {
			d.first = *first
		}
		if dep != nil {
			d.after = append(d.after, *dep)
			d.states[*dep] = st
		}
	}
	if err := rs.Err(); err != nil {
		return settled{}, nil, err
	}
	if err := br.Close(); err != nil {
		return settled{}, nil, err
	}
	now := usec(time.Now())
	var from []row
	var to []jobstore.Job
	canceled := map[string]jobstore.State{}
	for _, r := range waiting {
		d := got[r.job.ID]
		if d == nil {
			d = &deps{} // every dependency succeeded
		}
		// Settle walks the dependencies that decide: the one that ended
		// first, then those read; every other one succeeded.
		j := r.job
		j.After = d.after
		if d.first != "" {
			j.After = append([]string{d.first}, d.after...)
		}
		lookup := func(id string) (jobstore.State, bool, error) {
			if st, ok := d.states[id]; ok {
				if st == nil {
					return "", false, nil
				}
				return jobstore.State(*st), true, nil
			}
			if st, ok := ended[id]; ok {
				return st, true, nil
			}
			return jobstore.StateSucceeded, true, nil
		}
		j, changed, err := storekit.Settle(j, d.first, lookup, now)
		if err != nil {
			return settled{}, nil, err
		}
		if !changed {
			continue
		}
		from, to = append(from, r), append(to, j)
		if j.State == jobstore.StateCanceled && r.depended {
			canceled[j.ID] = j.State
		}
	}
	st, err := s.writeMany(ctx, tx, from, to)
	return st, canceled, err
}

// writeMany writes the jobs to over the rows from that tx holds locked,
// in one statement that notifies as update does, and fails unless it
// wrote every one.
func (s *Store) writeMany(ctx context.Context, tx pgx.Tx, from []row, to []jobstore.Job) (settled, error) {
	n := len(from)
	if n == 0 {
		return settled{}, nil
	}
	rows := newWrites(n)
	var out settled
	for k, j := range to {
		j = trimTimes(j)
		if err := rows.set(k, j, from[k].version); err != nil {
			return settled{}, fmt.Errorf("job %s: %w", j.ID, err)
		}
		out.ids = append(out.ids, j.ID)
		if j.State == jobstore.StateQueued {
			out.queued++
		}
	}
	tag, err := tx.Exec(ctx, s.q.completeMany, rows.args(s.q.chanWork, s.q.chanJob)...)
	if err != nil {
		return settled{}, err
	}
	if tag.RowsAffected() != int64(n) {
		return settled{}, fmt.Errorf("settled %d waiting jobs of %d that were locked", tag.RowsAffected(), n)
	}
	return out, nil
}

// sweepPage is how many waiting jobs one statement of sweepWaiting reads.
const sweepPage = 500

// sweepEvery is how often a store sweeps the waiting jobs (and once when
// it opens).
const sweepEvery = time.Minute

// sweepWaiting settles the waiting jobs whose dependencies say they
// should wait no longer: a belt for what no write of this version leaves
// (an end written by a process of the release before, or by hand). It
// reads the waiting jobs page by page from the state index; each page
// that holds some is settled in a transaction of its own. Then it removes
// the rows of batches left without jobs that a prune or a delete failed
// to remove.
func (s *Store) sweepWaiting(ctx context.Context) error {
	rs, err := s.pool.Query(ctx, s.q.deps.emptyBatches)
	if err != nil {
		return fmt.Errorf("pgstore: sweep batches: %w", err)
	}
	empty, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("pgstore: sweep batches: %w", err)
	}
	names := map[string]bool{}
	for _, n := range empty {
		names[n] = true
	}
	if err := s.dropBatches(ctx, names); err != nil {
		return fmt.Errorf("pgstore: sweep batches: %w", err)
	}
	after := ""
	for {
		var last *string
		var ids []string
		if err := s.pool.QueryRow(ctx, s.q.deps.sweep, after, sweepPage).Scan(&last, &ids); err != nil {
			return fmt.Errorf("pgstore: sweep waiting jobs: %w", err)
		}
		if len(ids) > 0 {
			var st settled
			err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
				var err error
				st, err = s.settleWaiting(ctx, tx, ids)
				return err
			})
			if err != nil {
				return fmt.Errorf("pgstore: sweep waiting jobs: %w", err)
			}
			s.signalSettled(st)
			if len(st.ids) > 0 {
				s.opts.Logger.Warn("pgstore: waiting jobs whose dependencies had ended were settled by the sweep",
					"jobs", len(st.ids))
			}
		}
		if last == nil {
			return nil
		}
		after = *last
	}
}
