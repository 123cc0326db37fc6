package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
)

// TestPoolerRenewalSeesMovedSession: should a lease session start behind
// PgBouncer in transaction mode anyway (here by hand, past the start's
// check), its keeper ends it with ErrSessionNotKept at the first renewal
// that runs on another server connection than the one holding its lock,
// here while another client holds that one in a transaction.
func TestPoolerRenewalSeesMovedSession(t *testing.T) {
	ctx := t.Context()
	// Three server connections: the renewal finds one free.
	dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: 3}) + " default_query_exec_mode=exec"
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	// The session's TTL outlasts the set-up below on a loaded machine (with
	// one second it expired before the first renewal ran, once in a CI
	// run), so that the renewal fails for the server it runs on alone.
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t), LeaseTTL: 8 * time.Second, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()

	conn, err := pgx.ConnectConfig(ctx, s.ownConnConfig())
	require.NoError(t, err)
	var id int32
	var backend uint32
	require.NoError(t, conn.QueryRow(ctx, s.q.newSession, "host", 1, s.opts.LeaseTTL.Seconds(), s.ns).Scan(&id, &backend))
	sess := &session{id: id, conn: conn, backend: backend, lost: make(chan struct{})}

	// Other clients take server connections, each in a transaction, until
	// one has the session's.
	var took bool
	for range 2 {
		other, err := pgx.ConnectConfig(ctx, s.ownConnConfig())
		require.NoError(t, err)
		defer other.Close(context.Background())
		tx, err := other.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		var pid uint32
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		if took = pid == backend; took {
			break
		}
	}
	require.True(t, took, "no other client got the session's server connection")

	s.mu.Lock()
	s.sess = sess
	s.wg.Add(1)
	s.mu.Unlock()
	go s.keep(sess)
	select {
	case <-sess.lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the session was not ended")
	}
	require.ErrorIs(t, sess.lostError(), ErrSessionNotKept)
	require.ErrorContains(t, sess.lostError(), "renewal ran on server process")
}

// TestPoolerCheckSeesCheckedServerBusy: behind PgBouncer in transaction
// mode, another client takes the checked connection's server connection
// right after the check's first statement and keeps it busy past
// probeWait, so that no probe gets it, as under session pooling. The check
// fails with ErrSessionNotKept all the same, since it sees from another
// server connection that the checked one runs the other client's
// statement. With room for three more server connections the probes get
// three new ones, and the checked connection gets its own back once the
// other client lets it go, so that without the look the check passed;
// with room for none a probe waits, and the look goes through the store's
// pool.
func TestPoolerCheckSeesCheckedServerBusy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers int
	}{
		{"look from a probe", 1 + probeFresh},
		{"look from the pool", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: tc.servers}) +
				" default_query_exec_mode=exec"
			cfg, err := pgxpool.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			defer pool.Close()
			// All the check needs of a store is its pool; one not opened
			// sends nothing of its own, so that PgBouncer has one server
			// connection, the checked one, when the probes begin.
			s := &Store{pool: pool}
			conn, err := pgx.ConnectConfig(ctx, s.ownConnConfig())
			require.NoError(t, err)
			defer conn.Close(context.Background())
			other, err := pgx.ConnectConfig(ctx, s.ownConnConfig())
			require.NoError(t, err)
			defer other.Close(context.Background())

			m, err := markSession(ctx, conn)
			require.NoError(t, err)
			// PgBouncer hands out the server connection released last first.
			tx, err := other.Begin(ctx)
			require.NoError(t, err)
			var pid uint32
			require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			require.Equal(t, m.pid, pid, "the other client got the checked server connection")
			let := make(chan error, 1)
			go func() {
				time.Sleep(probeWait + probeWait/4)
				let <- tx.Rollback(context.Background())
			}()

			_, err = s.confirmSession(ctx, conn, "lease", m)
			require.ErrorIs(t, err, ErrSessionNotKept)
			require.ErrorContains(t, err, "went to another client while it was idle")
			require.NoError(t, <-let)
		})
	}
}
