package pgstore_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestOpenMigratesOnce: stores opening one new schema at the same moment
// all succeed, and the schema's migrations ran once each (under the
// advisory lock).
func TestOpenMigratesOnce(t *testing.T) {
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 8)
	const n = 8
	stores := make([]*pgstore.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: schema})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		defer stores[i].Close()
	}
	var versions []int
	rows, err := pool.Query(t.Context(), `SELECT version FROM `+schema+`.migrations ORDER BY version`)
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	want := make([]int, pgstore.SchemaVersion())
	for i := range want {
		want[i] = i + 1
	}
	require.Equal(t, want, versions)

	// A job submitted through one is seen by all.
	j, _, err := stores[0].Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	for _, s := range stores {
		got, err := s.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, j.ID, got.ID)
	}
}

// TestOpenRefusesNewerSchema: a schema that a newer version migrated is
// refused with ErrSchemaTooNew and a message that says what to do, and is
// left as it was.
func TestOpenRefusesNewerSchema(t *testing.T) {
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 2)
	s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	future := pgstore.SchemaVersion() + 1
	_, err = pool.Exec(t.Context(), `INSERT INTO `+schema+`.migrations (version, name) VALUES ($1, 'from the future')`, future)
	require.NoError(t, err)

	_, err = pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: schema})
	require.ErrorIs(t, err, pgstore.ErrSchemaTooNew)
	require.Contains(t, err.Error(), "upgrade the program")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.migrations`).Scan(&n))
	require.Equal(t, future, n)
}

// TestOpenMustExist: with MustExist, Open refuses a schema that does not
// exist (ErrNoSchema) or that holds an older version's store
// (ErrSchemaTooOld), and
// creates or changes nothing; it opens a store of this version.
func TestOpenMustExist(t *testing.T) {
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 2)
	ctx := t.Context()
	schemaExists := func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
		return n == 1
	}
	_, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, MustExist: true})
	require.ErrorIs(t, err, pgstore.ErrNoSchema)
	require.False(t, schemaExists(), "nothing created")

	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	_, err = pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, MustExist: true})
	require.ErrorIs(t, err, pgstore.ErrNoSchema, "a schema without the store's tables")

	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s, err = pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, MustExist: true})
	require.NoError(t, err, "a store of this version")
	require.NoError(t, s.Close())

	old := pgstore.SchemaVersion() - 1
	_, err = pool.Exec(ctx, `DELETE FROM `+schema+`.migrations WHERE version > $1`, old)
	require.NoError(t, err)
	_, err = pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, MustExist: true})
	require.ErrorIs(t, err, pgstore.ErrSchemaTooOld, "an older version's store is not upgraded")
	var v int
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(version) FROM `+schema+`.migrations`).Scan(&v))
	require.Equal(t, old, v, "nothing migrated")
}

// TestOpenRejectsBadOptions: invalid options are refused before anything
// is created.
func TestOpenRejectsBadOptions(t *testing.T) {
	pool := pgtest.Pool(t, 1)
	for name, o := range map[string]pgstore.Options{
		"upper-case schema":     {Schema: "Jobs"},
		"quote in schema":       {Schema: `a"b`},
		"schema with a dot":     {Schema: "a.b"},
		"schema too long":       {Schema: "a123456789012345678901234567890123456789012345678"},
		"schema starting digit": {Schema: "1jobs"},
		"lease TTL under 1s":    {LeaseTTL: 10 * time.Millisecond},
	} {
		_, err := pgstore.Open(t.Context(), pool, &o)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
	}
	_, err := pgstore.Open(t.Context(), nil, nil)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, err = pgstore.OpenDSN(t.Context(), "postgres://[bad", nil)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

// TestOpenDSN: the DSN convenience opens a store with a pool of its own,
// which Close closes.
func TestOpenDSN(t *testing.T) {
	schema := pgtest.Schema(t)
	s, err := pgstore.OpenDSN(t.Context(), pgtest.DSN(), &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	require.Equal(t, schema, s.Schema())
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, jobstore.ErrClosed)
}

// TestListenerReconnects: when the server closes the listener connection,
// the store connects again, and a Wait that was blocked across the cut
// still returns on the notification of the completion (its poll, a
// minute, never fires).
func TestListenerReconnects(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openListening(t, schema, 2)
	other := openStore(t, schema, nil)
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type result struct {
		j   jobstore.Job
		err error
	}
	waited := make(chan result, 1)
	go func() {
		j, err := s.Wait(ctx, j.ID)
		waited <- result{j, err}
	}()
	require.Eventually(t, func() bool { return listeners(t, schema) == 1 }, 10*time.Second, 10*time.Millisecond)
	n := terminate(t, `SELECT pid FROM pg_stat_activity WHERE application_name = $1
		AND query LIKE 'SELECT count(*) FROM pg_listening_channels()%'`, schema)
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool { return listeners(t, schema) == 1 }, 10*time.Second, 10*time.Millisecond,
		"the listener did not reconnect")

	c, err := other.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = other.Complete(t.Context(), c.Lease(), jobstore.Succeeded(json.RawMessage(`1`)))
	require.NoError(t, err)
	select {
	case r := <-waited:
		require.NoError(t, r.err)
		require.Equal(t, jobstore.StateSucceeded, r.j.State)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the listener reconnected")
	}
}

// openListening opens a store in schema whose polls are a minute apart, so
// that only a notification wakes its waiting calls, on a pool of maxConns
// (0: pgx's default) whose connections carry the schema's name as their
// application_name (see listeners). It is closed when t ends.
func openListening(t *testing.T, schema string, maxConns int32) *pgstore.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN())
	require.NoError(t, err)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: schema, PollInterval: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// listeners counts the idle listener connections whose application_name
// is app.
func listeners(t *testing.T, app string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.DSN())
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var n int
	err = conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1
		AND query LIKE 'SELECT count(*) FROM pg_listening_channels()%' AND state = 'idle'`, app).Scan(&n)
	require.NoError(t, err)
	return n
}

// TestPing: Ping answers nil on a usable store, an error once its table is
// gone, and ErrClosed after Close; it reads no job.
func TestPing(t *testing.T) {
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Ping(t.Context()))

	_, err = pool.Exec(t.Context(), `ALTER TABLE `+schema+`.jobs RENAME TO jobs_gone`)
	require.NoError(t, err)
	err = s.Ping(t.Context())
	require.ErrorContains(t, err, "is gone")
	_, err = pool.Exec(t.Context(), `ALTER TABLE `+schema+`.jobs_gone RENAME TO jobs`)
	require.NoError(t, err)
	require.NoError(t, s.Ping(t.Context()))

	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Ping(t.Context()), jobstore.ErrClosed)
}

// TestOpenRefusesRepeatableRead: a pool whose transactions are repeatable
// read by default is refused with an error that says what to set, and no
// schema is created; claims there would fail whenever two met.
func TestOpenRefusesRepeatableRead(t *testing.T) {
	pgtest.Require(t)
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN())
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	schema := pgtest.Schema(t)
	_, err = pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	require.Contains(t, err.Error(), `default_transaction_isolation is "repeatable read"`)
	require.Contains(t, err.Error(), "read committed")
	var n int
	require.NoError(t, pgtest.Pool(t, 1).QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
	require.Zero(t, n, "nothing was created")
}
