package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Release gives back the attempt that lease holds without an outcome, as
// a dead worker's would be (see storekit.ApplyRelease): the attempt
// counts, and the job is queued again due now or fails if its attempts
// are used up. The write is fenced by the lease, as Complete's is. Returns
// an error wrapping jobstore.ErrNotHeld if lease no longer holds the job
// (also when this store lost the lease session it claimed the job under),
// and jobstore.ErrNotFound if there is no such job.
//
// Whatever it returns, this store no longer counts the lease as its own.
// If the release could not be written (the database could not be
// reached, or ctx ended), the store tries again in the background every
// RecoverInterval until it succeeds or the store closes; the job's lease
// session, which the store keeps renewing for its other jobs, would
// otherwise keep the job running for as long as this process lives. If
// the database stays unreachable, the session expires after LeaseTTL and
// another store recovers the job.
func (s *Store) Release(ctx context.Context, lease jobstore.Lease) error {
	if err := lease.Validate(); err != nil {
		return fmt.Errorf("pgstore: release: %w", err)
	}
	// Not check: a ctx that has ended still gives the lease up, through
	// the retries.
	if s.isClosed() {
		return fmt.Errorf("pgstore: release: %w", jobstore.ErrClosed)
	}
	s.mu.Lock()
	h, mine := s.held[lease]
	s.mu.Unlock()
	s.forget(lease)
	if mine && h.sess.isLost() {
		return fmt.Errorf("pgstore: release %s: %w: %w", lease.ID, jobstore.ErrNotHeld, h.sess.lostError())
	}
	err := ctx.Err()
	if err == nil {
		err = s.release(ctx, lease)
	}
	if err != nil && !errors.Is(err, jobstore.ErrNotHeld) && !errors.Is(err, jobstore.ErrNotFound) &&
		!errors.Is(err, jobstore.ErrClosed) {
		s.mu.Lock()
		s.releasing[lease] = struct{}{}
		s.mu.Unlock()
	}
	return err
}

// release writes the release of lease.
func (s *Store) release(ctx context.Context, lease jobstore.Lease) error {
	j, err := s.change(ctx, "release", lease.ID, func(r row, now time.Time) (jobstore.Job, bool, bool, error) {
		j, err := storekit.ApplyRelease(r.job, lease, now)
		return j, true, true, err
	})
	if err == nil {
		s.opts.Logger.Warn("pgstore: a worker gave its attempt back", "job", lease.ID, "worker", lease.Worker,
			"attempt", lease.Attempt, "state", j.State)
	}
	return err
}

// retryReleases tries again the releases that failed; maintain calls it.
func (s *Store) retryReleases(ctx context.Context) {
	s.mu.Lock()
	pending := make([]jobstore.Lease, 0, len(s.releasing))
	for l := range s.releasing {
		pending = append(pending, l)
	}
	s.mu.Unlock()
	for _, l := range pending {
		err := s.release(ctx, l)
		if err != nil && !errors.Is(err, jobstore.ErrNotHeld) && !errors.Is(err, jobstore.ErrNotFound) {
			if ctx.Err() == nil {
				s.opts.Logger.Warn("pgstore: a given-back attempt could not be released yet; will retry", "job", l.ID, "err", err)
			}
			continue
		}
		s.mu.Lock()
		delete(s.releasing, l)
		s.mu.Unlock()
	}
}
