package filestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Release gives back the attempt that lease holds without an outcome, as
// a dead worker's would be (see storekit.ApplyRelease): the attempt
// counts, and the job is queued again due now or fails if its attempts
// are used up. Like Complete, only the process that claimed the job can
// release it.
//
// Whatever it returns, the lease lock is let go before it returns: if the
// new record could not be written (a full disk), the job is left in
// claimed/ with a free lease, which any process's recovery takes over
// within RecoverInterval, exactly as if this worker had died. Returns an
// error wrapping jobstore.ErrNotHeld if this process does not hold lease.
func (s *Store) Release(ctx context.Context, lease jobstore.Lease) error {
	// Not enter: a ctx that has ended still lets the lease go.
	if s.isClosed() {
		return fmt.Errorf("filestore: release: %w", jobstore.ErrClosed)
	}
	if err := lease.Validate(); err != nil {
		return fmt.Errorf("filestore: release: %w", err)
	}
	h, held := heldLease(s, lease.ID)
	if !held || h.lease != lease {
		return s.notHeld(ctx, "release", lease)
	}
	j, err := s.giveBack(ctx, lease, h)
	if err != nil {
		return err
	}
	s.log.Warn("filestore: a worker gave its attempt back", "id", lease.ID, "worker", lease.Worker, "attempt", lease.Attempt, "state", j.State)
	// Only now, with the lease let go, wake this process's claimers: one
	// woken before would find the lease still held and skip the job.
	s.setCand(j)
	if j.State.Terminal() {
		s.afterEnd(ctx, j)
	}
	return nil
}

// giveBack writes the release of lease, which this process holds as h,
// and lets the lease go whatever happens, after the record lock.
func (s *Store) giveBack(ctx context.Context, lease jobstore.Lease, h *leaseHold) (jobstore.Job, error) {
	// Deferred first, so it runs last: after the record lock is given up,
	// as in Complete.
	defer releaseLease(h)
	unlock, err := s.lockJob(ctx, lease.ID)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: release %s: %w (its lease is let go: recovery takes the job over)", lease.ID, err)
	}
	defer unlock()
	rec, err := s.heldRecord(h, lease.ID)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: release: %w", err)
	}
	if rec.dir != dirClaimed || !rec.Job.Holds(lease) {
		return jobstore.Job{}, fmt.Errorf("filestore: release: %w: job %s is %s, attempt %d by %q",
			jobstore.ErrNotHeld, lease.ID, rec.Job.State, rec.Job.Attempt, rec.Job.Worker)
	}
	j, err := storekit.ApplyRelease(rec.Job, lease, time.Now())
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: release: %w", err)
	}
	if _, err := s.store(rec, j, true); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: release %s: %w (its lease is let go: recovery takes the job over)", lease.ID, err)
	}
	return j, nil
}
