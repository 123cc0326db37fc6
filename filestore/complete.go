package filestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Complete ends the attempt that lease holds with outcome o. Only the
// process that claimed the job (and still holds its lease lock) can
// complete it. The new record is written into done/ (or queued/ for a
// retry) and that directory fsynced before the claimed/ entry is removed
// and the lease lock released, so the outcome is durable when Complete
// returns.
func (s *Store) Complete(ctx context.Context, lease jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	if err := s.enter(ctx, "complete"); err != nil {
		return jobstore.Job{}, err
	}
	if err := lease.Validate(); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: complete: %w", err)
	}
	if o.Error == "" {
		if err := jobstore.ValidatePayload(o.Result, s.opts.MaxPayload); err != nil {
			return jobstore.Job{}, fmt.Errorf("filestore: complete %s: result: %w", lease.ID, err)
		}
	}
	h, held := heldLease(s, lease.ID)
	if !held || h.lease != lease {
		return jobstore.Job{}, s.notHeld(ctx, "complete", lease)
	}
	unlock, err := s.lockJob(ctx, lease.ID)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: complete: %w", err)
	}
	// The attempt's handler is done: its slot of a limited queue, if it
	// has one, is free from now, before the record leaves claimed/, whose
	// event wakes the claims that wait for one.
	releaseSlot(h)
	if done, ok := recordedOf(h); ok {
		return s.completeAgain(h, done, unlock)
	}
	rec, err := s.heldRecord(h, lease.ID)
	if err != nil {
		unlock()
		return jobstore.Job{}, fmt.Errorf("filestore: complete: %w", err)
	}
	if rec.dir != dirClaimed || !rec.Job.Holds(lease) {
		unlock()
		releaseLease(h)
		return jobstore.Job{}, fmt.Errorf("filestore: complete: %w: job %s is %s, attempt %d by %q",
			jobstore.ErrNotHeld, lease.ID, rec.Job.State, rec.Job.Attempt, rec.Job.Worker)
	}
	j, err := storekit.ApplyOutcome(rec.Job, lease, o, time.Now(), s.opts.Backoff)
	if err != nil {
		unlock()
		return jobstore.Job{}, fmt.Errorf("filestore: complete: %w", err)
	}
	next, err := s.store(rec, j, true)
	if errors.Is(err, jobstore.ErrNotDurable) {
		// The outcome is recorded: keep the lease, and the claimed/ copy,
		// until a retry makes it durable (completeAgain).
		setRecorded(h, next)
		unlock()
		return jobstore.Job{}, fmt.Errorf("filestore: complete %s: the outcome is recorded, but not yet durable; call Complete again: %w", lease.ID, err)
	}
	if err != nil {
		unlock()
		return jobstore.Job{}, fmt.Errorf("filestore: complete %s: %w", lease.ID, err)
	}
	unlock()
	// Only now, with the record out of claimed/, may another process take
	// the lease lock: it would otherwise see a claimed job without a live
	// holder.
	releaseLease(h)
	s.setCand(j)
	if j.State.Terminal() {
		s.afterEnd(ctx, j)
	}
	return j, nil
}

// completeAgain finishes a Complete of h's attempt whose outcome done was
// written but whose fsync failed: it fsyncs done's directory again and, if
// that works, removes the claimed/ copy and releases the lease, returning
// the recorded job whatever outcome the retry carries (the first one
// recorded stands). If the record changed since (another process acted on
// the recorded outcome), the outcome was durable enough for that: the
// lease is released and the current job returned. The caller holds the
// record lock; completeAgain releases it.
func (s *Store) completeAgain(h *leaseHold, done record, unlock func()) (jobstore.Job, error) {
	id := done.Job.ID
	f, err := s.locate(id)
	if err != nil {
		unlock()
		return jobstore.Job{}, fmt.Errorf("filestore: complete %s: %w", id, err)
	}
	rec, err := f.current(id)
	if err != nil {
		unlock()
		return jobstore.Job{}, fmt.Errorf("filestore: complete %s: %w", id, err)
	}
	if rec.Rev == done.Rev && rec.dir == done.dir {
		// The flush of the recorded outcome failed: its data may never
		// reach the disk, and an fsync of it now could not tell, as a
		// write error is reported once. So it is written again, durably,
		// over itself (same revision, same bytes), and its directory
		// fsynced.
		err := s.writeRecord(done.dir, rec.envelope, true)
		if err == nil {
			err = s.durable.dir(done.dir)
		}
		if err != nil {
			unlock()
			return jobstore.Job{}, fmt.Errorf("filestore: complete %s: the outcome is recorded, but %w: %w", id, jobstore.ErrNotDurable, err)
		}
	}
	s.removeStale(f)
	unlock()
	releaseLease(h)
	s.touched(id)
	s.setCand(rec.Job)
	if rec.Job.State.Terminal() {
		s.afterEnd(context.Background(), rec.Job)
	}
	return rec.Job, nil
}

// notHeld returns the ErrNotHeld for a lease this process does not hold,
// naming who holds the job now.
func (s *Store) notHeld(ctx context.Context, op string, lease jobstore.Lease) error {
	j, err := s.get(ctx, lease.ID)
	if err != nil {
		if errors.Is(err, jobstore.ErrNotFound) {
			return fmt.Errorf("filestore: %s: %w: %w", op, jobstore.ErrNotHeld, err)
		}
		return err
	}
	if j.Holds(lease) {
		return fmt.Errorf("filestore: %s: %w: job %s attempt %d is held by another process (only the process that claimed a job can complete it)",
			op, jobstore.ErrNotHeld, lease.ID, lease.Attempt)
	}
	return fmt.Errorf("filestore: %s: %w: job %s is %s, attempt %d by %q; lease is attempt %d by %q",
		op, jobstore.ErrNotHeld, lease.ID, j.State, j.Attempt, j.Worker, lease.Attempt, lease.Worker)
}
