package filestore

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
// the state directories does.
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
}

// TestIndexFollowsConcurrentMoves: while one job moves between the state
// directories as fast as another goroutine or process can move it, and
// List and Stats read the index, the index stays right: once the moves
// stop, it holds what a listing does.
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
			if where == "goroutine" {
				go func() { done <- cycleJob(cctx, s, "cycler", nil) }()
			} else {
				// Stopped with SIGSTOP, not killed: a dead worker's job
				// would move again, by recovery, while the test compares.
				c := startChild(t, dir, "cycle", childNoSync+"=1")
				require.Equal(t, "cycling", c.next(t))
				go func() { <-cctx.Done(); done <- c.cmd.Process.Signal(syscall.SIGSTOP) }()
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
		})
	}
}
