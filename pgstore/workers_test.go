package pgstore_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// listedIDs returns the IDs of the workers s lists.
func listedIDs(t *testing.T, s *pgstore.Store) []string {
	t.Helper()
	ws, err := s.Workers(t.Context())
	require.NoError(t, err)
	ids := []string{}
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}

// waitListed waits up to within for s to list exactly ids, and returns how
// long it took.
func waitListed(t *testing.T, s *pgstore.Store, ids []string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := listedIDs(t, s)
		if len(got) == len(ids) && (len(ids) == 0 || equal(got, ids)) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			require.Equal(t, ids, got, "workers listed after %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestProcessWorkersListedWhileAlive: a worker another process registered
// is listed while its process lives; a SIGKILLed one is gone within 2s
// (the server drops its lease session's lock with the connection), and a
// SIGSTOPped one stays listed until its lease expires, as its jobs do.
func TestProcessWorkersListedWhileAlive(t *testing.T) {
	const ttl = 2 * time.Second
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 100 * time.Millisecond})
	killed := startChild(t, schema, "register-worker", childTTL+"="+ttl.String())
	stopped := startChild(t, schema, "register-worker", childTTL+"="+ttl.String())
	kid := killed.Next(t)[len("registered "):]
	sid := stopped.Next(t)[len("registered "):]
	both := []string{kid, sid}
	if sid < kid {
		both = []string{sid, kid}
	}
	require.Equal(t, both, listedIDs(t, s))
	var u func() error

	killedAt := time.Now()
	require.NoError(t, killed.Signal(syscall.SIGKILL))
	took := waitListed(t, s, []string{sid}, 2*time.Second)
	t.Logf("a killed worker was unlisted %v after SIGKILL", took)
	// It is remembered as ended, whether recovery took its session yet or
	// not, once each; the stopped one has not ended.
	require.Eventually(t, func() bool {
		ended, err := s.EndedWorkers(t.Context(), killedAt.Add(-time.Second))
		require.NoError(t, err)
		return len(ended) == 1 && ended[0].ID == kid && !ended[0].EndedAt.IsZero()
	}, 5*time.Second, 20*time.Millisecond, "the killed worker is not among the ended")

	require.NoError(t, stopped.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = stopped.Signal(syscall.SIGCONT) })
	stoppedAt := time.Now()
	time.Sleep(ttl / 4)
	require.Equal(t, []string{sid}, listedIDs(t, s), "a stopped worker was unlisted before its lease expired")
	waitListed(t, s, []string{}, 2*ttl)
	t.Logf("a stopped worker was unlisted %v after SIGSTOP (LeaseTTL %v)", time.Since(stoppedAt), ttl)
	recent, err := jobstore.RecentWorkers(t.Context(), s, time.Now())
	require.NoError(t, err)
	require.Len(t, recent, 2, "both are recent workers, each once")
	for _, w := range recent {
		require.False(t, w.EndedAt.IsZero(), "worker %s ended", w.ID)
	}

	// Its name is free again for a live worker.
	u, err = s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: kid, Concurrency: 1})
	require.NoError(t, err)
	require.NoError(t, u())
}

// TestWorkersFollowANewLeaseSession: when the server ends a store's lease
// connection, the store's workers are listed again under a new session,
// without waiting for a claim.
func TestWorkersFollowANewLeaseSession(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 100 * time.Millisecond, LeaseGrace: 100 * time.Millisecond})
	other := openStore(t, schema, &pgstore.Options{RecoverInterval: 100 * time.Millisecond, LeaseGrace: 100 * time.Millisecond})
	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "idle", Concurrency: 1})
	require.NoError(t, err)
	defer u()
	require.Equal(t, []string{"idle"}, listedIDs(t, other))
	pool := pgtest.Pool(t, 1)
	sessionOf := func() (id int) {
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT session FROM `+schema+`.workers WHERE id = 'idle'`).Scan(&id))
		return id
	}
	first := sessionOf()

	n := terminate(t, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted
		AND classid = (SELECT oid FROM pg_namespace WHERE nspname = $1)::int8::oid`, schema)
	require.Equal(t, 1, n, "the lease connection was not found")
	require.Eventually(t, func() bool { return sessionOf() != first }, 5*time.Second, 20*time.Millisecond,
		"the worker's row still names the ended session")
	waitListed(t, other, []string{"idle"}, 5*time.Second)
	// Listed under a live session, not the old one's row before recovery
	// took it: still listed once recovery has deleted the old session.
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, []string{"idle"}, listedIDs(t, other))
}

// TestRegisterWorkerAfterSessionRecovered: a store whose lease session
// another store's recovery deleted before this one noticed registers its
// worker under a new session.
func TestRegisterWorkerAfterSessionRecovered(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "first", Concurrency: 1})
	require.NoError(t, err)
	require.NoError(t, u())
	pool := pgtest.Pool(t, 1)
	var old int
	require.NoError(t, pool.QueryRow(t.Context(), `DELETE FROM `+schema+`.sessions RETURNING id`).Scan(&old))

	u, err = s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "second", Concurrency: 1})
	require.NoError(t, err, "no new session for the registration")
	defer u()
	require.Equal(t, []string{"second"}, listedIDs(t, s))
	var now int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT session FROM `+schema+`.workers WHERE id = 'second'`).Scan(&now))
	require.NotEqual(t, old, now, "registered under the deleted session")
}
