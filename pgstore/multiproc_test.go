package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// openStore opens a store in schema with a small pool of its own, closed
// when t ends.
func openStore(t *testing.T, schema string, o *pgstore.Options) *pgstore.Store {
	t.Helper()
	if o == nil {
		o = &pgstore.Options{}
	}
	o.Schema = schema
	s, err := pgstore.Open(t.Context(), pgtest.Pool(t, 4), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestProcessesSubmitOneKey: eight processes, each with its own pool,
// submitting one key at the same instant get one job, and exactly one of
// them created it.
func TestProcessesSubmitOneKey(t *testing.T) {
	const n = 8
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	for round := range 2 {
		key := fmt.Sprintf("invoice-%d", round)
		start := time.Now().Add(2 * time.Second).UnixNano()
		var kids []*testproc.Proc
		for range n {
			kids = append(kids, startChild(t, schema, "submit-key",
				childKey+"="+key, childStart+"="+strconv.FormatInt(start, 10)))
		}
		ids := map[string]bool{}
		created := 0
		for _, c := range kids {
			out := c.Lines(t)
			require.Len(t, out, 1)
			f := strings.Fields(out[0])
			require.Equal(t, "submitted", f[0])
			ids[f[1]] = true
			if f[2] == "true" {
				created++
			}
		}
		require.Len(t, ids, 1, "processes got different jobs for one key")
		require.Equal(t, 1, created, "not exactly one process created the job")
		page, err := s.List(t.Context(), jobstore.ListOptions{Kind: "race"})
		require.NoError(t, err)
		require.Len(t, page.Jobs, round+1)
	}
}

// batchKeys is how many keys each submit-batch child uses.
const batchKeys = 30

// TestProcessesSubmitBatchKeys: processes submitting batches over one set
// of keys, in different orders, at the same moment, get one job per key,
// created by exactly one of them, and no batch fails on a deadlock.
func TestProcessesSubmitBatchKeys(t *testing.T) {
	const n = 4
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	start := time.Now().Add(2 * time.Second).UnixNano()
	var kids []*testproc.Proc
	for i := range n {
		kids = append(kids, startChild(t, schema, "submit-batch",
			childKey+"="+strconv.Itoa(i), childStart+"="+strconv.FormatInt(start, 10)))
	}
	owner := map[string]string{}
	created := map[string]int{}
	unkeyed := map[string]bool{}
	for _, c := range kids {
		out := c.Lines(t)
		require.Len(t, out, 2*batchKeys)
		for _, line := range out {
			f := strings.Fields(line)
			require.Equal(t, "submitted", f[0])
			if len(f) == 3 {
				require.Equal(t, "true", f[2])
				unkeyed[f[1]] = true
				continue
			}
			key := f[3]
			if id, ok := owner[key]; ok {
				require.Equal(t, id, f[1], "processes got different jobs for key %s", key)
			}
			owner[key] = f[1]
			if f[2] == "true" {
				created[key]++
			}
		}
	}
	require.Len(t, owner, batchKeys)
	for key := range owner {
		require.Equal(t, 1, created[key], "key %s created by %d processes", key, created[key])
	}
	require.Len(t, unkeyed, n*batchKeys)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, batchKeys+n*batchKeys, st.Counts[jobstore.StateQueued])
}

// TestProcessesClaimEachOnce: four processes claiming 400 jobs hand out
// each job exactly once.
func TestProcessesClaimEachOnce(t *testing.T) {
	const m, k = 4, 400
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	specs := make([]jobstore.Spec, k)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "work"}
	}
	out, err := s.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	want := map[string]bool{}
	for _, r := range out {
		want[r.Job.ID] = true
	}
	var kids []*testproc.Proc
	for range m {
		kids = append(kids, startChild(t, schema, "claim-all"))
	}
	got := map[string]int{}
	perChild := make([]int, m)
	for i, c := range kids {
		for _, l := range c.Lines(t) {
			f := strings.Fields(l)
			require.Equal(t, "claimed", f[0])
			require.Equal(t, "1", f[2], "job %s claimed at attempt %s", f[1], f[2])
			got[f[1]]++
			perChild[i]++
		}
	}
	for id, n := range got {
		require.Equal(t, 1, n, "job %s claimed %d times", id, n)
		require.True(t, want[id])
	}
	require.Len(t, got, k, "not every job was claimed")
	t.Logf("claims per process: %v", perChild)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, k, st.Counts[jobstore.StateSucceeded])
}

