package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var releaseTests = []test{
	{"RequeuesCountingTheAttempt", testReleaseRequeues},
	{"LastAttemptFails", testReleaseLastAttempt},
	{"CancelRequestedEndsCanceled", testReleaseCanceled},
	{"NotHeld", testReleaseNotHeld},
	{"WakesWaiters", testReleaseWakesWaiters},
	{"EndedContextStillGivesBack", testReleaseEndedContext},
}

// testReleaseRequeues: a given-back attempt counts, the job is due again at
// once, and the old lease holds nothing any more.
func testReleaseRequeues(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	c := claimID(t, s, "w", j.ID)
	before := time.Now()
	require.NoError(t, s.Release(ctx, c.Lease()))

	got := get(t, s, j.ID)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, 2, got.MaxAttempts, "the attempt counts: max_attempts is unchanged")
	require.False(t, got.RunAt.After(time.Now()), "due again at once, with no backoff")
	require.Contains(t, got.LastError, "could not be recorded")
	require.NotEmpty(t, got.History)
	last := got.History[len(got.History)-1]
	require.Equal(t, jobstore.EndWorkerLost, last.End)
	require.Equal(t, 1, last.Attempt)
	require.WithinRange(t, last.FinishedAt, before.Add(-time.Millisecond), time.Now().Add(time.Millisecond))

	_, err := s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "the released lease cannot complete")
	require.ErrorIs(t, s.WatchCancel(ctx, c.Lease()), jobstore.ErrNotHeld)
	require.ErrorIs(t, s.Release(ctx, c.Lease()), jobstore.ErrNotHeld, "a second release")

	again := claimID(t, s, "w", j.ID)
	require.Equal(t, 2, again.Attempt)
}

func testReleaseLastAttempt(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	c := claimID(t, s, "w", j.ID)
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	got := get(t, s, j.ID)
	require.Equal(t, jobstore.StateFailed, got.State, "the last attempt given back is final")
	require.False(t, got.FinishedAt.IsZero())
	requireNoJob(t, s)
}

func testReleaseCanceled(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c := claimID(t, s, "w", j.ID)
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	require.Equal(t, jobstore.StateCanceled, get(t, s, j.ID).State)
	requireNoJob(t, s)
}

// testReleaseNotHeld: leases that do not hold the job get ErrNotHeld and
// change nothing.
func testReleaseNotHeld(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c := claimID(t, s, "w", j.ID)
	before := get(t, s, j.ID)
	for name, l := range map[string]jobstore.Lease{
		"other worker": {ID: j.ID, Worker: "someone-else", Attempt: c.Attempt},
		"old attempt":  {ID: j.ID, Worker: "w", Attempt: c.Attempt + 1},
	} {
		require.ErrorIs(t, s.Release(ctx, l), jobstore.ErrNotHeld, name)
	}
	requireSameJob(t, before, get(t, s, j.ID))

	done := complete(t, s, c, jobstore.Succeeded(nil))
	require.ErrorIs(t, s.Release(ctx, c.Lease()), jobstore.ErrNotHeld, "after completion")
	requireSameJob(t, done, get(t, s, j.ID))

	err := s.Release(ctx, jobstore.Lease{ID: "not-an-id", Worker: "w", Attempt: 1})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

func testReleaseWakesWaiters(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	c := claimID(t, s, "w", j.ID)
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	done := make(chan jobstore.Job, 1)
	errc := make(chan error, 1)
	go func() {
		w, err := s.Wait(ctx, j.ID)
		errc <- err
		done <- w
	}()
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	require.NoError(t, <-errc)
	require.Equal(t, jobstore.StateFailed, (<-done).State)
}

// testReleaseEndedContext: a Release whose ctx has already ended (a worker
// that gave up on everything) may return the ctx error, but the job does
// not stay running: the store gives the attempt back, or lets recovery do
// it, within its usual time.
func testReleaseEndedContext(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	c := claimID(t, s, "w", j.ID)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Release(ended, c.Lease()); err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
	ctx, stop := context.WithTimeout(t.Context(), eventually)
	defer stop()
	got, err := s.Wait(ctx, j.ID)
	require.NoError(t, err, "the job stayed running after its lease was given up")
	require.Equal(t, jobstore.StateFailed, got.State)
	require.Equal(t, jobstore.EndWorkerLost, got.History[len(got.History)-1].End)
}
