package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var cancelTests = []test{
	{"QueuedNeverClaimed", testCancelQueued},
	{"DelayedNeverClaimed", testCancelDelayed},
	{"RunningRequestsCancel", testCancelRunning},
	{"RunningThenFailureEndsCanceled", testCancelRunningFailure},
	{"RunningThenSuccessEndsSucceeded", testCancelRunningSuccess},
	{"CanceledIsIdempotent", testCancelIdempotent},
	{"TerminalIsTransitionError", testCancelTerminal},
	{"NotFound", testCancelNotFound},
}

func testCancelQueued(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	before := time.Now()
	c, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, c.State)
	require.Zero(t, c.Attempt)
	require.WithinRange(t, c.FinishedAt, before.Add(-time.Millisecond), time.Now().Add(time.Millisecond))
	requireSameJob(t, c, get(t, s, j.ID))
	requireNoJob(t, s)
	requireNoJob(t, s, "k")
}

func testCancelDelayed(t *testing.T, s jobstore.Store) {
	runAt := time.Now().Add(50 * time.Millisecond)
	j := submit(t, s, jobstore.Spec{Kind: "k", RunAt: runAt})
	c, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, c.State)
	time.Sleep(time.Until(runAt) + 20*time.Millisecond)
	nj := requireNoJob(t, s)
	if nj != nil {
		require.True(t, nj.NextRunAt.IsZero(), "a canceled job still counts as queued for later")
	}
	require.Equal(t, jobstore.StateCanceled, get(t, s, j.ID).State)
}

func testCancelRunning(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	watch := start(func() error { return s.WatchCancel(t.Context(), c.Lease()) })
	watch.requireBlocked(t)

	r, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, r.State, "a running job stays running until its worker stops")
	require.True(t, r.CancelRequested)
	require.Equal(t, c.Attempt, r.Attempt)
	require.Equal(t, c.Worker, r.Worker)
	require.True(t, r.FinishedAt.IsZero())
	require.NoError(t, watch.result(t), "WatchCancel must return nil once cancel is requested")
	require.True(t, get(t, s, j.ID).CancelRequested)

	// Asking again changes nothing, and a new WatchCancel returns at once.
	again, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, again.State)
	require.True(t, again.CancelRequested)
	require.NoError(t, s.WatchCancel(t.Context(), c.Lease()))
	requireNoJob(t, s)
}

func testCancelRunningFailure(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 5})
	c := claimID(t, s, "w", j.ID)
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	f := complete(t, s, c, jobstore.Outcome{Error: "context canceled"})
	require.Equal(t, jobstore.StateCanceled, f.State, "a failure after cancel was requested ends canceled, not retried")
	require.Equal(t, "context canceled", f.LastError)
	require.False(t, f.FinishedAt.IsZero())
	requireSameJob(t, f, get(t, s, j.ID))
	time.Sleep(5 * time.Millisecond)
	requireNoJob(t, s)
}

func testCancelRunningSuccess(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`"made it"`)))
	require.Equal(t, jobstore.StateSucceeded, done.State, "an attempt that succeeds despite cancel ends succeeded")
	require.JSONEq(t, `"made it"`, string(done.Result))
}

func testCancelIdempotent(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	first, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond)
	second, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	requireSameJob(t, first, second)
	requireSameJob(t, first, get(t, s, j.ID))
}

func testCancelTerminal(t *testing.T, s jobstore.Store) {
	byState := jobsInEveryState(t, s, func(jobstore.State) string { return "" })
	for _, st := range []jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed} {
		j := byState[st]
		_, err := s.Cancel(t.Context(), j.ID)
		requireTransitionError(t, err, j.ID, st, jobstore.StateCanceled)
		requireSameJob(t, j, get(t, s, j.ID))
	}
}

func testCancelNotFound(t *testing.T, s jobstore.Store) {
	_, err := s.Cancel(t.Context(), jobstore.NewID(time.Now()))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}