// waitState polls the job until it is in state, and returns how long
// that took from since; it fails the test after limit.
func waitState(t *testing.T, s jobstore.Store, id string, state jobstore.State, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for {
		j, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		if j.State == state {
			return time.Since(since)
		}
		require.Less(t, time.Since(since), limit, "job %s still %s after %s", id, j.State, limit)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProcessKilledJobRequeued: a worker process SIGKILLed while holding a
// job loses it: its connections close, the server releases its session
// lock, and the job is queued again (attempt counted) and claimed by
// another process within 2 seconds.
func TestProcessKilledJobRequeued(t *testing.T) {
	schema := pgtest.Schema(t)
	noBackoff := func(int) time.Duration { return 0 }
	s := openStore(t, schema, &pgstore.Options{Backoff: noBackoff, RecoverInterval: 100 * time.Millisecond})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work", MaxAttempts: 3})
	require.NoError(t, err)
	c := startChild(t, schema, "hold")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))

	// Alive, the worker keeps its job: recovery must not touch it.
	time.Sleep(10 * 100 * time.Millisecond)
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State)

	require.NoError(t, c.Signal(syscall.SIGKILL))
	killed := time.Now()
	requeued := waitState(t, s, j.ID, jobstore.StateQueued, killed, 10*time.Second)
	got, err = claimOne(t.Context(), s, "survivor")
	require.NoError(t, err)
	claimed := time.Since(killed)
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
	require.Contains(t, got.LastError, "died during attempt 1")
	t.Logf("dead worker's job queued again %v after SIGKILL, claimed by another process after %v", requeued, claimed)
	require.Less(t, claimed, 2*time.Second, "the dead worker's job was not re-run within 2s")
	_, err = s.Complete(t.Context(), got.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
}

// TestProcessCancelReachesWorker: a cancel in one process reaches
// WatchCancel in the process running the job, by notification.
func TestProcessCancelReachesWorker(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	var lat []time.Duration
	for range 3 {
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
		require.NoError(t, err)
		c := startChild(t, schema, "watch-cancel", childTTL+"=1m")
		require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
		time.Sleep(200 * time.Millisecond) // let the child enter WatchCancel
		sent := time.Now()
		_, err = s.Cancel(t.Context(), j.ID)
		require.NoError(t, err)
		f := strings.Fields(c.Next(t))
		require.Equal(t, "canceled", f[0])
		at, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		lat = append(lat, time.Unix(0, at).Sub(sent))
		c.Lines(t)
		done, err := s.Wait(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateCanceled, done.State)
	}
	t.Logf("cross-process cancel latency: %v", lat)
	for _, l := range lat {
		// Milliseconds expected; the poll, 1s, is only for a listener down.
		require.Less(t, l, time.Second)
	}
}

// TestProcessSubmitWakesWorker: a worker blocked in AwaitWork, whose poll
// is a minute, claims within moments a job that another process submits
// and closes its store right after, by Submit, by a SubmitBatch without
// keys and by one with keys: the work notification, sent after the
// submit's commit, goes out before Close returns.
func TestProcessSubmitWakesWorker(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openListening(t, schema, 0)
	for _, how := range []string{"submit", "batch", "keyed-batch"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			require.ErrorIs(t, err, jobstore.ErrNoJob)
			woke := make(chan error, 1)
			go func() { woke <- s.AwaitWork(ctx) }()
			require.Eventually(t, func() bool { return listeners(t, schema) == 1 }, 10*time.Second, 10*time.Millisecond)
			c := startChild(t, schema, "submit-and-close", childKey+"="+how)
			require.NoError(t, c.Wait(ctx), c.Output())
			require.NoError(t, <-woke, "AwaitWork did not return within 10 s of the submit")
			for {
				j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
				if errors.Is(err, jobstore.ErrNoJob) {
					break
				}
				require.NoError(t, err)
				_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
				require.NoError(t, err)
			}
		})
	}
}

// TestProcessWaitSeesCompletion: Wait in one process returns when another
// completes the job, woken by a notification (its poll is a minute).
func TestProcessWaitSeesCompletion(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{PollInterval: time.Minute})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c := startChild(t, schema, "complete-later")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done, err := s.Wait(ctx, j.ID)
	returned := time.Now()
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
	f := strings.Fields(c.Next(t))
	at, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	t.Logf("Wait returned %v after the other process's Complete returned", returned.Sub(time.Unix(0, at)))
}

