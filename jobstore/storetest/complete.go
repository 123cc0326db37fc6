package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var completeTests = []test{
	{"Success", testCompleteSuccess},
	{"FailureRetriesAfterRetryAfter", testCompleteRetryAfter},
	{"FailureDefaultBackoff", testCompleteDefaultBackoff},
	{"FailureExhaustsAttempts", testCompleteExhausts},
	{"Permanent", testCompletePermanent},
	{"StaleLeaseNotHeld", testCompleteStaleLease},
	{"MalformedLease", testCompleteMalformedLease},
	{"ErrorTruncated", testCompleteLongError},
	{"InterruptedNotCounted", testCompleteInterrupted},
	{"HistoryKept", testCompleteHistory},
}

func testCompleteSuccess(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`1`)})
	c := claimID(t, s, "w", j.ID)
	before := time.Now()
	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`{"answer":42}`)))
	require.Equal(t, jobstore.StateSucceeded, done.State)
	require.JSONEq(t, `{"answer":42}`, string(done.Result))
	require.Equal(t, 1, done.Attempt)
	require.Empty(t, done.LastError)
	require.WithinRange(t, done.FinishedAt, before.Add(-time.Millisecond), time.Now().Add(time.Millisecond))
	requireSameJob(t, done, get(t, s, j.ID))
	requireNoJob(t, s)

	// A success with no result is fine.
	j2 := submitKind(t, s, "k")
	c2 := claimID(t, s, "w", j2.ID)
	require.Empty(t, complete(t, s, c2, jobstore.Succeeded(nil)).Result)
}

func testCompleteRetryAfter(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c := claimID(t, s, "w", j.ID)
	before := time.Now()
	f := complete(t, s, c, jobstore.Outcome{Error: "flaky", RetryAfter: 150 * time.Millisecond})
	require.Equal(t, jobstore.StateQueued, f.State)
	require.Equal(t, 1, f.Attempt)
	require.Equal(t, "flaky", f.LastError)
	require.True(t, f.FinishedAt.IsZero())
	require.WithinRange(t, f.RunAt, before.Add(150*time.Millisecond-time.Millisecond), time.Now().Add(150*time.Millisecond+time.Millisecond))
	requireSameJob(t, f, get(t, s, j.ID))

	var c2 jobstore.Job
	asked := time.Now()
	if early, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2"}); err == nil {
		// Only a loaded machine, slower than the backoff, gets here.
		require.False(t, asked.Before(f.RunAt), "claimed at %s, before the backoff ended at %s", asked, f.RunAt)
		c2 = early
	} else {
		require.ErrorIs(t, err, jobstore.ErrNoJob)
		var nj *jobstore.NoJobError
		require.ErrorAs(t, err, &nj)
		require.True(t, nj.NextRunAt.Equal(f.RunAt))
		c2 = claimWhenDue(t, s, "w2")
	}
	require.False(t, time.Now().Before(f.RunAt), "claimed before the backoff ended")
	require.Equal(t, j.ID, c2.ID)
	require.Equal(t, 2, c2.Attempt, "Attempt counts every claim")
	require.Equal(t, "w2", c2.Worker)
	require.Equal(t, "flaky", c2.LastError, "LastError is kept until the next failure")
}

func testCompleteDefaultBackoff(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	c := claimID(t, s, "w", j.ID)
	before := time.Now()
	f := complete(t, s, c, jobstore.Failed(nil))
	after := time.Now()
	require.Equal(t, jobstore.StateQueued, f.State)
	require.NotEmpty(t, f.LastError, "a failure records an error message")
	// Backoff(1) is 1s ± 10%.
	require.WithinRange(t, f.RunAt, before.Add(800*time.Millisecond), after.Add(1300*time.Millisecond))
	requireNoJob(t, s)
}

// failAndReclaim fails the attempt of c with a short RetryAfter and claims
// the job again once it is due.
func failAndReclaim(t *testing.T, s jobstore.Store, c jobstore.Job, worker string) jobstore.Job {
	t.Helper()
	f := complete(t, s, c, jobstore.Outcome{Error: "again", RetryAfter: time.Millisecond})
	require.Equal(t, jobstore.StateQueued, f.State)
	next := claimWhenDue(t, s, worker)
	require.Equal(t, c.ID, next.ID)
	require.Equal(t, c.Attempt+1, next.Attempt)
	return next
}

