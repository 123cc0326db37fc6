package filestore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Waits on one job share one reader. However many Wait calls (HTTP
// long-polls, say) watch a job, one goroutine per job and Store reads its
// record: when an event touches the job, when a new waiter joins, and
// every waitPollFactor PollIntervals in case events were lost (every
// PollInterval when the store has no watcher). It hands a terminal job
// (or an error) to every waiter at once, without a lock; waiters cost the
// disk and the record lock nothing, and a Complete waits only for the one
// read under way.

// jobReader is the shared reader of one job's record.
type jobReader struct {
	// refs and started (the count of reads begun) are guarded by
	// Store.mu.
	refs    int
	started uint64
	// last is the latest read that a waiter may return: a terminal job or
	// an error. Its next is closed when another replaces it. Reads that
	// find the job still running change nothing and wake nobody.
	last atomic.Pointer[readResult]
	// kick asks for a read now (a waiter joined); stop is closed when the
	// last waiter leaves.
	kick chan struct{}
	stop chan struct{}
}

// readResult is one read of a jobReader.
type readResult struct {
	job jobstore.Job
	err error
	// seq is the read's number in jobReader.started; 0 for none.
	seq  uint64
	next chan struct{}
}

// joinReader returns the shared reader of job id, starting it if need be,
// and the count a read must reach to be news to the caller: only a read
// begun after the call can reflect every change that returned before it.
// The caller calls leave when done. Returns ErrClosed once the store is
// closed.
func (s *Store) joinReader(id string) (r *jobReader, need uint64, leave func(), err error) {
	s.mu.Lock()
	if s.noReaders {
		s.mu.Unlock()
		return nil, 0, nil, fmt.Errorf("filestore: wait: %w", jobstore.ErrClosed)
	}
	r = s.readers[id]
	if r == nil {
		r = &jobReader{kick: make(chan struct{}, 1), stop: make(chan struct{})}
		r.last.Store(&readResult{next: make(chan struct{})})
		s.readers[id] = r
		s.wg.Add(1)
		go s.readLoop(id, r)
	}
	r.refs++
	need = r.started + 1
	s.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default: // a read is already asked for
	}
	return r, need, func() {
		s.mu.Lock()
		if r.refs--; r.refs == 0 {
			delete(s.readers, id)
			close(r.stop)
		}
		s.mu.Unlock()
	}, nil
}

// readLoop reads job id's record for the waiters of r until the last one
// leaves or the store closes.
func (s *Store) readLoop(id string, r *jobReader) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closed:
		case <-r.stop:
		}
		cancel()
	}()
	poll := time.NewTimer(s.waitPoll())
	defer poll.Stop()
	for {
		select {
		case <-r.kick:
		default:
		}
		// Watch before reading, so that no change falls between the read
		// and the wait.
		ch, unwatch := s.watchJob(id)
		s.mu.Lock()
		r.started++
		seq := r.started
		s.mu.Unlock()
		j, err := s.get(ctx, id)
		if ctx.Err() != nil {
			unwatch()
			return
		}
		if err != nil || j.State.Terminal() {
			old := r.last.Swap(&readResult{job: j, err: err, seq: seq, next: make(chan struct{})})
			close(old.next)
		}
		poll.Reset(s.waitPoll())
		select {
		case <-ch:
		case <-r.kick:
		case <-poll.C:
		case <-ctx.Done():
			unwatch()
			return
		}
		unwatch()
	}
}

// waitPollFactor is how many PollIntervals a job's shared reader waits for
// an event before it reads anyway, while the store's watcher works: a
// lost event is reported as an overflow, which wakes every reader, so the
// poll is only a last resort.
const waitPollFactor = 10

// waitPoll is how long a job's shared reader waits for an event.
func (s *Store) waitPoll() time.Duration {
	s.watchMu.Lock()
	w := s.watcher
	s.watchMu.Unlock()
	if w == nil {
		return s.opts.PollInterval
	}
	return waitPollFactor * s.opts.PollInterval
}

// Wait blocks until job id is terminal and returns it. Every Wait on a job
// in this Store shares one reader of its record (see jobReader), woken by
// every event about the job, from any process, and at least every
// 10 PollIntervals (every PollInterval without filesystem events).
func (s *Store) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	if err := s.enter(ctx, "wait"); err != nil {
		return jobstore.Job{}, err
	}
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", err)
	}
	if !s.watchStarted() {
		// The first Wait of a Store that has not watched yet: a job
		// already finished is returned without starting the watcher.
		j, err := s.get(ctx, id)
		switch {
		case ctx.Err() != nil:
			return jobstore.Job{}, ctx.Err()
		case err != nil:
			return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", err)
		case j.State.Terminal():
			return j, nil
		}
	}
	r, need, leave, err := s.joinReader(id)
	if err != nil {
		return jobstore.Job{}, err
	}
	defer leave()
	for {
		res := r.last.Load()
		if res.seq >= need {
			if res.err != nil {
				return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", res.err)
			}
			return res.job, nil
		}
		select {
		case <-res.next:
		case <-ctx.Done():
			return jobstore.Job{}, ctx.Err()
		case <-s.closed:
			return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", jobstore.ErrClosed)
		}
	}
}
