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

// Retry queues a failed or canceled job again, due now.
func (s *Store) Retry(ctx context.Context, id string) (jobstore.Job, error) {
	return s.update(ctx, "retry", id, func(j jobstore.Job) (jobstore.Job, bool, error) {
		j, err := storekit.ApplyRetry(j, time.Now())
		return j, err == nil, err
	})
}

// update applies fn to job id's record under its exclusive lock and, if fn
// changed it, stores the result durably.
func (s *Store) update(ctx context.Context, op, id string, fn func(jobstore.Job) (jobstore.Job, bool, error)) (jobstore.Job, error) {
	if err := s.enter(ctx, op); err != nil {
		return jobstore.Job{}, err
	}
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: %s: %w", op, err)
	}
	unlock, err := s.lockJob(ctx, id)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: %s: %w", op, err)
	}
	defer unlock()
	rec, err := s.readJob(id, true)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: %s: %w", op, err)
	}
	j, changed, err := fn(rec.Job)
	if err != nil {
		return rec.Job, fmt.Errorf("filestore: %s: %w", op, err)
	}
	if !changed {
		return j, nil
	}
	if _, err := s.store(rec, j, true); err != nil {
		return rec.Job, fmt.Errorf("filestore: %s %s: %w", op, id, err)
	}
	s.setCand(j)
	return j, nil
}
