package memstore

import (
	"context"
	"fmt"
	"maps"
	"time"

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

// SetPartitionLimit makes limit the most jobs of each partition of queue
// that run at once; 0 removes the limit. It implements
// jobstore.QueueLimiter.
func (s *Store) SetPartitionLimit(ctx context.Context, queue string, limit int) error {
	if err := jobstore.ValidateQueueLimit(limit); err != nil {
		return fmt.Errorf("memstore: limit partitions: %w", err)
	}
	return s.changeQueue(ctx, "limit partitions", queue, func(q *jobstore.QueueSettings) { q.PerPartition = limit })
}

// SetQueueRate makes rate the queue's rate limit; the zero Rate removes
// it. It implements jobstore.QueueLimiter.
func (s *Store) SetQueueRate(ctx context.Context, queue string, rate jobstore.Rate) error {
	if err := rate.Validate(); err != nil {
		return fmt.Errorf("memstore: rate-limit queue: %w", err)
	}
	return s.changeQueue(ctx, "rate-limit queue", queue, func(q *jobstore.QueueSettings) { q.Rate = rate })
}

// rateFull returns the rate-limited queues whose window has no room for
// a start at now, and for each, when it will. The caller holds s.mu.
func (s *Store) rateFull(now time.Time) (map[string]bool, map[string]time.Time) {
	var full map[string]bool
	var next map[string]time.Time
	for q, st := range s.queues {
		if st.Rate.IsZero() {
			continue
		}
		if _, ok, at := s.starts[q].Allow(st.Rate, now); !ok {
			if full == nil {
				full, next = make(map[string]bool), make(map[string]time.Time)
			}
			full[q], next[q] = true, at
		}
	}
	return full, next
}

// recordStart records a start of a job of queue at now, if the queue has
// a rate limit. The caller holds s.mu.
func (s *Store) recordStart(queue string, now time.Time) {
	rate := s.queues[queue].Rate
	if rate.IsZero() {
		return
	}
	w := s.starts[queue].Trim(rate.N)
	at, _, _ := w.Allow(rate, now)
	if at == len(w) {
		w = append(w, now)
	} else {
		w[at] = now
	}
	if s.starts == nil {
		s.starts = make(map[string]jobstore.RateWindow)
	}
	s.starts[queue] = w
}

// part names one partition of one queue.
type part struct{ queue, partition string }

// fullSet holds the limited queues and partitions that run as many jobs
// as their limits allow, or more.
type fullSet struct {
	queues map[string]bool
	parts  map[part]bool
}

// has reports whether j's queue or partition is full.
func (f fullSet) has(j *jobstore.Job) bool {
	return f.queues[j.Queue] || (j.Partition != "" && f.parts[part{j.Queue, j.Partition}])
}

// full returns the limited queues and partitions that are full. The
// caller holds s.mu.
func (s *Store) full() fullSet {
	var f fullSet
	limited := false
	for _, st := range s.queues {
		if st.Limit > 0 || st.PerPartition > 0 {
			limited = true
			break
		}
	}
	if !limited {
		return f
	}
	queues := map[string]int{}
	parts := map[part]int{}
	for _, e := range s.jobs {
		j := &e.job
		if j.State != jobstore.StateRunning {
			continue
		}
		st := s.queues[j.Queue]
		if st.Limit > 0 {
			queues[j.Queue]++
		}
		if st.PerPartition > 0 && j.Partition != "" {
			parts[part{j.Queue, j.Partition}]++
		}
	}
	for q, n := range queues {
		if n >= s.queues[q].Limit {
			if f.queues == nil {
				f.queues = make(map[string]bool)
			}
			f.queues[q] = true
		}
	}
	for p, n := range parts {
		if n >= s.queues[p.queue].PerPartition {
			if f.parts == nil {
				f.parts = make(map[part]bool)
			}
			f.parts[p] = true
		}
	}
	return f
}

// limited reports whether a running job j counts against a limit of its
// queue. The caller holds s.mu.
func (s *Store) limited(j *jobstore.Job) bool {
	st := s.queues[j.Queue]
	return st.Limit > 0 || (st.PerPartition > 0 && j.Partition != "")
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
