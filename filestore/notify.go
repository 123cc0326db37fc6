package filestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

type idWatch struct {
	ch   chan struct{}
	refs int
}

// touched wakes this Store's Wait and WatchCancel calls on job id at once,
// without waiting for the filesystem event (which wakes other Stores).
func (s *Store) touched(id string) {
	s.mu.Lock()
	s.notify(id)
	s.mu.Unlock()
}

// signalWork wakes AwaitWork. The caller holds s.mu.
func (s *Store) signalWork() {
	close(s.work)
	s.work = make(chan struct{})
	s.signals.Signal()
}

// notify wakes the Wait and WatchCancel calls watching job id. The caller
// holds s.mu.
func (s *Store) notify(id string) {
	if w := s.changed[id]; w != nil {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

// notifyAll wakes every watcher, after events may have been lost.
func (s *Store) notifyAll() {
	for _, w := range s.changed {
		close(w.ch)
		w.ch = make(chan struct{})
	}
	s.signalWork()
}

// watchJob returns a channel closed on the next event about job id, and a
// function that stops watching.
func (s *Store) watchJob(id string) (<-chan struct{}, func()) {
	s.watch()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.changed[id]
	if w == nil {
		w = &idWatch{ch: make(chan struct{})}
		s.changed[id] = w
	}
	w.refs++
	return w.ch, func() {
		s.mu.Lock()
		if w.refs--; w.refs == 0 && s.changed[id] == w {
			delete(s.changed, id)
		}
		s.mu.Unlock()
	}
}

// wait blocks until ch is closed, the poll interval passes, ctx ends or the
// store closes.
func (s *Store) wait(ctx context.Context, op string, ch <-chan struct{}) error {
	t := time.NewTimer(s.opts.PollInterval)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return fmt.Errorf("filestore: %s: %w", op, jobstore.ErrClosed)
	}
}
