package filestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// AwaitWork blocks until a job may have become claimable: a submit, a
// requeue or a retry in any process (seen through filesystem events or the
// poll), or the RunAt of a queued job, or, if the last Claim that found
// nothing skipped a due job whose lease another holder was letting go,
// leaseRetry later, or one of a queue whose rate allowed no start then,
// once the rate does. It may return nil spuriously.
func (s *Store) AwaitWork(ctx context.Context) error {
	return s.awaitWork(ctx, nil)
}

// AwaitWorkSince is AwaitWork for the caller whose Claim returned nj; it
// implements jobstore.WorkAwaiter.
func (s *Store) AwaitWorkSince(ctx context.Context, nj *jobstore.NoJobError) error {
	return s.awaitWork(ctx, nj)
}

// awaitWork is AwaitWork, or AwaitWorkSince with nj.
func (s *Store) awaitWork(ctx context.Context, nj *jobstore.NoJobError) error {
	if err := s.enter(ctx, "await work"); err != nil {
		return err
	}
	s.watch()
	s.mu.Lock()
	if s.signals.Arrived(nj) {
		s.mu.Unlock()
		return nil
	}
	work := s.work
	next := s.cands.nextRunAt(time.Now())
	if !s.busyRetry.IsZero() {
		if next.IsZero() || s.busyRetry.Before(next) {
			next = s.busyRetry
		}
		s.busyRetry = time.Time{}
	}
	s.mu.Unlock()
	var due <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	poll := time.NewTimer(s.opts.PollInterval)
	defer poll.Stop()
	select {
	case <-work:
	case <-due:
	case <-poll.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return fmt.Errorf("filestore: await work: %w", jobstore.ErrClosed)
	}
	return nil
}

// WatchCancel blocks until Cancel is requested for the attempt that lease
// holds, from this process or any other, and returns nil. It re-reads the
// record whenever an event touches the job (a cancel rewrites the record in
// claimed/, which inotify reports within microseconds) and at least every
// PollInterval. Returns ErrNotHeld once the lease no longer holds the job.
func (s *Store) WatchCancel(ctx context.Context, lease jobstore.Lease) error {
	if err := s.enter(ctx, "watch cancel"); err != nil {
		return err
	}
	if err := lease.Validate(); err != nil {
		return fmt.Errorf("filestore: watch cancel: %w", err)
	}
	for {
		ch, stop := s.watchJob(lease.ID)
		j, err := s.get(ctx, lease.ID)
		if err != nil {
			stop()
			if errors.Is(err, jobstore.ErrNotFound) {
				return fmt.Errorf("filestore: watch cancel: %w: %w", jobstore.ErrNotHeld, err)
			}
			return err
		}
		if !j.Holds(lease) {
			stop()
			return fmt.Errorf("filestore: watch cancel: %w: job %s is %s, attempt %d", jobstore.ErrNotHeld, j.ID, j.State, j.Attempt)
		}
		if j.CancelRequested {
			stop()
			return nil
		}
		err = s.wait(ctx, "watch cancel", ch)
		stop()
		if err != nil {
			return err
		}
	}
}
