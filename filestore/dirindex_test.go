package filestore

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// listedNow returns the state directories' contents as a listing sees
// them, in the index's form.
func listedNow(t *testing.T, s *Store) []indexItem {
	t.Helper()
	dirs := map[string]uint8{}
	for i, d := range stateDirs {
		names, err := readNames(filepath.Join(s.dir, d))
		require.NoError(t, err)
		for _, n := range names {
			if id, ok := idFromName(n); ok {
				dirs[id] |= 1 << i
			}
		}
	}
	out := []indexItem{}
	for id, m := range dirs {
		out = append(out, indexItem{id: id, dirs: m})
	}
	slices.SortFunc(out, func(a, b indexItem) int {
		if a.id < b.id {
			return -1
		}
		return 1
	})
	return out
}

// indexNow returns the index after a barrier, as List and Stats read it.
func indexNow(t *testing.T, s *Store) []indexItem {
	t.Helper()
	_, complete, err := s.finishMoves(t.Context(), s.recordMoves())
	require.NoError(t, err)
	require.True(t, complete)
	snap := s.snapshot()
	require.NotNil(t, snap)
	return append([]indexItem{}, snap.items...)
}

// TestIndexFollowsEveryMove: after every kind of change, made by this
// Store, the index read after a barrier holds exactly what a listing of
// the state directories does, and after events were lost it is built
// again.
func TestIndexFollowsEveryMove(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	ctx := t.Context()
	check := func(step string) {
		t.Helper()
		require.Equal(t, listedNow(t, s), indexNow(t, s), step)
	}
	check("empty")
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	require.NoError(t, err)
	check("submit")
	for round := range 3 {
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		check("claim")
		_, err = s.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "again", RetryAfter: time.Nanosecond})
		require.NoError(t, err)
		check("complete")
		if c.Attempt >= c.MaxAttempts {
			_, err = s.Retry(ctx, j.ID)
			require.NoError(t, err)
			check("retry")
		}
		_ = round
	}
	_, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	check("cancel")
	_, err = s.Prune(ctx, 0)
	require.NoError(t, err)
	check("prune")

	// Events lost (as after an overflow): the index is dropped, and built
	// again from listings by the next reader.
	s.watchMu.Lock()
	w := s.watcher
	s.watchMu.Unlock()
	s.rebuildWatcher(w)
	s.mu.Lock()
	require.Equal(t, indexNone, s.index.state, "dropped")
	s.mu.Unlock()
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	check("rebuilt")
}

// TestIndexFollowsConcurrentMoves: while one job moves between the state
// directories as fast as another goroutine or process can move it, and
// List and Stats read the index, the index stays right: once the moves
// stop, it holds what a listing does, and Stats counts what a new Store
// that reads every record counts.
func TestIndexFollowsConcurrentMoves(t *testing.T) {
	for _, where := range []string{"goroutine", "process"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			s := openAt(t, dir, &Options{NoSync: true})
			ctx := t.Context()
			_, _, err := s.Submit(ctx, jobstore.Spec{Kind: cycleKind, MaxAttempts: 3})
			require.NoError(t, err)
			cctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			var c *testproc.Proc
			if where == "goroutine" {
				go func() { done <- cycleJob(cctx, s, "cycler", nil) }()
			} else {
				// Stopped with SIGSTOP, not killed: a dead worker's job
				// would move again, by recovery, while the test compares.
				c = startChild(t, dir, "cycle", childNoSync+"=1")
				require.Equal(t, "cycling", c.Next(t))
				go func() { <-cctx.Done(); done <- c.Stop(ctx) }()
			}
			for range 200 {
				_, err := s.Stats(ctx)
				require.NoError(t, err)
				_, err = s.List(ctx, jobstore.ListOptions{})
				require.NoError(t, err)
			}
			stop()
			require.NoError(t, <-done)
			require.Equal(t, listedNow(t, s), indexNow(t, s))
			// And Stats, from its cache, counts what a Store that reads
			// every record does.
			fresh := openAt(t, dir, &Options{NoSync: true})
			if c != nil {
				// The stopped child may hold the job's lock: kill it
				// before the stores' cleanups (run last first) check
				// the directory, which would wait for that lock.
				t.Cleanup(func() {
					_ = c.Signal(syscall.SIGKILL)
					_ = c.Wait(context.Background())
				})
			}
			want, err := fresh.Stats(ctx)
			require.NoError(t, err)
			got, err := s.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// TestListStatsSeeOtherProcessAtOnce: a submit, a claim, a completion and
// a prune made by another process show in this Store's List and Stats as
// soon as that process has made them, with the index and the cache of
// Stats warm from before.
func TestListStatsSeeOtherProcessAtOnce(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	see := func(step string, want map[jobstore.State][]string) {
		t.Helper()
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		page, err := s.List(ctx, jobstore.ListOptions{})
		require.NoError(t, err)
		got := map[jobstore.State][]string{}
		for _, j := range page.Jobs {
			got[j.State] = append(got[j.State], j.ID)
		}
		require.Equal(t, want, got, "%s: List", step)
		for _, state := range jobstore.States() {
			require.Equal(t, len(want[state]), st.Counts[state], "%s: Stats of %s", step, state)
			page, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{state}})
			require.NoError(t, err)
			require.Len(t, page.Jobs, len(want[state]), "%s: List of %s", step, state)
		}
	}
	see("empty", map[jobstore.State][]string{})
	submit := func(key string) string {
		c := startChild(t, dir, "submit-key", childKey+"="+key, childNoSync+"=1")
		out := c.Lines(t)
		require.Len(t, out, 1)
		f := strings.Fields(out[0])
		return f[1]
	}
	a := submit("a")
	see("submitted", map[jobstore.State][]string{jobstore.StateQueued: {a}})
	startChild(t, dir, "claim-all", childNoSync+"=1").Lines(t)
	see("completed", map[jobstore.State][]string{jobstore.StateSucceeded: {a}})
	startChild(t, dir, "prune", childNoSync+"=1").Lines(t)
	see("pruned", map[jobstore.State][]string{})
	b := submit("b")
	see("submitted again", map[jobstore.State][]string{jobstore.StateQueued: {b}})
	c := startChild(t, dir, "claim-hold", childNoSync+"=1")
	require.Equal(t, "claimed "+b, c.Next(t))
	see("claimed", map[jobstore.State][]string{jobstore.StateRunning: {b}})
}