func testCompleteExhausts(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	c := claimID(t, s, "w", j.ID)
	c = failAndReclaim(t, s, c, "w")
	f := complete(t, s, c, jobstore.Outcome{Error: "last straw", RetryAfter: time.Millisecond})
	require.Equal(t, jobstore.StateFailed, f.State, "the failure of attempt MaxAttempts is final")
	require.Equal(t, 2, f.Attempt)
	require.Equal(t, "last straw", f.LastError)
	require.False(t, f.FinishedAt.IsZero())
	time.Sleep(5 * time.Millisecond)
	requireNoJob(t, s)
	requireSameJob(t, f, get(t, s, j.ID))
}

func testCompletePermanent(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 5})
	c := claimID(t, s, "w", j.ID)
	f := complete(t, s, c, jobstore.Outcome{Error: "bad input", Permanent: true})
	require.Equal(t, jobstore.StateFailed, f.State)
	require.Equal(t, 1, f.Attempt)
	require.Equal(t, 5, f.MaxAttempts)
	require.False(t, f.FinishedAt.IsZero())
	requireNoJob(t, s)
}

func testCompleteStaleLease(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	first := claimID(t, s, "w1", j.ID)

	wrongWorker := first.Lease()
	wrongWorker.Worker = "w2"
	_, err := s.Complete(ctx, wrongWorker, jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "a lease of another worker")
	future := first.Lease()
	future.Attempt = 2
	_, err = s.Complete(ctx, future, jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "a lease of an attempt that has not started")
	requireSameJob(t, first, get(t, s, j.ID))

	second := failAndReclaim(t, s, first, "w1")
	require.Equal(t, first.Worker, second.Worker, "same worker, new attempt")
	before := get(t, s, j.ID)
	for _, o := range []jobstore.Outcome{jobstore.Succeeded(nil), {Error: "late"}, {Error: "late", Permanent: true}} {
		_, err = s.Complete(ctx, first.Lease(), o)
		require.ErrorIs(t, err, jobstore.ErrNotHeld, "the lease of an earlier attempt still completes the job")
	}
	requireSameJob(t, before, get(t, s, j.ID))

	done := complete(t, s, second, jobstore.Succeeded(json.RawMessage(`"second"`)))
	_, err = s.Complete(ctx, second.Lease(), jobstore.Outcome{Error: "again"})
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "completing a finished attempt twice")
	requireSameJob(t, done, get(t, s, j.ID))
}

// testCompleteMalformedLease: a lease no claim could have handed out is
// refused as invalid input (jobstore.Lease.Validate), not reported as a
// lease that is no longer held, by Complete, WatchCancel and Release alike;
// the job it names is left as it was.
func testCompleteMalformedLease(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	before := get(t, s, j.ID)
	for name, l := range map[string]jobstore.Lease{
		"zero worker and attempt": {Worker: "", Attempt: 0},
		"no worker or attempt":    {ID: j.ID},
		"no worker":               {ID: j.ID, Attempt: c.Attempt},
		"attempt 0":               {ID: j.ID, Worker: "w"},
		"negative attempt":        {ID: j.ID, Worker: "w", Attempt: -1},
		"worker with a space":     {ID: j.ID, Worker: "w w", Attempt: c.Attempt},
		"bad ID":                  {ID: "not-an-id", Worker: "w", Attempt: c.Attempt},
	} {
		_, err := s.Complete(ctx, l, jobstore.Succeeded(nil))
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "Complete, %s", name)
		require.NotErrorIs(t, err, jobstore.ErrNotHeld, "Complete, %s", name)
		require.ErrorIs(t, s.WatchCancel(ctx, l), jobstore.ErrInvalidInput, "WatchCancel, %s", name)
		require.ErrorIs(t, s.Release(ctx, l), jobstore.ErrInvalidInput, "Release, %s", name)
	}
	requireSameJob(t, before, get(t, s, j.ID))
	complete(t, s, c, jobstore.Succeeded(nil))
}

func testCompleteLongError(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	c := claimID(t, s, "w", j.ID)
	msg := make([]byte, 3*jobstore.MaxErrorLen)
	for i := range msg {
		msg[i] = 'e'
	}
	f := complete(t, s, c, jobstore.Outcome{Error: string(msg)})
	require.Equal(t, jobstore.StateFailed, f.State)
	require.Equal(t, jobstore.TruncateError(string(msg)), f.LastError)
	require.Equal(t, f.LastError, get(t, s, j.ID).LastError)
}

