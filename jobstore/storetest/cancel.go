package storetest

import (
	"context"
	"encoding/json"
	"errors"
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

var awaitWorkTests = []test{
	{"WakesOnSubmit", testAwaitWorkSubmit},
	{"WakesWhenDelayedJobDue", testAwaitWorkDelayed},
	{"WakesOnRequeue", testAwaitWorkRequeue},
	{"ContextDeadline", testAwaitWorkDeadline},
}

// awaitAndClaim runs the loop a worker runs: Claim, and AwaitWork while
// there is nothing to claim. It returns the claimed job.
func awaitAndClaim(ctx context.Context, s jobstore.Store, worker string) (jobstore.Job, error) {
	for {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, jobstore.ErrNoJob) {
			return j, err
		}
		if err := s.AwaitWork(ctx); err != nil {
			return jobstore.Job{}, err
		}
	}
}

func testAwaitWorkSubmit(t *testing.T, s jobstore.Store) {
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w"); return err })
	time.Sleep(settle)
	j := submitKind(t, s, "k")
	require.NoError(t, w.result(t), "AwaitWork did not wake on submit")
	require.Equal(t, j.ID, got.ID)
}

func testAwaitWorkDelayed(t *testing.T, s jobstore.Store) {
	runAt := time.Now().Add(150 * time.Millisecond)
	j := submit(t, s, jobstore.Spec{Kind: "k", RunAt: runAt})
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	got, err := awaitAndClaim(ctx, s, "w")
	require.NoError(t, err, "AwaitWork did not wake when the delayed job became due")
	require.Equal(t, j.ID, got.ID)
	require.False(t, time.Now().Before(runAt))
}

func testAwaitWorkRequeue(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w2"); return err })
	time.Sleep(settle)
	complete(t, s, c, jobstore.Outcome{Error: "again", RetryAfter: 100 * time.Millisecond})
	require.NoError(t, w.result(t), "AwaitWork did not wake when a failed job became due again")
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
}

func testAwaitWorkDeadline(t *testing.T, s jobstore.Store) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	w := start(func() error {
		for {
			// AwaitWork may return nil spuriously; it must end with ctx.
			if err := s.AwaitWork(ctx); err != nil {
				return err
			}
		}
	})
	require.ErrorIs(t, w.result(t), context.DeadlineExceeded)
}
