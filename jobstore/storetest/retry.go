package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var retryTests = []test{
	{"Failed", testRetryFailed},
	{"FailedWithAttemptsLeft", testRetryFailedAttemptsLeft},
	{"Canceled", testRetryCanceled},
	{"OtherStatesTransitionError", testRetryOtherStates},
	{"NotFound", testRetryNotFound},
}

func testRetryFailed(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	c := claimID(t, s, "w1", j.ID)
	f := complete(t, s, c, jobstore.Outcome{Error: "boom"})
	require.Equal(t, jobstore.StateFailed, f.State)

	before := time.Now()
	r, err := s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
	require.Equal(t, 1, r.Attempt, "Attempt keeps counting so that old leases stay fenced off")
	require.Equal(t, 2, r.MaxAttempts, "exhausted attempts are raised to allow one more")
	require.True(t, r.FinishedAt.IsZero())
	require.False(t, r.CancelRequested)
	require.WithinRange(t, r.RunAt, before.Add(-time.Millisecond), time.Now().Add(time.Millisecond))
	requireSameJob(t, r, get(t, s, j.ID))

	// The old lease stays dead; the new attempt runs.
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotHeld)
	c2 := claimID(t, s, "w2", j.ID)
	require.Equal(t, 2, c2.Attempt)
	require.ErrorIs(t, s.WatchCancel(t.Context(), c.Lease()), jobstore.ErrNotHeld)
	done := complete(t, s, c2, jobstore.Succeeded(json.RawMessage(`1`)))
	require.Equal(t, jobstore.StateSucceeded, done.State)
}

func testRetryFailedAttemptsLeft(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 4})
	c := claimID(t, s, "w", j.ID)
	complete(t, s, c, jobstore.Outcome{Error: "bad", Permanent: true})
	r, err := s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
	require.Equal(t, 1, r.Attempt)
	require.Equal(t, 4, r.MaxAttempts, "MaxAttempts grows only when the attempts are used up")
}

func testRetryCanceled(t *testing.T, s jobstore.Store) {
	// Canceled while queued: never ran.
	j := submitKind(t, s, "k")
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	r, err := s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
	require.Zero(t, r.Attempt)
	c := claimID(t, s, "w", j.ID)
	require.Equal(t, 1, c.Attempt)

	// Canceled while running: the retry clears CancelRequested.
	_, err = s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	f := complete(t, s, c, jobstore.Outcome{Error: "stopped"})
	require.Equal(t, jobstore.StateCanceled, f.State)
	r, err = s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
	require.False(t, r.CancelRequested)
	require.Equal(t, 1, r.Attempt)
	c = claimID(t, s, "w", j.ID)
	require.Equal(t, 2, c.Attempt)
	require.False(t, c.CancelRequested)
}

func testRetryOtherStates(t *testing.T, s jobstore.Store) {
	byState := jobsInEveryState(t, s, func(jobstore.State) string { return "" })
	for _, st := range []jobstore.State{jobstore.StateQueued, jobstore.StateRunning, jobstore.StateSucceeded} {
		j := byState[st]
		_, err := s.Retry(t.Context(), j.ID)
		requireTransitionError(t, err, j.ID, st, jobstore.StateQueued)
		requireSameJob(t, j, get(t, s, j.ID))
	}
}

func testRetryNotFound(t *testing.T, s jobstore.Store) {
	_, err := s.Retry(t.Context(), jobstore.NewID(time.Now()))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}
