package pgstore

import (
	"context"
	"fmt"

	"github.com/jobdir/jobdir/jobstore"
)

var _ jobstore.QueueController = (*Store)(nil)

// Queues returns every queue that has jobs or settings, sorted by name: the
// queues of Stats, and those of the queues table. It implements
// jobstore.QueueController.
func (s *Store) Queues(ctx context.Context) ([]jobstore.QueueInfo, error) {
	st, err := s.Stats(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.queueSettings)
	if err != nil {
		return nil, s.fail(ctx, "queues", err)
	}
	defer rows.Close()
	settings := make(map[string]jobstore.QueueSettings)
	for rows.Next() {
		var name string
		var q jobstore.QueueSettings
		if err := rows.Scan(&name, &q.Paused); err != nil {
			return nil, s.fail(ctx, "queues", err)
		}
		settings[name] = q
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, "queues", err)
	}
	return jobstore.QueueInfos(st, settings), nil
}

// PauseQueue stops claims of queue's jobs: once it returns (its
// transaction committed), no claim of any process takes one, as each
// claim's statement reads the paused queues. It implements
// jobstore.QueueController.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	if err := jobstore.ValidateQueue(queue); err != nil {
		return fmt.Errorf("pgstore: pause queue: %w", err)
	}
	if err := s.check(ctx, "pause queue"); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.q.pauseQueue, queue); err != nil {
		return s.fail(ctx, "pause queue", err)
	}
	return nil
}

// ResumeQueue lets queue's jobs be claimed again, and notifies the work
// channel, which wakes AwaitWork in every process. It implements
// jobstore.QueueController.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	if err := jobstore.ValidateQueue(queue); err != nil {
		return fmt.Errorf("pgstore: resume queue: %w", err)
	}
	if err := s.check(ctx, "resume queue"); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.q.resumeQueue, queue, s.q.chanWork); err != nil {
		return s.fail(ctx, "resume queue", err)
	}
	// This store's own waiters, without waiting for the notification.
	s.signalWork()
	return nil
}
