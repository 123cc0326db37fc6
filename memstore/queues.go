package memstore

import (
	"context"
	"fmt"
	"maps"

	"github.com/jobdir/jobdir/jobstore"
)

var _ jobstore.QueueLimiter = (*Store)(nil)

// Queues returns every queue that has jobs or settings, sorted by name. It
// implements jobstore.QueueController.
func (s *Store) Queues(ctx context.Context) ([]jobstore.QueueInfo, error) {
	st, err := s.Stats(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx, "queues"); err != nil {
		return nil, err
	}
	settings := maps.Clone(s.queues)
	s.mu.Unlock()
	return jobstore.QueueInfos(st, settings), nil
}

// PauseQueue stops claims of queue's jobs until ResumeQueue. It
// implements jobstore.QueueController.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	return s.changeQueue(ctx, "pause queue", queue, func(q *jobstore.QueueSettings) { q.Paused = true })
}

// ResumeQueue lets queue's jobs be claimed again and wakes AwaitWork. It
// implements jobstore.QueueController.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	return s.changeQueue(ctx, "resume queue", queue, func(q *jobstore.QueueSettings) { q.Paused = false })
}

// SetQueueLimit makes limit the most jobs of queue that run at once; 0
// removes the limit. It implements jobstore.QueueLimiter.
func (s *Store) SetQueueLimit(ctx context.Context, queue string, limit int) error {
	if err := jobstore.ValidateQueueLimit(limit); err != nil {
		return fmt.Errorf("memstore: limit queue: %w", err)
	}
	return s.changeQueue(ctx, "limit queue", queue, func(q *jobstore.QueueSettings) { q.Limit = limit })
}

// fullQueues returns the limited queues that run as many jobs as their
// limit allows, or more. The caller holds s.mu.
func (s *Store) fullQueues() map[string]bool {
	var full map[string]bool
	running := map[string]int{}
	for q, st := range s.queues {
		if st.Limit > 0 {
			running[q] = 0
		}
	}
	if len(running) == 0 {
		return nil
	}
	for _, e := range s.jobs {
		if n, ok := running[e.job.Queue]; ok && e.job.State == jobstore.StateRunning {
			running[e.job.Queue] = n + 1
		}
	}
	for q, n := range running {
		if n >= s.queues[q].Limit {
			if full == nil {
				full = make(map[string]bool)
			}
			full[q] = true
		}
	}
	return full
}

// changeQueue applies change to queue's settings, and wakes AwaitWork,
// as a change may make jobs claimable.
func (s *Store) changeQueue(ctx context.Context, op, queue string, change func(*jobstore.QueueSettings)) error {
	if err := jobstore.ValidateQueue(queue); err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	if err := s.lock(ctx, op); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.queues == nil {
		s.queues = make(map[string]jobstore.QueueSettings)
	}
	q := s.queues[queue]
	change(&q)
	s.queues[queue] = q
	s.signalWork()
	return nil
}
