package pgstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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

// The tests here run the store through a PgBouncer of their own
// (pgtest.Bouncer). Behind one in transaction mode, few server
// connections serve more clients, so statements really move between them.

// lockedBuffer collects a store's log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// openThrough opens a store in schema through dsn, with a pool of its own
// of maxConns connections, closed when t ends.
func openThrough(t *testing.T, dsn, schema string, maxConns int32, opts pgstore.Options) (*pgstore.Store, error) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	opts.Schema = schema
	s, err := pgstore.Open(t.Context(), pool, &opts)
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

// directStore opens a store in schema on a direct connection, as a worker
// beside the one behind the pooler.
func directStore(t *testing.T, schema string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), pgtest.Pool(t, 4), &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// advisoryLocks counts the advisory locks held in the lock space of
// schema's stores (its OID), on any server connection.
func advisoryLocks(t *testing.T, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t, 1).QueryRow(t.Context(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2
		AND classid = (SELECT oid FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&n))
	return n
}

// waitMarked waits until a Wait of job id has marked the job as waited
// for. The mark is an UPDATE of the job's row, and a claim that meets the
// row while that is in flight skips it (FOR UPDATE SKIP LOCKED) and finds
// no job, as a claim should; so a test that wants one claim to get the job
// claims only after the mark.
func waitMarked(t *testing.T, schema, id string) {
	t.Helper()
	pool := pgtest.Pool(t, 1)
	q := `SELECT waited FROM ` + pgx.Identifier{schema, "jobs"}.Sanitize() + ` WHERE id = $1`
	require.Eventually(t, func() bool {
		var marked bool
		return pool.QueryRow(t.Context(), q, id).Scan(&marked) == nil && marked
	}, 10*time.Second, 5*time.Millisecond, "Wait did not mark job %s", id)
}

// TestPoolerTransactionModeRefusesCachedStatements: pgx prepares and
// caches statements under names by default, which PgBouncer 1.18 in
// transaction mode breaks (the second client on a server connection finds
// the name taken); Open sees the pooler and refuses such a pool with
// ErrSessionNotKept and a message that says what to change.
func TestPoolerTransactionModeRefusesCachedStatements(t *testing.T) {
	dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: 1})

	// What Open guards against: two clients, one server connection, the
	// same cached statement.
	a, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer a.Close(context.Background())
	b, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer b.Close(context.Background())
	var one int
	require.NoError(t, a.QueryRow(t.Context(), `SELECT 1 WHERE $1::int > 0`, 1).Scan(&one))
	err = b.QueryRow(t.Context(), `SELECT 1 WHERE $1::int > 0`, 1).Scan(&one)
	require.ErrorContains(t, err, "prepared statement")

	for _, size := range []int{1, 3} {
		dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: size})
		schema := pgtest.Schema(t)
		_, err = openThrough(t, dsn, schema, 4, pgstore.Options{})
		require.ErrorIs(t, err, pgstore.ErrSessionNotKept, "pool size %d", size)
		require.ErrorContains(t, err, "default_query_exec_mode=exec")
		// Refused before it created anything.
		var exists bool
		require.NoError(t, pgtest.Pool(t, 1).QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists))
		require.False(t, exists)
	}
}

// TestPoolerTransactionModeClaimFails: behind PgBouncer in transaction
// mode, with statements not prepared under names, a store opens and
// submits, but its first Claim fails with ErrSessionNotKept and claims
// nothing; its listener logs the same error, and Wait and AwaitWork work
// by polling. A worker on a direct connection runs the job, once.
func TestPoolerTransactionModeClaimFails(t *testing.T) {
	for _, size := range []int{1, 2} {
		t.Run("servers="+string(rune('0'+size)), func(t *testing.T) {
			dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: size}) +
				" default_query_exec_mode=exec"
			schema := pgtest.Schema(t)
			var log lockedBuffer
			const poll = 200 * time.Millisecond
			s, err := openThrough(t, dsn, schema, 4, pgstore.Options{PollInterval: poll,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			require.NoError(t, err)

			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			// The check cannot pass by chance: every claim fails the same way,
			// and leaves no advisory lock on the server connections the pooler
			// shares.
			for range 5 {
				_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "behind-pooler"})
				require.ErrorIs(t, err, pgstore.ErrSessionNotKept)
				require.ErrorContains(t, err, "went to another client while it was idle")
			}
			require.Zero(t, advisoryLocks(t, schema))
			got, err := s.Get(t.Context(), j.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateQueued, got.State)
			require.Zero(t, got.Attempt)

			// AwaitWork returns by polling.
			began := time.Now()
			require.NoError(t, s.AwaitWork(t.Context()))
			require.Less(t, time.Since(began), 15*poll)

			// Wait wakes by polling when a direct worker completes the job.
			waited := make(chan error, 1)
			var done jobstore.Job
			go func() {
				var err error
				done, err = s.Wait(t.Context(), j.ID)
				waited <- err
			}()
			w := directStore(t, schema)
			// The direct claim must not meet Wait's mark of the row.
			waitMarked(t, schema, j.ID)
			c, err := w.Claim(t.Context(), jobstore.ClaimRequest{Worker: "direct"})
			require.NoError(t, err)
			require.Equal(t, j.ID, c.ID)
			require.Equal(t, 1, c.Attempt)
			completed := time.Now()
			_, err = w.Complete(t.Context(), c.Lease(), jobstore.Succeeded(json.RawMessage(`"ok"`)))
			require.NoError(t, err)
			select {
			case err := <-waited:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Wait behind the pooler did not return after the job completed")
			}
			require.Less(t, time.Since(completed), 15*poll, "Wait polls every PollInterval")
			require.Equal(t, jobstore.StateSucceeded, done.State)
			require.Equal(t, 1, done.Attempt, "the job ran once")
			_, err = w.Claim(t.Context(), jobstore.ClaimRequest{Worker: "direct"})
			require.ErrorIs(t, err, jobstore.ErrNoJob)

			require.Eventually(t, func() bool {
				return bytes.Contains([]byte(log.String()), []byte("listener cannot work here"))
			}, 5*time.Second, 20*time.Millisecond)
			require.Contains(t, log.String(), "does not keep its session")
		})
	}
}

