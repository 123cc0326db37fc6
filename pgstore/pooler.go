package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A connection pooler in transaction mode (PgBouncer's
// pool_mode=transaction) hands a client's server connection to other
// clients between its transactions. A client alone with the pooler gets
// the same server connection back statement after statement (PgBouncer
// reuses the last one released first), so a check that only compares two
// of its own statements passes there, and the advisory lock it took then
// stays on a pooled server connection when the worker dies. The check here
// makes the pooler hand out every idle server connection, and then looks
// at the checked one from another: it passes only if no other client ran
// a statement there; each renewal of a lease session then checks again.
//
// A connection that gets the server's own process ID in its startup
// (BackendKeyData) talks to the server directly, and costs one statement.
// Otherwise a pooler sits between (PgBouncer gives its clients a key of
// its own, in every mode). The checked connection's first statement
// carries a text of its own (see markSession), which pg_stat_activity
// shows as that server connection's last query until another statement
// runs there. checkSession then opens probe connections, each holding a
// transaction open, until one gets the checked connection's server
// (transaction pooling: ErrSessionNotKept), the pooler starts a new server
// connection or makes a probe wait probeWait (no idle one was left, so the
// checked one was not idle), or probeMax probes are open. Then, while the
// probes hold their servers, it reads the checked server connection's row
// in pg_stat_activity from another server connection (the last probe's,
// or the pool's if no probe got one): under session pooling it is idle
// with the mark as its last query; if another client has run a statement
// there, or is running one (it kept the checked server connection busy,
// so that no probe got it), the session is not kept. Last, the checked
// connection must still reach its own server connection.

const (
	// probeMax bounds the probe connections one check opens.
	probeMax = 32
	// probeWait is how long a probe waits for a server connection before
	// the check takes it that the pooler has none idle: long enough that
	// a slow machine does not pass for a pooler with none to spare.
	probeWait = 2 * time.Second
	// probeFresh is how many probes in a row must get a newly started
	// server connection before the check takes it that none is idle, and
	// probePause the pause before each after the first. Under transaction
	// pooling the checked server connection may be busy for a moment with
	// another client's statement (this store's own work notification, say)
	// when a probe asks, and the pooler then starts a new one; a moment
	// later it is idle again, and the next probe gets it.
	probeFresh = 3
	probePause = 10 * time.Millisecond
)

// ownConnConfig returns the pool's connection settings for a connection
// of the store's own (the lease session's, the listener's, a probe's):
// its statements are not prepared under a name, so that behind a pooler
// that does not keep sessions the check below, not a prepared statement
// that exists on one server connection and not another, says what is
// wrong.
func (s *Store) ownConnConfig() *pgx.ConnConfig {
	cfg := s.connConfig()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	return cfg
}

// checkSession returns the server process ID of conn's session, or an
// error wrapping ErrSessionNotKept if conn goes through a pooler that
// hands its server connection to other clients between transactions.
// what names the connection in the error.
func (s *Store) checkSession(ctx context.Context, conn *pgx.Conn, what string) (uint32, error) {
	m, err := markSession(ctx, conn)
	if err != nil {
		return 0, err
	}
	if conn.PgConn().PID() == m.pid {
		return m.pid, nil // the server's own key: no pooler between
	}
	return s.confirmSession(ctx, conn, what, m)
}

// sessionMark is what the first statement of a check leaves on the checked
// connection's server connection.
type sessionMark struct {
	// pid is the server process the statement ran on.
	pid uint32
	// since is when it ran, on the database's clock.
	since time.Time
	// text is in that statement, and in no other: pg_stat_activity shows
	// the statement as the server connection's last query until another
	// runs there.
	text string
}

// markSession runs the first statement of a check on conn.
func markSession(ctx context.Context, conn *pgx.Conn) (sessionMark, error) {
	m := sessionMark{text: "jobdir session check " + rand.Text()}
	var text string
	err := conn.QueryRow(ctx, `SELECT pg_backend_pid(), now(), '`+m.text+`'::text`).Scan(&m.pid, &m.since, &text)
	return m, err
}

// confirmSession is checkSession behind a pooler, after markSession.
func (s *Store) confirmSession(ctx context.Context, conn *pgx.Conn, what string, m sessionMark) (uint32, error) {
	err := s.probe(ctx, m.pid, m.since, func(context.Context, pgx.Tx) error {
		return errHanded
	}, func(ctx context.Context, aside pgx.Tx) error {
		if err := s.lookAt(ctx, aside, m); err != nil {
			return err
		}
		var now uint32
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&now); err != nil {
			return err
		}
		if now != m.pid {
			return errHanded
		}
		return nil
	})
	switch {
	case errors.Is(err, errHanded):
		return 0, fmt.Errorf("%w: the %s connection's server connection (process %d) went to another client "+
			"while it was idle", ErrSessionNotKept, what, m.pid)
	case err != nil:
		return 0, fmt.Errorf("check for a connection pooler: %w", err)
	}
	return m.pid, nil
}

