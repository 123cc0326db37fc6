package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The listener is one connection per store that LISTENs on the schema's
// three channels and turns notifications into local wake-ups: a job may
// have become claimable (AwaitWork), job X changed (Wait, WatchCancel),
// job X's log grew (Logs.WatchLog, for a follower). It is
// started by the first call that waits, and reconnects when its connection
// drops; while it is down, those calls read the database every
// PollInterval instead, and when it is back every one of them looks again,
// since notifications sent meanwhile are lost.

// ensureListener starts the listener if it is not running yet.
func (s *Store) ensureListener() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listenStarted || s.isClosed() {
		return
	}
	s.listenStarted = true
	s.wg.Add(1)
	go s.listen()
}

// listen keeps a listener connection up until the store closes.
func (s *Store) listen() {
	defer s.wg.Done()
	ctx, cancel := s.untilClosed()
	defer cancel()
	const minDelay = 50 * time.Millisecond
	delay := minDelay
	for ctx.Err() == nil {
		began := time.Now()
		err := s.listenOnce(ctx)
		s.setListening(false)
		if ctx.Err() != nil {
			return
		}
		s.opts.Logger.Warn("pgstore: listener connection lost; polling until it is back", "err", err)
		if time.Since(began) > 10*time.Second {
			delay = minDelay
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, s.opts.PollInterval)
	}
}

// listenOnce connects, listens, and dispatches notifications until the
// connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.ownConnConfig())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := s.checkSession(ctx, conn, "listener"); errors.Is(err, ErrSessionNotKept) {
		// Checked before LISTEN, so that no server connection the pooler
		// shares is left listening.
		return s.cannotListen(ctx, err)
	} else if err != nil {
		return err
	}
	work, job, log := pgx.Identifier{s.q.chanWork}.Sanitize(), pgx.Identifier{s.q.chanJob}.Sanitize(), pgx.Identifier{s.q.chanLog}.Sanitize()
	if _, err := conn.Exec(ctx, "LISTEN "+work+"; LISTEN "+job+"; LISTEN "+log); err != nil {
		return err
	}
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_listening_channels() c WHERE c IN ($1, $2, $3)`,
		s.q.chanWork, s.q.chanJob, s.q.chanLog).Scan(&n)
	if err != nil {
		return err
	}
	if n != 3 {
		return s.cannotListen(ctx, fmt.Errorf("%w: the listener connection is not listening after LISTEN", ErrSessionNotKept))
	}
	s.setListening(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case s.q.chanWork:
			s.signalWork()
		case s.q.chanJob:
			s.signalJob(n.Payload)
		case s.q.chanLog:
			s.signalJob(logWatchKey(n.Payload))
		}
	}
}

// cannotListen logs why the listener cannot work on this connection, and
// waits until the store closes: waiting calls poll meanwhile.
func (s *Store) cannotListen(ctx context.Context, why error) error {
	s.opts.Logger.Error("pgstore: the listener cannot work here; waiting calls poll the database every PollInterval instead", "err", why)
	<-ctx.Done()
	return fmt.Errorf("listener: %w", why)
}

// setListening records whether the listener is up and wakes every waiting
// call to look again.
func (s *Store) setListening(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listening == up {
		return
	}
	s.listening = up
	s.listenGen++
	close(s.listenChanged)
	s.listenChanged = make(chan struct{})
	if up {
		// Work may have come while nobody listened.
		s.signalWorkLocked()
	}
}

// signalWork wakes every AwaitWork.
func (s *Store) signalWork() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalWorkLocked()
}

func (s *Store) signalWorkLocked() {
	close(s.work)
	s.work = make(chan struct{})
	s.signals.Signal()
}

// logWatchKey is the key of the watches of job id's log: a job ID has no
// colon, so it names no job.
func logWatchKey(id string) string { return "log:" + id }

// signalJob wakes the calls watching key: a job ID (Wait, WatchCancel) or
// a logWatchKey (WatchLog).
func (s *Store) signalJob(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.HasPrefix(key, "log:") {
		s.notes.add(key) // a job notification, not a log chunk's
	}
	if w := s.watches[key]; w != nil {
		close(w.ch)
		delete(s.watches, key)
	}
}

// watcher is a waiting call's view of what may wake it.
type watcher struct {
	// job is closed on a notification about the watched job.
	job <-chan struct{}
	// changed is closed when the listener goes up or down.
	changed <-chan struct{}
	// poll is non-nil while the listener is down.
	poll  <-chan time.Time
	timer *time.Timer
}

// watch registers interest in job id (empty: none) and returns what to wait
// on; call it before reading the state it waits for, and release after.
func (s *Store) watch(id string) (*watcher, func()) {
	s.ensureListener()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &watcher{changed: s.listenChanged}
	if !s.listening {
		w.timer = time.NewTimer(s.opts.PollInterval)
		w.poll = w.timer.C
	}
	var iw *idWatch
	if id != "" {
		iw = s.watches[id]
		if iw == nil {
			iw = &idWatch{ch: make(chan struct{})}
			s.watches[id] = iw
		}
		iw.refs++
		w.job = iw.ch
	}
	return w, func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		if iw == nil {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		iw.refs--
		if iw.refs == 0 && s.watches[id] == iw {
			delete(s.watches, id)
		}
	}
}