// TestPoolerOneServerDefeatsANaiveCheck shows why the check opens probe
// connections: with one server connection behind PgBouncer in
// transaction mode, a client's statements all land on it, so a lock taken
// in one statement is still there in the next, while the pooler hands that
// server connection to every other client in between.
func TestPoolerOneServerDefeatsANaiveCheck(t *testing.T) {
	dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: 1}) + " default_query_exec_mode=exec"
	a, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer a.Close(context.Background())
	b, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer b.Close(context.Background())
	const key = 71_000_001
	require.NoError(t, a.QueryRow(t.Context(), `SELECT pg_advisory_lock($1)`, key).Scan(new(any)))
	defer func() { _, _ = a.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`) }()
	var held bool
	require.NoError(t, a.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND pid = pg_backend_pid() AND objid = $1 AND granted)`, key).Scan(&held))
	require.True(t, held, "the naive check passes")
	// ...while another client runs in the session that holds a's lock.
	var again bool
	require.NoError(t, b.QueryRow(t.Context(), `SELECT pg_try_advisory_lock($1)`, key).Scan(&again))
	require.True(t, again, "b got a's session, lock and all")
	_, err = b.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, key)
	require.NoError(t, err)
}

// TestPoolerSessionModeWorks: behind PgBouncer in session mode, with pgx's
// default cached statements, the store works as on a direct connection: a
// claim under a lease session whose lock its server connection holds, a
// completion, and AwaitWork and Wait woken by NOTIFY (PollInterval is a
// minute, so polling would not wake them in time). With as many server
// connections as the store needs (one for its pool, the listener's, the
// lease session's), the check at the lease session's start finds none
// idle and waits for one a moment before it lets the session go on.
func TestPoolerSessionModeWorks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		servers  int
		maxConns int32
	}{
		{"servers to spare", 8, 3},
		{"every server in use", 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "session", PoolSize: tc.servers})
			testSessionMode(t, dsn, tc.maxConns)
		})
	}
}

// testSessionMode runs a store s through dsn, and a store d on a direct
// connection that submits and completes jobs, so that what wakes s is a
// notification through its listener, not a call of its own.
func testSessionMode(t *testing.T, dsn string, maxConns int32) {
	schema := pgtest.Schema(t)
	s, err := openThrough(t, dsn, schema, maxConns, pgstore.Options{PollInterval: time.Minute})
	require.NoError(t, err)
	d := directStore(t, schema)
	ctx := t.Context()
	const quick = 10 * time.Second // far under PollInterval

	// Round 0 may be woken by the listener coming up (work may have come
	// while nobody listened); rounds 1 and 2 only by the submits' NOTIFY.
	var jobs []jobstore.Job
	for round := range 3 {
		for {
			c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "session-mode"})
			if err != nil {
				require.ErrorIs(t, err, jobstore.ErrNoJob, "round %d", round)
				break
			}
			jobs = append(jobs, c)
		}
		awoke := make(chan error, 1)
		go func() { awoke <- s.AwaitWork(ctx) }()
		_, _, err := d.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		select {
		case err := <-awoke:
			require.NoError(t, err)
		case <-time.After(quick):
			t.Fatalf("round %d: AwaitWork was not woken by the submit", round)
		}
	}
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "session-mode"})
	require.NoError(t, err)
	jobs = append(jobs, c)
	require.Len(t, jobs, 3)
	require.Equal(t, 1, advisoryLocks(t, schema), "the lease session's lock")
	for _, j := range jobs {
		done, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(json.RawMessage(`1`)))
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, done.State)
		require.Equal(t, 1, done.Attempt)
	}

	// Wait is woken by the completion of a job that d runs.
	j, _, err := d.Submit(ctx, jobstore.Spec{Kind: "other"})
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		got, err := s.Wait(ctx, j.ID)
		if err == nil && got.State != jobstore.StateSucceeded {
			err = fmt.Errorf("Wait returned the job %s", got.State)
		}
		waited <- err
	}()
	// The completion notifies only once Wait has marked the job, and the
	// claim must not meet that mark of the row.
	waitMarked(t, schema, j.ID)
	dc, err := d.Claim(ctx, jobstore.ClaimRequest{Worker: "direct", Kinds: []string{"other"}})
	require.NoError(t, err)
	_, err = d.Complete(ctx, dc.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(quick):
		t.Fatal("Wait was not woken by the completion")
	}

	require.NoError(t, d.Close()) // its lease lock goes with its connection
	require.NoError(t, s.Close())
	require.Eventually(t, func() bool { return advisoryLocks(t, schema) == 0 }, 5*time.Second, 20*time.Millisecond,
		"session pooling resets the server connection: the lock goes with the client")
}
