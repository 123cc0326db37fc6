package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
)

// listenWork returns a connection of its own that listens on s's work
// channel, closed when t ends.
func listenWork(t *testing.T, s *Store) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.DSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{s.q.chanWork}.Sanitize())
	require.NoError(t, err)
	return conn
}

// TestAnnouncerSendsPendingAtClose: a work notification asked for but not
// yet begun when the store closes is still sent before the announcer
// returns (and so before Close does), so that a program that submits and
// exits at once wakes the workers.
func TestAnnouncerSendsPendingAtClose(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t, 2)
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	conn := listenWork(t, s)

	// An announcer of its own, not the store's (which would take the
	// request at once), that finds its store closed and a request
	// pending. Its select may see either first: ten rounds.
	for range 10 {
		a := &Store{pool: pool, opts: s.opts, q: s.q, announce: make(chan struct{}, 1)}
		a.announce <- struct{}{}
		closed, cancel := context.WithCancel(ctx)
		cancel()
		a.wg.Add(1)
		a.announcer(closed)

		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		require.NoError(t, err, "the pending notification was not sent")
		require.Equal(t, s.q.chanWork, n.Channel)
	}
}

// TestNotifyWorkSurvivesABrokenConnection: a work notification whose pool
// connection the server ended (pg_terminate_backend, a network reset) is
// sent on another one, so that a submit that committed is not left
// unannounced while every process lives.
func TestNotifyWorkSurvivesABrokenConnection(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t, 1)
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	conn := listenWork(t, s)

	// The pool's one connection, used a moment ago (the pool pings only
	// connections idle for a second), is ended by the server.
	var pid uint32
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	var ended bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ended))
	require.True(t, ended)

	s.notifyWork()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	n, err := conn.WaitForNotification(wctx)
	require.NoError(t, err, "the notification was not sent")
	require.Equal(t, s.q.chanWork, n.Channel)
}
