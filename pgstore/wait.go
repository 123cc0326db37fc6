package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
)

// AwaitWork blocks until a queued job may have become due and returns nil:
// a job was submitted, requeued or retried in any process (a notification
// on the schema's work channel), or the earliest future RunAt a Claim of
// this store reported arrived. It returns at once if such work arrived
// since a Claim last found nothing. While the listener connection is down
// it returns every PollInterval. It returns ctx.Err() when ctx ends and an
// error wrapping jobstore.ErrClosed when the store is closed.
func (s *Store) AwaitWork(ctx context.Context) error {
	return s.awaitWork(ctx, nil)
}

// AwaitWorkSince is AwaitWork for the caller whose Claim or ClaimBatch
// returned nj; it implements jobstore.WorkAwaiter.
func (s *Store) AwaitWorkSince(ctx context.Context, nj *jobstore.NoJobError) error {
	return s.awaitWork(ctx, nj)
}

// awaitWork is AwaitWork, or AwaitWorkSince with nj.
func (s *Store) awaitWork(ctx context.Context, nj *jobstore.NoJobError) error {
	if err := s.check(ctx, "await work"); err != nil {
		return err
	}
	w, release := s.watch("")
	defer release()
	s.mu.Lock()
	if s.signals.Arrived(nj) {
		s.mu.Unlock()
		return nil
	}
	work, next := s.work, s.nextDue
	s.mu.Unlock()
	var due <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-work:
	case <-due:
		s.mu.Lock()
		if s.nextDue.Equal(next) {
			s.nextDue = time.Time{}
		}
		s.mu.Unlock()
	case <-w.changed:
	case <-w.poll:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return fmt.Errorf("pgstore: await work: %w", jobstore.ErrClosed)
	}
	return nil
}

// Wait blocks until the job is in a terminal state and returns it. It marks
// the job as waited for, so that the change that ends it notifies the job
// channel, and wakes on that notification from any process. Returns
// ctx.Err() when ctx ends first, an error wrapping jobstore.ErrNotFound if
// the job does not exist or is pruned while waiting, and one wrapping
// jobstore.ErrClosed when the store is closed.
func (s *Store) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: wait: %w", err)
	}
	marked := false
	for {
		if err := s.check(ctx, "wait"); err != nil {
			return jobstore.Job{}, err
		}
		w, release := s.watch(id)
		q := s.q.get
		if !marked {
			// Marking takes the row lock, so a change in flight is
			// either seen here or sees the mark and notifies.
			q = s.q.markWaited
		}
		qctx, qcancel := detached(ctx)
		r, err := scanRow(s.pool.QueryRow(qctx, q, id))
		qcancel()
		if ctx.Err() != nil {
			release()
			return jobstore.Job{}, ctx.Err()
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			release()
			return jobstore.Job{}, fmt.Errorf("pgstore: wait: job %s: %w", id, jobstore.ErrNotFound)
		case errors.Is(err, jobstore.ErrCorrupt):
			release()
			return jobstore.Job{}, fmt.Errorf("pgstore: wait: %w", err)
		case err != nil:
			release()
			return jobstore.Job{}, s.fail(ctx, "wait", err)
		}
		marked = true
		if r.job.State.Terminal() {
			release()
			return r.job, nil
		}
		err = s.sleep(ctx, "wait", w, nil)
		release()
		if err != nil {
			return jobstore.Job{}, err
		}
	}
}

// detachedTimeout bounds the queries of a waiting call that its caller's
// ctx does not end.
const detachedTimeout = 30 * time.Second

// detached returns a context for one short query of a blocking call: the
// end of the caller's ctx does not interrupt it (pgx closes a connection
// whose query is interrupted, and the runner ends every WatchCancel when
// the handler returns, so that would cost a new connection per job); the
// call looks at ctx again once the query is done.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), detachedTimeout)
}

// sleep blocks until something w watches (or lost) happens, ctx ends or the
// store closes.
func (s *Store) sleep(ctx context.Context, op string, w *watcher, lost <-chan struct{}) error {
	select {
	case <-w.job:
	case <-w.changed:
	case <-w.poll:
	case <-lost:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return fmt.Errorf("pgstore: %s: %w", op, jobstore.ErrClosed)
	}
	return nil
}

// WatchCancel blocks until Cancel is requested for the attempt that lease
// holds and returns nil. Returns an error wrapping jobstore.ErrNotHeld as
// soon as lease no longer holds the job: it was completed, or recovered
// from a worker presumed dead, or this store lost the lease session it was
// claimed under (the error then wraps ErrLeaseLost: the worker must stop,
// since the job will run elsewhere). Returns ctx.Err() when ctx ends, and
// an error wrapping jobstore.ErrClosed when the store is closed. A cancel
// or a recovery in another process reaches it by notification. For a job
// this store has just claimed, it reads the row only if a notification
// named the job since the claim began (or the listener was down
// meanwhile): otherwise the row is as the claim left it.
func (s *Store) WatchCancel(ctx context.Context, lease jobstore.Lease) error {
	if err := lease.Validate(); err != nil {
		return fmt.Errorf("pgstore: watch cancel: %w", err)
	}
	s.mu.Lock()
	h, mine := s.held[lease]
	s.mu.Unlock()
	var lost <-chan struct{}
	if mine {
		lost = h.sess.lost
	}
	for first := true; ; first = false {
		if err := s.check(ctx, "watch cancel"); err != nil {
			return err
		}
		if mine && h.sess.isLost() {
			return fmt.Errorf("pgstore: watch cancel %s: %w: %w", lease.ID, jobstore.ErrNotHeld, h.sess.lostError())
		}
		w, release := s.watch(lease.ID)
		if first && mine {
			// Nothing notified about the job since this store claimed it:
			// the row is as the claim left it, and the watch now set up
			// hears of any change. No need to read it.
			s.mu.Lock()
			quiet := s.quietSinceLocked(lease.ID, h.from)
			s.mu.Unlock()
			if quiet {
				err := s.sleep(ctx, "watch cancel", w, lost)
				release()
				if err != nil {
					return err
				}
				continue
			}
		}
		var (
			state           string
			worker          string
			attempt         int
			cancelRequested bool
		)
		qctx, qcancel := detached(ctx)
		err := s.pool.QueryRow(qctx, s.q.watch, lease.ID).Scan(&state, &worker, &attempt, &cancelRequested)
		qcancel()
		if ctx.Err() != nil {
			release()
			return ctx.Err()
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			release()
			return fmt.Errorf("pgstore: watch cancel: job %s: %w", lease.ID, jobstore.ErrNotFound)
		case err != nil:
			release()
			return s.fail(ctx, "watch cancel", err)
		}
		if jobstore.State(state) != jobstore.StateRunning || worker != lease.Worker || attempt != lease.Attempt {
			release()
			err := fmt.Errorf("pgstore: watch cancel: %w: job %s is %s, attempt %d by %q; lease is attempt %d by %q",
				jobstore.ErrNotHeld, lease.ID, state, attempt, worker, lease.Attempt, lease.Worker)
			if mine {
				if lost := s.lostWith(ctx, h.sess); lost != nil {
					err = fmt.Errorf("%w: %w", err, lost)
				}
			}
			return err
		}
		if cancelRequested {
			release()
			return nil
		}
		err = s.sleep(ctx, "watch cancel", w, lost)
		release()
		if err != nil {
			return err
		}
	}
}
