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
	{"AfterRetryRequeues", testReleaseAfterRetryRequeues},
	{"AfterRetryOnItsLastAttemptFails", testReleaseAfterRetryLastAttempt},
	{"RetryWhileHeldChangesNothing", testReleaseRetryWhileHeld},
	{"CancelWhileHeldThenRetry", testReleaseCancelThenRetry},
	{"WakesAwaitWork", testReleaseWakesAwaitWork},
}

// retried returns job j after it failed for good (a permanent failure of
// its first attempt) and was retried.
func retried(t *testing.T, s jobstore.Store, j jobstore.Job) jobstore.Job {
	t.Helper()
	c := claimID(t, s, "w", j.ID)
	require.Equal(t, jobstore.StateFailed, complete(t, s, c, jobstore.Outcome{Error: "broke", Permanent: true}).State)
	r, err := s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
	return r
}

// testReleaseAfterRetryRequeues: a job retried after it failed, then
// claimed and given back, is queued again and claimable at once while it
// has attempts left.
func testReleaseAfterRetryRequeues(t *testing.T, s jobstore.Store) {
	j := retried(t, s, submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3}))
	c := claimID(t, s, "w", j.ID)
	require.Equal(t, 2, c.Attempt)
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	got := get(t, s, j.ID)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.False(t, got.RunAt.After(time.Now()), "due again at once")
	again := claimID(t, s, "w2", j.ID)
	require.Equal(t, 3, again.Attempt)
}

// testReleaseAfterRetryLastAttempt: Retry of a job whose attempts are used
// up allows one more; that attempt, given back, counts like any other, so
// the job fails again and is not claimable (a Release is a dead worker's
// attempt, not an interruption). Another Retry makes it claimable.
func testReleaseAfterRetryLastAttempt(t *testing.T, s jobstore.Store) {
	j := retried(t, s, submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1}))
	require.Equal(t, 2, j.MaxAttempts, "Retry allows one more attempt")
	c := claimID(t, s, "w", j.ID)
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	got := get(t, s, j.ID)
	require.Equal(t, jobstore.StateFailed, got.State, "the given-back attempt was the last one")
	require.Equal(t, jobstore.EndWorkerLost, got.History[len(got.History)-1].End)
	requireNoJob(t, s)
	_, err := s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, 3, claimID(t, s, "w", j.ID).Attempt)
}

// testReleaseRetryWhileHeld: Retry of a running job is refused and changes
// nothing; the Release that follows queues the job, claimable at once.
func testReleaseRetryWhileHeld(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c := claimID(t, s, "w", j.ID)
	before := get(t, s, j.ID)
	_, err := s.Retry(t.Context(), j.ID)
	requireTransitionError(t, err, j.ID, jobstore.StateRunning, jobstore.StateQueued)
	requireSameJob(t, before, get(t, s, j.ID))
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	require.Equal(t, 2, claimID(t, s, "w2", j.ID).Attempt)
}

// testReleaseCancelThenRetry: a job canceled while held and then given
// back ends canceled; a Retry then queues it, claimable at once, with the
// given-back attempt counted.
func testReleaseCancelThenRetry(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c := claimID(t, s, "w", j.ID)
	_, err := s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	require.Equal(t, jobstore.StateCanceled, get(t, s, j.ID).State)
	requireNoJob(t, s)
	r, err := s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
	require.Equal(t, 2, claimID(t, s, "w2", j.ID).Attempt)
}

// testReleaseWakesAwaitWork: a claimer blocked in AwaitWork (its Claim
// found nothing) is woken by a Release that queues the job, and claims it.
func testReleaseWakesAwaitWork(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c := claimID(t, s, "w", j.ID)
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w2"); return err })
	time.Sleep(settle)
	require.NoError(t, s.Release(t.Context(), c.Lease()))
	require.NoError(t, w.result(t), "AwaitWork did not wake when a released job was queued again")
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
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
