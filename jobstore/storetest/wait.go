package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var waitTests = []test{
	{"ReturnsOnCompletion", testWaitCompletion},
	{"AlreadyTerminal", testWaitTerminal},
	{"IgnoresRetries", testWaitIgnoresRetries},
	{"ReturnsOnCancel", testWaitCancel},
	{"ContextDeadline", testWaitDeadline},
	{"NotFound", testWaitNotFound},
}

func testWaitCompletion(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	var got jobstore.Job
	w := start(func() (err error) { got, err = s.Wait(t.Context(), j.ID); return err })
	w.requireBlocked(t)
	c := claimID(t, s, "w", j.ID)
	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`"r"`)))
	require.NoError(t, w.result(t))
	requireSameJob(t, done, got)
}

func testWaitTerminal(t *testing.T, s jobstore.Store) {
	for st, j := range jobsInEveryState(t, s, func(jobstore.State) string { return "" }) {
		if !st.Terminal() {
			continue
		}
		got, err := s.Wait(t.Context(), j.ID)
		require.NoError(t, err)
		requireSameJob(t, j, got)
	}
}

func testWaitIgnoresRetries(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	var got jobstore.Job
	w := start(func() (err error) { got, err = s.Wait(t.Context(), j.ID); return err })
	c := claimID(t, s, "w", j.ID)
	w.requireBlocked(t)
	c = failAndReclaim(t, s, c, "w")
	w.requireBlocked(t)
	f := complete(t, s, c, jobstore.Outcome{Error: "final"})
	require.NoError(t, w.result(t))
	require.Equal(t, jobstore.StateFailed, got.State)
	requireSameJob(t, f, got)
}

func testWaitCancel(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	var got jobstore.Job
	w := start(func() (err error) { got, err = s.Wait(t.Context(), j.ID); return err })
	w.requireBlocked(t)
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.NoError(t, w.result(t))
	require.Equal(t, jobstore.StateCanceled, got.State)
}

func testWaitDeadline(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	w := start(func() error { _, err := s.Wait(ctx, j.ID); return err })
	require.ErrorIs(t, w.result(t), context.DeadlineExceeded)

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err := s.Wait(ctx, j.ID)
	require.ErrorIs(t, err, context.Canceled)
}

func testWaitNotFound(t *testing.T, s jobstore.Store) {
	_, err := s.Wait(t.Context(), jobstore.NewID(time.Now()))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}
