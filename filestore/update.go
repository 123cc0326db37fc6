package filestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Cancel cancels job id. A queued job's canceled record is written into
// done/ (durably) before its queued/ entry is removed, under the record
// lock, so a claimer that was waiting for that lock finds the job gone. A
// running job's record in claimed/ is rewritten with CancelRequested; the
// worker's WatchCancel, in whatever process, sees the rewrite.
func (s *Store) Cancel(ctx context.Context, id string) (jobstore.Job, error) {
	return s.update(ctx, "cancel", id, func(j jobstore.Job) (jobstore.Job, bool, error) {
		return storekit.ApplyCancel(j, time.Now())
	})
}

// Retry queues a failed or canceled job again, due now; a job with
// dependencies waits for them again, or is queued at once if they all
// ended as it needs (storekit.SettleRetry).
func (s *Store) Retry(ctx context.Context, id string) (jobstore.Job, error) {
	return s.update(ctx, "retry", id, func(j jobstore.Job) (jobstore.Job, bool, error) {
		now := time.Now()
		j, err := storekit.ApplyRetry(j, now)
		if err == nil && j.State == jobstore.StateWaiting {
			j, err = storekit.SettleRetry(j, s.depLookup(ctx), now)
		}
		return j, err == nil, err
	})
}

// update applies fn to job id's record under its exclusive lock and, if fn
// changed it, stores the result durably; a job it ended settles the jobs
// that wait for it, once the lock is released.
func (s *Store) update(ctx context.Context, op, id string, fn func(jobstore.Job) (jobstore.Job, bool, error)) (jobstore.Job, error) {
	j, changed, err := s.change(ctx, op, id, fn)
	if err == nil && changed && j.State.Terminal() {
		s.afterEnd(ctx, j)
	}
	return j, err
}

// change is update without the settling of dependents; it reports whether
// fn changed the job.
func (s *Store) change(ctx context.Context, op, id string, fn func(jobstore.Job) (jobstore.Job, bool, error)) (jobstore.Job, bool, error) {
	return s.changeWith(ctx, op, id, s.lockJob, fn)
}

// changeWith is change that takes the record lock with lock: lockJob,
// which waits for it, or lockJobNow, which does not.
func (s *Store) changeWith(ctx context.Context, op, id string, lock func(context.Context, string) (func(), error), fn func(jobstore.Job) (jobstore.Job, bool, error)) (jobstore.Job, bool, error) {
	if err := s.enter(ctx, op); err != nil {
		return jobstore.Job{}, false, err
	}
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("filestore: %s: %w", op, err)
	}
	unlock, err := lock(ctx, id)
	if err != nil {
		return jobstore.Job{}, false, fmt.Errorf("filestore: %s: %w", op, err)
	}
	defer unlock()
	rec, err := s.readJob(id, true)
	if err != nil {
		return jobstore.Job{}, false, fmt.Errorf("filestore: %s: %w", op, err)
	}
	j, changed, err := fn(rec.Job)
	if err != nil {
		return rec.Job, false, fmt.Errorf("filestore: %s: %w", op, err)
	}
	if !changed {
		return j, false, nil
	}
	if _, err := s.store(rec, j, true); err != nil {
		return rec.Job, false, fmt.Errorf("filestore: %s %s: %w", op, id, err)
	}
	s.setCand(j)
	return j, true, nil
}