// lookAt returns errHanded if pg_stat_activity shows that since m another
// client has run a statement on m's server connection, or is running one.
// It reads from aside, a probe's transaction on another server connection,
// or if that is nil from the pool, waiting probeWait at most for a server
// connection. It returns nil when it cannot tell: the pool got no server
// connection in time, the server process is gone (the recheck on the
// checked connection then fails), or pg_stat_activity does not show it
// (track_activities off, a role that may not see the query).
func (s *Store) lookAt(ctx context.Context, aside pgx.Tx, m sessionMark) error {
	const look = `SELECT pid = pg_backend_pid(), coalesce(state, ''), coalesce(query, '')
		FROM pg_stat_activity WHERE pid = $1`
	var self bool
	var state, query string
	var err error
	if aside != nil {
		// A transaction reads pg_stat_activity once, at its first use:
		// the probe's own statement.
		if _, err := aside.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			return err
		}
		err = aside.QueryRow(ctx, look, m.pid).Scan(&self, &state, &query)
	} else {
		lctx, cancel := context.WithTimeout(ctx, probeWait)
		err = s.pool.QueryRow(lctx, look, m.pid).Scan(&self, &state, &query)
		late := lctx.Err() != nil && ctx.Err() == nil
		cancel()
		if late {
			return nil
		}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	case self:
		return errHanded // the pool's statement got it
	case state == "idle" && strings.Contains(query, m.text):
		return nil
	case state == "" || state == "disabled":
		return nil
	}
	return errHanded
}

// errHanded is what checkSession finds behind a pooler that hands the
// checked connection's server connection to another client.
var errHanded = errors.New("the server connection went to another client")

// probe opens probe connections, each holding a transaction open on a
// server connection, until one gets the server process pid: then it
// returns found(that probe's transaction). Once it appears that no server
// connection is idle any more (probeFresh probes in a row got a server
// process started after since, on the database's clock, or a probe waited
// probeWait for one), or probeMax probes are open, it returns
// recheck(the transaction of the last probe that got a server connection,
// nil if none did) instead. Both run while the probes hold their server
// connections.
func (s *Store) probe(ctx context.Context, pid uint32, since time.Time,
	found func(context.Context, pgx.Tx) error, recheck func(context.Context, pgx.Tx) error) error {
	type held struct {
		conn *pgx.Conn
		tx   pgx.Tx
	}
	// One check at a time per store: the probes of another (the
	// listener's, the lease's) would hold server connections this one
	// needs to see, the checked one among them.
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	var probes []held
	defer func() {
		for _, p := range probes {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = p.tx.Rollback(cctx)
			_ = p.conn.Close(cctx)
			cancel()
		}
	}()
	cfg := s.ownConnConfig()
	fresh := 0
	var aside pgx.Tx
	for range probeMax {
		if fresh > 0 {
			select {
			case <-time.After(probePause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		conn, err := pgx.ConnectConfig(ctx, cfg) // a pooler answers without a server connection
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, probeWait)
		var got uint32
		var started bool
		tx, err := conn.Begin(pctx)
		if err == nil {
			probes = append(probes, held{conn, tx})
			err = tx.QueryRow(pctx, `SELECT pid, backend_start > $1 FROM pg_stat_activity WHERE pid = pg_backend_pid()`,
				since).Scan(&got, &started)
		} else {
			_ = conn.Close(context.Background())
		}
		waited := pctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case waited:
			return recheck(ctx, aside) // no idle server connection came
		case err != nil:
			return err
		case got == pid:
			return found(ctx, tx)
		}
		aside = tx
		if !started {
			fresh = 0
		} else if fresh++; fresh == probeFresh {
			return recheck(ctx, aside)
		}
	}
	return recheck(ctx, aside)
}

// checkPoolStatements returns an error wrapping ErrSessionNotKept if the
// pool prepares its statements under names (pgx's default,
// QueryExecModeCacheStatement) and goes through a pooler that hands a
// connection's server connection, with the statements prepared on it, to
// other clients (PgBouncer before 1.21 in transaction mode, or later ones
// without max_prepared_statements): queries would fail now and then with
// "prepared statement ... does not exist" or "... already exists".
func (s *Store) checkPoolStatements(ctx context.Context) error {
	cfg := s.pool.Config().ConnConfig
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || cfg.StatementCacheCapacity == 0 {
		return nil
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	conn := c.Conn()
	var pid uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return err
	}
	if conn.PgConn().PID() == pid {
		return nil // the server's own key: no pooler between
	}
	name := fmt.Sprintf("jobdir_pooler_check_%d", time.Now().UnixNano())
	var since time.Time
	err = func() error {
		if _, err := conn.Prepare(ctx, name, `SELECT pg_backend_pid(), now()`); err != nil {
			return err
		}
		return conn.QueryRow(ctx, name).Scan(&pid, &since)
	}()
	if err == nil {
		err = s.probe(ctx, pid, since, func(ctx context.Context, tx pgx.Tx) error {
			// Another client's server connection that has this client's
			// statement under its own name: the pooler passes names
			// through to server connections it shares.
			var there bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = $1)`,
				name).Scan(&there); err != nil {
				return err
			}
			if there {
				return errHanded
			}
			return nil
		}, func(context.Context, pgx.Tx) error { return nil })
	}
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = conn.Deallocate(dctx, name) // behind such a pooler perhaps on another server connection: the name is unique
	cancel()
	var pe *pgconn.PgError
	if errors.Is(err, errHanded) || (errors.As(err, &pe) && (pe.Code == "26000" || pe.Code == "42P05")) {
		return fmt.Errorf("%w: the pool's server connections, and the statements pgx prepares and caches on them by default, "+
			"pass from client to client (PgBouncer before 1.21 in transaction mode); "+
			"a store that only submits and reads may go through it with default_query_exec_mode=exec in the DSN", ErrSessionNotKept)
	}
	if err != nil {
		return fmt.Errorf("check for a connection pooler: %w", err)
	}
	return nil
}