// watchResult parses a watch-lease child's "watch <unixnano> <class>" line.
func watchResult(t *testing.T, line string) (time.Time, string) {
	t.Helper()
	f := strings.Fields(line)
	require.Len(t, f, 3, line)
	require.Equal(t, "watch", f[0])
	at, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return time.Unix(0, at), f[2]
}

// TestProcessNodeLossRecoveredWithinTTL: a worker that stops renewing
// while its connections stay open (SIGSTOP stands for a lost node or a hung
// process) loses its job when its lease session expires, LeaseTTL after its
// last renewal on the database's clock; the job runs elsewhere, and once
// the worker runs again it learns that its lease went with its session
// (ErrLeaseLost, even before its keeper sees the session end) and its
// Complete is refused.
func TestProcessNodeLossRecoveredWithinTTL(t *testing.T) {
	const ttl = 2 * time.Second
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 100 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c := startChild(t, schema, "watch-lease", childTTL+"="+ttl.String())
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))

	// Alive, it renews: its job stays its own for several TTLs.
	time.Sleep(2 * ttl)
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State, "a live, renewing worker lost its job")

	require.NoError(t, c.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	requeued := waitState(t, s, j.ID, jobstore.StateQueued, stopped, 30*time.Second)
	t.Logf("job of a worker that stopped renewing queued again %v after it stopped (LeaseTTL %v)", requeued, ttl)
	// The last renewal was at most ttl/4 before the stop.
	require.GreaterOrEqual(t, requeued, ttl-ttl/4, "recovered before the lease expired")
	require.Less(t, requeued, ttl+2*time.Second, "not recovered within the TTL")
	again, err := claimOne(t.Context(), s, "survivor")
	require.NoError(t, err)
	require.Equal(t, 2, again.Attempt)

	require.NoError(t, c.Signal(syscall.SIGCONT))
	_, class := watchResult(t, c.Next(t))
	// Its keeper may not have seen the session end yet: the store asks the
	// database, and the errors say the lease went with the session.
	require.Equal(t, "lease-lost", class, "WatchCancel of the stale worker")
	require.Equal(t, "complete lease-lost", c.Next(t), "Complete of the stale worker")
	c.Lines(t)
	done, err := s.Complete(t.Context(), again.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
	require.Empty(t, done.Result, "the stale worker's result was recorded")
}

// terminate runs pg_terminate_backend on the backends that query selects
// (their pids), and returns how many it ended.
func terminate(t *testing.T, query string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.DSN())
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var n int
	err = conn.QueryRow(t.Context(),
		`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM (`+query+`) q) t`, args...).Scan(&n)
	require.NoError(t, err)
	return n
}

// TestProcessTerminatedLeaseConnection: when the server closes a worker's
// lease connection (pg_terminate_backend; a restart does the same), the
// worker sees it at once and gives its lease up (WatchCancel returns
// ErrNotHeld wrapping ErrLeaseLost), and only after that, LeaseGrace
// later, does the job run elsewhere; the stale worker's Complete is
// refused.
func TestProcessTerminatedLeaseConnection(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 100 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c := startChild(t, schema, "watch-lease")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
	time.Sleep(200 * time.Millisecond)

	cut := time.Now()
	require.Equal(t, 1, terminate(t, `SELECT backend_pid AS pid FROM `+schema+`.sessions WHERE pid = $1`, c.Pid()))
	at, class := watchResult(t, c.Next(t))
	require.Equal(t, "lease-lost", class)
	noticed := at.Sub(cut)
	require.Equal(t, "complete lease-lost", c.Next(t))
	c.Lines(t)

	got, err := claimOne(t.Context(), s, "survivor")
	require.NoError(t, err)
	rerun := time.Since(cut)
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
	t.Logf("worker saw its lease connection closed after %v; the job ran elsewhere after %v", noticed, rerun)
	require.Less(t, noticed, time.Second)
	require.Less(t, rerun, 2*time.Second)
	require.GreaterOrEqual(t, rerun, pgstore.DefaultLeaseGrace, "the job ran elsewhere before the grace ended")
}
