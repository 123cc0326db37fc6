package pgstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrSessionNotKept is returned when a connection does not keep its
// session from one statement to the next, as behind a connection pooler in
// transaction mode (PgBouncer's pool_mode=transaction): the store's lease
// and listener connections rely on session-level advisory locks and
// LISTEN. Claim returns it (wrapped) when it would start a lease session
// there, a lease session ends with it when a renewal runs on another
// server connection, the listener logs it, and Open returns it for a pool
// whose cached prepared statements such a pooler breaks. Connect the store
// to PostgreSQL directly, or through a pooler in session mode.
var ErrSessionNotKept = errors.New("pgstore: the connection does not keep its session from one statement to the next " +
	"(a connection pooler in transaction mode?); connect to PostgreSQL directly or use session pooling")

// ErrLeaseLost is why a lease session ended while its store was open: its
// connection closed, or it could not be renewed in time, or the database no
// longer counted it alive (its jobs recovered by another store, as after
// this process was stopped past its lease). The leases of that session are
// lost; WatchCancel and Complete return jobstore.ErrNotHeld for them,
// wrapping this error, also when they find the job taken before the
// session's keeper has seen it end (TestProcessNodeLossRecoveredWithinTTL).
var ErrLeaseLost = errors.New("pgstore: lease session lost")

// session is a lease session: a dedicated connection that holds the
// session-level advisory lock (schema OID, id) for as long as it lives, so
// that the server releases the lock the moment the worker's process dies,
// and renews the session's row on the database's clock. Only its keeper
// goroutine uses conn.
type session struct {
	id   int32
	conn *pgx.Conn
	// backend is the server process of conn's session, which holds the
	// lock; each renewal checks it runs there.
	backend uint32
	// lost is closed when the session ends; err says why. The keeper then
	// closes conn.
	lost chan struct{}
	once sync.Once
	err  error
}

// end marks the session over for the reason err; it reports whether this
// call ended it.
func (sess *session) end(err error) bool {
	ended := false
	sess.once.Do(func() {
		sess.err = err
		close(sess.lost)
		ended = true
	})
	return ended
}

// isLost reports whether the session has ended.
func (sess *session) isLost() bool {
	select {
	case <-sess.lost:
		return true
	default:
		return false
	}
}

// lostError is the error a lost session's leases give.
func (sess *session) lostError() error {
	<-sess.lost
	return fmt.Errorf("%w %d: %w", ErrLeaseLost, sess.id, sess.err)
}

// errSessionRecovered is why a session ends that the database no longer
// counts as alive while its keeper has not seen it end: after this
// process was stopped (SIGSTOP, a hung machine) past the end of its lease
// connection, another store recovered its jobs.
var errSessionRecovered = errors.New("the database no longer counts the session alive: its jobs were recovered")

// lostWith returns the lostError of sess if the session has ended, or if
// the database no longer counts it as alive (its row gone or found dead),
// in which case it ends sess; nil if sess lives. A change of a lease of
// sess that found the job no longer held calls it, so that the error says
// the lease went with its session (ErrLeaseLost) even when the keeper has
// not seen that yet.
func (s *Store) lostWith(ctx context.Context, sess *session) error {
	if !sess.isLost() {
		var alive bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.q.schema+`.sessions
			WHERE id = $1 AND dead_since IS NULL AND expires_at >= now())`, sess.id).Scan(&alive)
		if err != nil || alive {
			return nil
		}
		if sess.end(errSessionRecovered) {
			s.opts.Logger.Warn("pgstore: lease session lost; its jobs will run elsewhere", "session", sess.id, "err", errSessionRecovered)
		}
	}
	return sess.lostError()
}

