package filestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Waits on one job share one reader. However many Wait calls (HTTP
// long-polls, say) watch a job, one goroutine per job and Store reads its
// record: when an event touches the job, when a new waiter joins, and
// every PollInterval in case events were lost. It hands what it read to
// every waiter at once, so waiters cost the disk and the record lock
// nothing, and a Complete waits only for the one read under way.

// jobReader is the shared reader of one job's record. Its fields are
// guarded by Store.mu.
type jobReader struct {
	refs int
	// started counts the reads begun; published is the count of the read
	// whose result job and err hold (0: none yet).
	started, published uint64
	job                jobstore.Job
	err                error
	// next is closed and replaced when a read is published.
	next chan struct{}
	// kick asks for a read now (a waiter joined); stop is closed when the
	// last waiter leaves.
	kick chan struct{}
	stop chan struct{}
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
		r = &jobReader{next: make(chan struct{}), kick: make(chan struct{}, 1), stop: make(chan struct{})}
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
	poll := time.NewTimer(s.opts.PollInterval)
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
		s.mu.Lock()
		r.job, r.err, r.published = j, err, seq
		close(r.next)
		r.next = make(chan struct{})
		s.mu.Unlock()
		poll.Reset(s.opts.PollInterval)
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

// Wait blocks until job id is terminal and returns it. Every Wait on a job
// in this Store shares one reader of its record (see jobReader), woken by
// every event about the job, from any process, and at least every
// PollInterval.
func (s *Store) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	if err := s.enter(ctx, "wait"); err != nil {
		return jobstore.Job{}, err
	}
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", err)
	}
	r, need, leave, err := s.joinReader(id)
	if err != nil {
		return jobstore.Job{}, err
	}
	defer leave()
	for {
		s.mu.Lock()
		j, err, seq, next := r.job, r.err, r.published, r.next
		s.mu.Unlock()
		if seq >= need && (err != nil || j.State.Terminal()) {
			if err != nil {
				return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", err)
			}
			return j, nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return jobstore.Job{}, ctx.Err()
		case <-s.closed:
			return jobstore.Job{}, fmt.Errorf("filestore: wait: %w", jobstore.ErrClosed)
		}
	}
}