// testCompleteInterrupted checks that an attempt its worker's shutdown cut
// short is given back: the job is due again at once, the attempt does not
// count (even the last one), and Attempt still grows.
func testCompleteInterrupted(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	c := claimID(t, s, "w", j.ID)
	before := time.Now()
	f := complete(t, s, c, jobstore.Interrupted(errors.New("worker shutting down")))
	require.Equal(t, jobstore.StateQueued, f.State, "an interrupted last attempt is not a failure")
	require.Equal(t, 1, f.Attempt)
	require.Equal(t, 2, f.MaxAttempts, "the attempt is given back")
	require.Empty(t, f.LastError)
	require.False(t, f.RunAt.After(time.Now()), "due at once")
	require.False(t, f.RunAt.Before(before.Add(-time.Millisecond)))
	requireSameJob(t, f, get(t, s, j.ID))

	c2 := claimID(t, s, "w2", j.ID)
	require.Equal(t, 2, c2.Attempt, "Attempt keeps counting: it fences the old lease")
	_, err := s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "the interrupted attempt's lease completes the new one")
	done := complete(t, s, c2, jobstore.Outcome{Error: "real failure"})
	require.Equal(t, jobstore.StateFailed, done.State, "a real failure of the one counted attempt is final")

	// A cancel requested before the interruption cancels the job.
	j = submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	c = claimID(t, s, "w", j.ID)
	_, err = s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	f = complete(t, s, c, jobstore.Interrupted(errors.New("worker shutting down")))
	require.Equal(t, jobstore.StateCanceled, f.State)
}

// testCompleteHistory checks that the store keeps each finished attempt in
// the job's History, bounded to the last jobstore.MaxHistory.
func testCompleteHistory(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 5})
	require.Empty(t, j.History)
	c1 := claimID(t, s, "w1", j.ID)
	complete(t, s, c1, jobstore.Outcome{Error: "boom", RetryAfter: time.Millisecond})
	c2 := claimWhenDue(t, s, "w2")
	complete(t, s, c2, jobstore.Interrupted(errors.New("shutdown")))
	c3 := claimWhenDue(t, s, "w3")
	complete(t, s, c3, jobstore.Outcome{Error: "too slow", TimedOut: true, RetryAfter: time.Millisecond})
	c4 := claimWhenDue(t, s, "w4")
	require.Len(t, c4.History, 3, "a claimed job shows the attempts before it")
	done := complete(t, s, c4, jobstore.Succeeded(nil))

	want := []struct {
		attempt int
		worker  string
		end     jobstore.AttemptEnd
		err     string
	}{{1, "w1", jobstore.EndFailed, "boom"}, {2, "w2", jobstore.EndInterrupted, "shutdown"},
		{3, "w3", jobstore.EndTimedOut, "too slow"}, {4, "w4", jobstore.EndSucceeded, ""}}
	got := get(t, s, j.ID)
	requireSameJob(t, done, got)
	require.Len(t, got.History, len(want))
	starts := []jobstore.Job{c1, c2, c3, c4}
	for i, w := range want {
		r := got.History[i]
		require.Equal(t, w.attempt, r.Attempt)
		require.Equal(t, w.worker, r.Worker)
		require.Equal(t, w.end, r.End)
		require.Equal(t, w.err, r.Error)
		require.True(t, r.StartedAt.Equal(starts[i].StartedAt), "attempt %d started at %s, history says %s", w.attempt, starts[i].StartedAt, r.StartedAt)
		require.False(t, r.FinishedAt.Before(r.StartedAt))
	}
	require.True(t, got.History[3].FinishedAt.Equal(got.FinishedAt))

	// Only the last MaxHistory attempts are kept.
	j = submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: jobstore.MaxHistory + 3})
	for i := 1; i <= jobstore.MaxHistory+2; i++ {
		c := claimWhenDue(t, s, "w")
		require.Equal(t, i, c.Attempt)
		complete(t, s, c, jobstore.Outcome{Error: fmt.Sprint("failure ", i), RetryAfter: time.Nanosecond})
	}
	got = get(t, s, j.ID)
	require.Len(t, got.History, jobstore.MaxHistory)
	require.Equal(t, 3, got.History[0].Attempt)
	require.Equal(t, "failure 3", got.History[0].Error)
	require.Equal(t, jobstore.MaxHistory+2, got.History[jobstore.MaxHistory-1].Attempt)
}