// session returns the store's current lease session, starting one if
// there is none (the first claim) or the last one was lost.
func (s *Store) session(ctx context.Context) (*session, error) {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess != nil && !sess.isLost() {
		return sess, nil
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	s.mu.Lock()
	sess = s.sess
	s.mu.Unlock()
	if sess != nil && !sess.isLost() {
		return sess, nil
	}
	sess, err := s.newSession(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.isClosed() {
		s.mu.Unlock()
		sess.end(errStoreClosed)
		_ = sess.conn.Close(context.Background())
		return nil, errStoreClosed
	}
	s.sess = sess
	s.wg.Add(1)
	s.mu.Unlock()
	go s.keep(sess)
	s.moveWorkers(ctx, sess)
	return sess, nil
}

// newSession opens a lease connection and starts a session on it. Behind
// a pooler that does not keep the connection's session (see
// checkSession) it fails with an error wrapping ErrSessionNotKept, and
// takes no lock there.
func (s *Store) newSession(ctx context.Context) (*session, error) {
	conn, err := pgx.ConnectConfig(ctx, s.ownConnConfig())
	if err != nil {
		return nil, fmt.Errorf("lease connection: %w", err)
	}
	pid, err := s.checkSession(ctx, conn, "lease")
	host, _ := os.Hostname()
	var id int32
	var backend uint32
	if err == nil {
		err = conn.QueryRow(ctx, s.q.newSession, host, os.Getpid(), s.opts.LeaseTTL.Seconds(), s.ns).Scan(&id, &backend)
	}
	if err == nil {
		var held bool
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND pid = pg_backend_pid() AND pid = $2 AND objid = $1::int8::oid AND objsubid = 2 AND granted)`, id, pid).Scan(&held)
		if err == nil && (!held || backend != pid) {
			err = fmt.Errorf("%w: the lease connection's lock was taken on server process %d and is not held on %d",
				ErrSessionNotKept, backend, pid)
		}
	}
	if err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("start lease session: %w", err)
	}
	return &session{id: id, conn: conn, backend: pid, lost: make(chan struct{})}, nil
}

// keep renews sess every LeaseTTL/4 and watches its connection in between,
// until the session is lost or ended; then it closes the connection, which
// releases the session's advisory lock.
func (s *Store) keep(sess *session) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sess.lost:
		case <-s.closed:
		}
		cancel()
	}()
	ttl := s.opts.LeaseTTL
	every, limit := ttl/4, ttl-ttl/4
	last := time.Now()
	var why error
	for why == nil {
		if wait := time.Until(last.Add(every)); wait > 0 {
			// Read from the idle connection: a server that closes it
			// (pg_terminate_backend, a restart, a network reset) is seen
			// at once, not at the next renewal.
			wctx, wcancel := context.WithTimeout(ctx, wait)
			err := sess.conn.PgConn().WaitForNotification(wctx)
			timedOut := wctx.Err() != nil
			wcancel()
			switch {
			case ctx.Err() != nil:
				why = errStoreClosed
				continue
			case err != nil && !timedOut:
				why = fmt.Errorf("lease connection closed: %w", err)
				continue
			}
			if !timedOut {
				continue // a notice or notification; nothing is listened to here
			}
		}
		start := time.Now()
		rctx, rcancel := context.WithDeadline(ctx, last.Add(limit))
		var backend uint32
		err := sess.conn.QueryRow(rctx, s.q.renew, sess.id, ttl.Seconds()).Scan(&backend)
		rcancel()
		switch {
		case ctx.Err() != nil:
			why = errStoreClosed
		case errors.Is(err, pgx.ErrNoRows):
			why = errors.New("the session expired or its jobs were recovered")
		case err != nil:
			why = fmt.Errorf("renewal failed: %w", err)
		case backend != sess.backend:
			why = fmt.Errorf("%w: the renewal ran on server process %d, not the session's %d", ErrSessionNotKept, backend, sess.backend)
		default:
			last = start
		}
	}
	if sess.end(why) && !errors.Is(why, errStoreClosed) {
		s.opts.Logger.Warn("pgstore: lease session lost; its jobs will run elsewhere", "session", sess.id, "err", why)
	}
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	s.mu.Unlock()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	_ = sess.conn.Close(cctx)
	ccancel()
	s.relistWorkers()
}

// endSession ends sess at Close.
func (s *Store) endSession(sess *session, why error) {
	sess.end(why)
}
