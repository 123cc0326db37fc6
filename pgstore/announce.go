package pgstore

import (
	"context"
	"time"
)

// announceTimeout bounds one work notification, the last one at Close
// included.
const announceTimeout = 5 * time.Second

// announceWork is called after the commit of a change that made jobs
// claimable (a submit, an import of queued jobs): it wakes this store's claimers at once, and has
// the announcer tell every other store, through the work channel.
//
// The notification does not ride in the transaction that inserts the
// jobs. PostgreSQL serializes the commits of transactions that notify,
// each holding a database-wide lock until its commit is flushed, so
// sixteen clients submitting at once would commit one after another
// instead of sharing flushes. The announcer notifies in a transaction of
// its own that does not wait for a flush, and one notification covers
// every commit made before it began. A notification lost in a crash of
// this process between the commit and the notification, or that fails
// twice (TestNotifyWorkSurvivesABrokenConnection), costs the other
// workers a poll interval (runner.Options.PollInterval), nothing more: a
// work notification only says "look again".
//
// A change that commits after the announcer has returned (a call in
// flight when Close was called) sends its notification itself.
func (s *Store) announceWork() {
	s.signalWork()
	s.mu.Lock()
	done := s.announcerDone
	if !done {
		select {
		case s.announce <- struct{}{}:
		default:
			// A notification is pending: it has not begun yet, so it
			// covers this commit too.
		}
	}
	s.mu.Unlock()
	if done {
		s.notifyWork()
	}
}

// announcer sends the work notifications that announceWork asks for, one
// at a time, until the store closes, and then the one still pending, so
// that a program that submits and closes at once still wakes the workers
// (TestProcessSubmitWakesWorker, TestProcessSubmitDuringCloseWakesWorker).
func (s *Store) announcer(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-s.announce:
		case <-ctx.Done():
			// From here on announceWork sends its own notification;
			// a request made before is still pending here.
			s.mu.Lock()
			s.announcerDone = true
			s.mu.Unlock()
			select {
			case <-s.announce:
				s.notifyWork()
			default:
			}
			return
		}
		s.notifyWork()
	}
}

// notifyWork sends one notification on the work channel. It tries twice:
// the pool drops a connection that failed (the server ended it, the
// network reset it), so the second try runs on another.
func (s *Store) notifyWork() {
	ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
	defer cancel()
	var err error
	for range 2 {
		if _, err = s.pool.Exec(ctx, s.q.announce, s.q.chanWork); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		s.opts.Logger.Warn("pgstore: could not tell other processes of new jobs; they find them at their next poll", "err", err)
	}
}
