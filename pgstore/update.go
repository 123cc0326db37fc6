package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// errConflict is write's answer when the row changed since it was read.
var errConflict = errors.New("row changed since it was read")

// write stores j as the new state of the job that r was read as, if the row
// has not changed since (its version), and returns the row as written.
// The statement notifies the work channel if j is queued, and the job
// channel if notifyJob is set or j is terminal and a Wait watches it. A
// write that ends a job that others name settles them in the same
// transaction (writeEnd), and one that makes a job wait again settles it
// against its dependencies (writeWaiting); see settle.go.
func (s *Store) write(ctx context.Context, q dbtx, r row, j jobstore.Job, notifyJob bool) (row, error) {
	switch {
	case r.depended && !r.job.State.Terminal() && j.State.Terminal():
		return s.writeEnd(ctx, q, r, j, notifyJob)
	case j.State == jobstore.StateWaiting && r.job.State != jobstore.StateWaiting:
		return s.writeWaiting(ctx, q, r, j, notifyJob)
	}
	return s.writeRow(ctx, q, r, j, notifyJob)
}

// writeRow is write of one row, in one statement.
func (s *Store) writeRow(ctx context.Context, q querier, r row, j jobstore.Job, notifyJob bool) (row, error) {
	j = trimTimes(j)
	doc, err := encodeDoc(j)
	if err != nil {
		return row{}, err
	}
	var nw, nj int64
	nr, err := scanRow(q.QueryRow(ctx, s.q.update, j.ID, r.version, string(j.State), j.Priority, j.RunAt,
		j.Attempt, j.Worker, nullTime(j.StartedAt), j.UpdatedAt, nullTime(j.FinishedAt), j.CancelRequested,
		nullBytes(j.Result), doc, notifyJob, s.q.chanWork, s.q.chanJob), &nw, &nj)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, errConflict
	}
	return nr, err
}

// getRow reads the job id, or fails with an error wrapping
// jobstore.ErrNotFound.
func (s *Store) getRow(ctx context.Context, q querier, id string) (row, error) {
	r, err := scanRow(q.QueryRow(ctx, s.q.get, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("job %s: %w", id, jobstore.ErrNotFound)
	}
	return r, err
}

// change reads the job id, applies f to it and writes the result back if f
// reports a change, starting over if the row changed meanwhile: an
// optimistic read-modify-write, with the state machine in Go (the
// storekit.Apply functions) and no transaction held across the two
// statements.
func (s *Store) change(ctx context.Context, op, id string, f func(r row, now time.Time) (j jobstore.Job, changed, notifyJob bool, err error)) (jobstore.Job, error) {
	if err := s.check(ctx, op); err != nil {
		return jobstore.Job{}, err
	}
	for {
		r, err := s.getRow(ctx, s.pool, id)
		if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrCorrupt) {
			return jobstore.Job{}, fmt.Errorf("pgstore: %s: %w", op, err)
		}
		if err != nil {
			return jobstore.Job{}, s.fail(ctx, op, err)
		}
		j, changed, notifyJob, err := f(r, usec(time.Now()))
		if err != nil {
			return jobstore.Job{}, fmt.Errorf("pgstore: %s: %w", op, err)
		}
		if !changed {
			return r.job, nil
		}
		nr, err := s.write(ctx, s.pool, r, j, notifyJob)
		if errors.Is(err, errConflict) {
			continue
		}
		if _, ok := errors.AsType[*refusal](err); ok {
			return jobstore.Job{}, fmt.Errorf("pgstore: %s: %w", op, err)
		}
		if err != nil {
			return jobstore.Job{}, s.fail(ctx, op, err)
		}
		s.signalJob(id)
		if nr.job.State == jobstore.StateQueued {
			s.signalWork()
		}
		return nr.job, nil
	}
}

// forget drops what the store remembers of lease.
func (s *Store) forget(lease jobstore.Lease) {
	s.mu.Lock()
	delete(s.held, lease)
	s.mu.Unlock()
}

// Cancel cancels the job with the given ID and returns it: a queued job
// becomes canceled, a running one gets CancelRequested (its worker's
// WatchCancel returns, in whatever process it runs), and a canceled one is
// returned unchanged. Returns a *jobstore.TransitionError for a succeeded
// or failed job, and an error wrapping jobstore.ErrNotFound for an unknown
// one.
func (s *Store) Cancel(ctx context.Context, id string) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: cancel: %w", err)
	}
	return s.change(ctx, "cancel", id, func(r row, now time.Time) (jobstore.Job, bool, bool, error) {
		j, changed, err := storekit.ApplyCancel(r.job, now)
		return j, changed, true, err
	})
}

// Retry queues a failed or canceled job again, due now, and returns it.
// Returns a *jobstore.TransitionError for a job in another state, and an
// error wrapping jobstore.ErrNotFound for an unknown one.
func (s *Store) Retry(ctx context.Context, id string) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: retry: %w", err)
	}
	return s.change(ctx, "retry", id, func(r row, now time.Time) (jobstore.Job, bool, bool, error) {
		j, err := storekit.ApplyRetry(r.job, now)
		return j, true, false, err
	})
}
