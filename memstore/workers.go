package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.WorkerHistory = (*Store)(nil)

// worker is one registration: what RegisterWorker was given, and a token
// that tells it from a later registration of the same ID.
type worker struct {
	info  jobstore.WorkerInfo
	token *struct{}
}

// RegisterWorker lists info until unregister is called or the store is
// closed. It implements jobstore.WorkerRegistry; the workers of a
// memstore are those of its own process.
func (s *Store) RegisterWorker(ctx context.Context, info jobstore.WorkerInfo) (func() error, error) {
	if err := info.Validate(); err != nil {
		return nil, fmt.Errorf("memstore: register worker: %w", err)
	}
	if err := s.lock(ctx, "register worker"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if _, ok := s.workers[info.ID]; ok {
		return nil, fmt.Errorf("memstore: register worker %s: %w", info.ID, jobstore.ErrWorkerExists)
	}
	if s.workers == nil {
		s.workers = make(map[string]worker)
	}
	w := worker{info: info.Normalized(), token: new(struct{})}
	s.workers[info.ID] = w
	return func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cur, ok := s.workers[w.info.ID]; ok && cur.token == w.token {
			delete(s.workers, w.info.ID)
			if s.ended == nil {
				s.ended = make(map[string]jobstore.WorkerInfo)
			}
			info := w.info
			info.EndedAt = time.Now().UTC()
			s.ended[info.ID] = info
		}
		return nil
	}, nil
}

// Workers returns the registered workers, sorted by ID. It implements
// jobstore.WorkerRegistry.
func (s *Store) Workers(ctx context.Context) ([]jobstore.WorkerInfo, error) {
	if err := s.lock(ctx, "workers"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ws := make([]jobstore.WorkerInfo, 0, len(s.workers))
	for _, w := range s.workers {
		info := w.info
		info.Kinds = append([]string{}, info.Kinds...)
		ws = append(ws, info)
	}
	storekit.SortWorkers(ws)
	return ws, nil
}

// EndedWorkers returns the workers that unregistered at or after since,
// within jobstore.RecentWorkerWindow, sorted by ID. It implements
// jobstore.WorkerHistory.
func (s *Store) EndedWorkers(ctx context.Context, since time.Time) ([]jobstore.WorkerInfo, error) {
	if err := s.lock(ctx, "ended workers"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	forget := time.Now().Add(-jobstore.RecentWorkerWindow)
	ws := []jobstore.WorkerInfo{}
	for id, info := range s.ended {
		switch {
		case info.EndedAt.Before(forget):
			delete(s.ended, id)
		case !info.EndedAt.Before(since):
			info.Kinds = append([]string{}, info.Kinds...)
			ws = append(ws, info)
		}
	}
	storekit.SortWorkers(ws)
	return ws, nil
}
