package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var watchCancelTests = []test{
	{"NotHeldAfterCompletion", testWatchCancelAfterCompletion},
	{"NotHeldForOtherLeases", testWatchCancelOtherLeases},
	{"ReturnsNotHeldWhenLeaseEnds", testWatchCancelLeaseEnds},
	{"ContextDeadline", testWatchCancelDeadline},
}

func testWatchCancelAfterCompletion(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	complete(t, s, c, jobstore.Succeeded(nil))
	require.ErrorIs(t, s.WatchCancel(t.Context(), c.Lease()), jobstore.ErrNotHeld)
}

func testWatchCancelOtherLeases(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	other := c.Lease()
	other.Worker = "someone-else"
	require.ErrorIs(t, s.WatchCancel(t.Context(), other), jobstore.ErrNotHeld)
	other = c.Lease()
	other.Attempt++
	require.ErrorIs(t, s.WatchCancel(t.Context(), other), jobstore.ErrNotHeld)
	require.NoError(t, s.WatchCancel(t.Context(), c.Lease()))
}

func testWatchCancelLeaseEnds(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	watch := start(func() error { return s.WatchCancel(t.Context(), c.Lease()) })
	watch.requireBlocked(t)
	complete(t, s, c, jobstore.Outcome{Error: "x", RetryAfter: time.Hour})
	require.ErrorIs(t, watch.result(t), jobstore.ErrNotHeld)
}

func testWatchCancelDeadline(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	watch := start(func() error { return s.WatchCancel(ctx, c.Lease()) })
	require.ErrorIs(t, watch.result(t), context.DeadlineExceeded)
	require.Equal(t, jobstore.StateRunning, get(t, s, j.ID).State)
}
