package filestore

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// TestProcessesSubmitOneKey: N processes submitting one key at the same
// instant get one job, and exactly one of them created it.
func TestProcessesSubmitOneKey(t *testing.T) {
	t.Parallel()
	const n = 8
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	for round := range 2 {
		key := fmt.Sprintf("invoice-%d", round)
		start := time.Now().Add(time.Second).UnixNano()
		var kids []*testproc.Proc
		for range n {
			kids = append(kids, startChild(t, dir, "submit-key",
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
// created by exactly one of them.
func TestProcessesSubmitBatchKeys(t *testing.T) {
	t.Parallel()
	const n = 4
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	start := time.Now().Add(time.Second).UnixNano()
	var kids []*testproc.Proc
	for i := range n {
		kids = append(kids, startChild(t, dir, "submit-batch",
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

// TestProcessesClaimEachOnce: M processes claiming K jobs hand out each
// job exactly once, half of them with Claim and half with ClaimBatch.
func TestProcessesClaimEachOnce(t *testing.T) {
	t.Parallel()
	const m, k = 4, 400
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	want := map[string]bool{}
	for range k {
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
		require.NoError(t, err)
		want[j.ID] = true
	}
	var kids []*testproc.Proc
	for i := range m {
		// NoSync children: this test is about exactly-once, not durability.
		env := []string{childNoSync + "=1"}
		if i%2 == 0 {
			env = append(env, childKey+"=batch")
		}
		kids = append(kids, startChild(t, dir, "claim-all", env...))
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

// TestProcessKilledJobRequeued: a worker process SIGKILLed while holding a
// job loses it; the job is queued again, attempt counted, and claimed by
// another process within about a second.
func TestProcessKilledJobRequeued(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noBackoff := func(int) time.Duration { return 0 }
	s := openAt(t, dir, &Options{NoSync: true, Backoff: noBackoff})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work", MaxAttempts: 3})
	require.NoError(t, err)
	c := startChild(t, dir, "hold")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))

	// Alive, the worker keeps its job: recovery must not touch it.
	time.Sleep(3 * DefaultRecoverInterval)
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State)

	require.NoError(t, c.Signal(syscall.SIGKILL))
	killed := time.Now()
	var requeued time.Duration
	require.Eventually(t, func() bool {
		got, err := s.Get(t.Context(), j.ID)
		require.NoError(t, err)
		requeued = time.Since(killed)
		return got.State == jobstore.StateQueued
	}, 10*time.Second, 5*time.Millisecond)
	got, err = claimOne(t.Context(), s, "survivor")
	require.NoError(t, err)
	claimed := time.Since(killed)
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
	require.Contains(t, got.LastError, "died during attempt 1")
	t.Logf("dead worker's job queued again %v after SIGKILL, claimed by another process after %v (no backoff)", requeued, claimed)
	require.Less(t, claimed, 10*time.Second) // ~0.3s expected; generous for a loaded machine
	_, err = s.Complete(t.Context(), got.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
}

// TestProcessEndWakesRecovery: a Store that claims learns of another
// process's end from the close of that process's end mark, and runs the
// job it held again at once, without waiting for its periodic recovery
// pass (an hour here): when the process is killed, also when it is PID 1
// of its own PID namespace (a pod), and when it closes its Store
// (releasing the lease) but lives on.
func TestProcessEndWakesRecovery(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the ends of other processes are watched on Linux only")
	}
	t.Parallel()
	for _, end := range []string{"killed", "killed pod", "closed"} {
		t.Run(end, func(t *testing.T) {
			pod := end == "killed pod"
			if pod {
				testproc.RequirePIDNamespaces(t)
			}
			t.Parallel()
			dir := t.TempDir()
			s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour, Backoff: func(int) time.Duration { return 0 }})
			// A Store watches for ends from its first Claim.
			_, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "survivor"})
			require.ErrorIs(t, err, jobstore.ErrNoJob)
			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work", MaxAttempts: 3})
			require.NoError(t, err)
			role := map[string]string{"killed": "hold", "killed pod": "hold", "closed": "claim-close"}[end]
			c := testproc.Start(t, role, &testproc.Options{PIDNamespace: pod, Env: []string{childDir + "=" + dir}})
			require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
			got, err := s.Get(t.Context(), j.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateRunning, got.State)

			if end != "closed" {
				require.NoError(t, c.Signal(syscall.SIGKILL))
			} else {
				_, err := io.WriteString(c.Stdin(), "close\n")
				require.NoError(t, err)
				require.Equal(t, "closed", c.Next(t))
			}
			ended := time.Now()
			got, err = claimOne(t.Context(), s, "survivor")
			require.NoError(t, err)
			t.Logf("%s worker's job claimed by another process %v later (no backoff)", end, time.Since(ended))
			require.Equal(t, j.ID, got.ID)
			require.Equal(t, 2, got.Attempt)
			_, err = s.Complete(t.Context(), got.Lease(), jobstore.Succeeded(nil))
			require.NoError(t, err)
		})
	}
}

// TestProcessCancelReachesWorker: a cancel in one process reaches
// WatchCancel in the process running the job.
func TestProcessCancelReachesWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	var lat []time.Duration
	for range 3 {
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
		require.NoError(t, err)
		c := startChild(t, dir, "watch-cancel")
		require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
		time.Sleep(100 * time.Millisecond) // let the child enter WatchCancel
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
		require.Less(t, l, 5*time.Second) // ~ms expected; the poll fallback is 1s
	}
}

// TestProcessWaitSeesCompletion: Wait in one process returns when another
// completes the job.
func TestProcessWaitSeesCompletion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, PollInterval: time.Minute})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c := startChild(t, dir, "complete-later")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
	done, err := s.Wait(t.Context(), j.ID)
	returned := time.Now()
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
	f := strings.Fields(c.Next(t))
	at, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	t.Logf("Wait returned %v after the other process's Complete returned", returned.Sub(time.Unix(0, at)))
}

// TestProcessStoppedWorkerKeepsJob: a stopped (SIGSTOP) worker is not a
// dead one: flock has no expiry, so it keeps its job for as long as it is
// stopped. This is the documented caveat, shown.
func TestProcessStoppedWorkerKeepsJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c := startChild(t, dir, "hold")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
	require.NoError(t, c.Signal(syscall.SIGSTOP))
	time.Sleep(20 * 50 * time.Millisecond)
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State, "a stopped worker's job was taken from it")
	require.NoError(t, c.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool {
		got, err := s.Get(t.Context(), j.ID)
		return err == nil && got.State == jobstore.StateQueued
	}, 10*time.Second, 10*time.Millisecond)
}
