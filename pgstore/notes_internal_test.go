package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

// TestWatchCancelAfterClaim: a WatchCancel of a job this store has just
// claimed does not read the row while no notification named the job since
// the claim began, and does read it once one did: a cancel from another
// process that lands between the claim and the WatchCancel still ends it.
func TestWatchCancelAfterClaim(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.Pool(t, 4), &Options{Schema: schema})
	require.NoError(t, err)
	defer s.Close()
	other, err := Open(ctx, pgtest.Pool(t, 4), &Options{Schema: schema})
	require.NoError(t, err)
	defer other.Close()
	s.ensureListener()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.listening
	}, 10*time.Second, time.Millisecond, "the listener did not start")

	_, err = s.SubmitBatch(ctx, []jobstore.Spec{{Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	jobs, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, 2)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	quiet := func(j jobstore.Job) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.quietSinceLocked(j.ID, s.held[j.Lease()].from)
	}
	for _, j := range jobs {
		require.True(t, quiet(j), "job %s: no read needed right after the claim", j.ID)
	}

	// A cancel in another store between the claim and the WatchCancel.
	canceled, waiting := jobs[0], jobs[1]
	_, err = other.Cancel(ctx, canceled.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !quiet(canceled) }, 10*time.Second, time.Millisecond,
		"the cancel's notification did not arrive")
	require.True(t, quiet(waiting), "a notification about another job counts for this one")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, s.WatchCancel(wctx, canceled.Lease()), "a cancel before the WatchCancel was missed")

	// A cancel while the WatchCancel waits, without having read the row.
	done := make(chan error, 1)
	go func() { done <- s.WatchCancel(wctx, waiting.Lease()) }()
	_, err = other.Cancel(ctx, waiting.ID)
	require.NoError(t, err)
	require.NoError(t, <-done)
}

// TestNotesForget: the notes remember the latest noteKeep notifications;
// past them, nothing counts as quiet.
func TestNotesForget(t *testing.T) {
	n := notes{last: map[string]uint64{}}
	n.add("a")
	at := n.seq
	n.add("b")
	require.LessOrEqual(t, n.floor, at)
	require.LessOrEqual(t, n.last["a"], at)
	require.Greater(t, n.last["b"], at)
	for range noteKeep {
		n.add("c")
	}
	require.Greater(t, n.floor, at, "forgotten notifications must end the quiet")
	require.NotContains(t, n.last, "a")
	require.NotContains(t, n.last, "b")
	require.Equal(t, n.seq, n.last["c"])
	require.Len(t, n.last, 1)
}
