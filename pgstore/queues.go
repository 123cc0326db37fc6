package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

var _ jobstore.QueueLimiter = (*Store)(nil)

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
		var perUS int64
		if err := rows.Scan(&name, &q.Paused, &q.Limit, &q.PerPartition, &q.Rate.N, &perUS); err != nil {
			return nil, s.fail(ctx, "queues", err)
		}
		q.Rate.Per = time.Duration(perUS) * time.Microsecond
		if q.Rate.N == 0 {
			q.Rate = jobstore.Rate{}
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

// SetQueueLimit makes limit the most jobs of queue that run at once, in
// every process and on every machine together; 0 removes the limit. A job
// counts while it is running in the database: from its claim until its
// Complete or Release, or until its worker's lease session is recovered
// (see the package's Guarantees). It implements jobstore.QueueLimiter.
func (s *Store) SetQueueLimit(ctx context.Context, queue string, limit int) error {
	if err := jobstore.ValidateQueueLimit(limit); err != nil {
		return fmt.Errorf("pgstore: limit queue: %w", err)
	}
	return s.setQueue(ctx, "limit queue", s.q.limitQueue, queue, limit)
}

// SetPartitionLimit makes limit the most jobs of each partition of queue
// that run at once, in every process together; 0 removes it. It counts
// jobs as SetQueueLimit does. It implements jobstore.QueueLimiter.
func (s *Store) SetPartitionLimit(ctx context.Context, queue string, limit int) error {
	if err := jobstore.ValidateQueueLimit(limit); err != nil {
		return fmt.Errorf("pgstore: limit partitions: %w", err)
	}
	return s.setQueue(ctx, "limit partitions", s.q.limitPartitions, queue, limit)
}

// SetQueueRate makes rate the queue's rate limit: at most rate.N of its
// jobs start in any window of rate.Per, in every process together, by the
// database's clock; the zero Rate removes it, with the starts it counted.
// It implements jobstore.QueueLimiter.
func (s *Store) SetQueueRate(ctx context.Context, queue string, rate jobstore.Rate) error {
	if err := rate.Validate(); err != nil {
		return fmt.Errorf("pgstore: rate-limit queue: %w", err)
	}
	return s.setQueue(ctx, "rate-limit queue", s.q.rateQueue, queue, rate.N, rate.Per.Microseconds())
}

// setQueue validates queue and runs the statement sql that sets one of
// its settings to the values args, in one transaction that notifies the
// work channel: a limit raised or cleared lets waiting workers start
// more. The statement returns the limited queues as it left them.
//
// Then it waits for the writes of jobs that were in flight when the
// change committed (awaitWriters): a claim among them read the settings
// before the change, so once setQueue returns, every job that a claim
// made without the new setting moved to running is counted by the claims
// made with it. Nothing waits for setQueue meanwhile. The store's changes
// of settings take turns, so that the last one to commit is the last one
// this store records.
func (s *Store) setQueue(ctx context.Context, op, sql, queue string, args ...any) error {
	if err := jobstore.ValidateQueue(queue); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if err := s.check(ctx, op); err != nil {
		return err
	}
	select {
	case s.settingsTurn <- struct{}{}:
		defer func() { <-s.settingsTurn }()
	case <-ctx.Done():
		return ctx.Err()
	}
	var limited []string
	if err := s.pool.QueryRow(ctx, sql, append([]any{queue, s.q.chanWork}, args...)...).Scan(&limited); err != nil {
		return s.fail(ctx, op, err)
	}
	s.mu.Lock()
	s.limitedWrites++ // reads begun before this change are older than it
	s.limited = limited
	s.mu.Unlock()
	s.signalWork()
	if err := s.awaitWriters(ctx); err != nil {
		return fmt.Errorf("pgstore: %s: the setting holds, but the claims made before it may still be starting jobs: %w", op, err)
	}
	return nil
}

// writersPoll is how often awaitWriters looks again.
const writersPoll = 2 * time.Millisecond

// awaitWriters waits until every transaction of another session that
// holds the jobs table for writing now (a claim, a completion, a submit,
// a prune) has ended, or ctx ends. It takes no lock: readers, and writers
// that begin meanwhile, never wait for it. Every claim takes that lock
// when its statement begins, before the snapshot it reads the settings
// in.
func (s *Store) awaitWriters(ctx context.Context) error {
	var txs []string
	if err := s.pool.QueryRow(ctx, s.q.jobWriters, s.q.schema+".jobs").Scan(&txs); err != nil {
		return err
	}
	for len(txs) > 0 {
		if err := s.pool.QueryRow(ctx, s.q.stillRunning, txs).Scan(&txs); err != nil {
			return err
		}
		if len(txs) == 0 {
			return nil
		}
		t := time.NewTimer(writersPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return nil
}

// acceptedLimited returns the queues that have a limit or a rate, as this
// store last read them, that req accepts.
//
// The store reads them at Open, at each change of a setting it makes,
// every RecoverInterval, and whenever a claim finds nothing. A claim takes
// the path of limited queues (claimLimited) when req accepts one of them,
// and the fast path otherwise. The list only picks
// the path: each claim's statements read the settings themselves, and
// the fast path passes over every limited queue's jobs, so a list that is
// late (a limit set a moment ago in another process) delays that queue's
// jobs, until the next refresh or Claim that finds nothing, but never lets
// one run past its limit.
func (s *Store) acceptedLimited(req jobstore.ClaimRequest) []string {
	s.mu.Lock()
	limited := s.limited
	s.mu.Unlock()
	if len(limited) == 0 || len(req.Queues) == 0 {
		return limited
	}
	var out []string
	for _, q := range req.Queues {
		if _, ok := slices.BinarySearch(limited, q); ok {
			out = append(out, q)
		}
	}
	return out
}

// limitedGen returns the count of this store's changes of settings, to
// pass to setLimited with what a statement begun after it read.
func (s *Store) limitedGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limitedWrites
}

// setLimited records the limited queues as a statement just read them
// (sorted by name), and reports whether they changed. gen is
// limitedGen() from before the statement began: a read that began before
// a change this store made since is older than what the change recorded,
// and is dropped.
func (s *Store) setLimited(limited []string, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.limitedWrites || slices.Equal(s.limited, limited) {
		return false
	}
	s.limited = limited
	return true
}

// refreshLimited reads the limited queues again.
func (s *Store) refreshLimited(ctx context.Context) error {
	gen := s.limitedGen()
	var limited []string
	if err := s.pool.QueryRow(ctx, s.q.limitedList).Scan(&limited); err != nil {
		return err
	}
	s.setLimited(limited, gen)
	return nil
}
