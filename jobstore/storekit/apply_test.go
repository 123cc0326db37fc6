package storekit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var (
	t0      = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	testID  = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	fixedBO = func(attempt int) time.Duration { return time.Duration(attempt) * time.Minute }
)

// queued returns a queued job due at t0.
func queued() jobstore.Job {
	return jobstore.Job{
		ID: testID, Kind: "k", State: jobstore.StateQueued, MaxAttempts: 3,
		RunAt: t0, CreatedAt: t0, UpdatedAt: t0,
	}
}

// running returns the job claimed by worker w for its attempt-th attempt.
func running(attempt int) jobstore.Job {
	j := queued()
	j.State = jobstore.StateRunning
	j.Attempt = attempt
	j.Worker = "w"
	j.StartedAt = t0
	return j
}

func TestClaimOrder(t *testing.T) {
	mk := func(id string, prio int, runAt time.Duration) jobstore.Job {
		return jobstore.Job{ID: id, Priority: prio, RunAt: t0.Add(runAt)}
	}
	// Listed in claim order.
	want := []jobstore.Job{
		mk("0000000000000000000000000F", 10, time.Hour),
		mk("0000000000000000000000000E", 1, 0),
		mk("0000000000000000000000000A", 0, 0),
		mk("0000000000000000000000000B", 0, 0),
		mk("00000000000000000000000000", 0, time.Second),
		mk("0000000000000000000000000C", -5, -time.Hour),
	}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, func(a, b jobstore.Job) int {
		switch {
		case storekit.ClaimOrder(a, b):
			return -1
		case storekit.ClaimOrder(b, a):
			return 1
		}
		return 0
	})
	require.Equal(t, want, got)
	require.False(t, storekit.ClaimOrder(want[0], want[0]), "ClaimOrder is a strict order")
}

func TestApplyClaim(t *testing.T) {
	now := t0.Add(time.Minute).In(time.FixedZone("X", 3600))
	j := queued()
	j.Attempt = 1 // a retried job
	j.CancelRequested = true
	c, err := storekit.ApplyClaim(j, "worker-1", now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, c.State)
	require.Equal(t, 2, c.Attempt)
	require.Equal(t, "worker-1", c.Worker)
	require.Equal(t, now.UTC(), c.StartedAt)
	require.Equal(t, now.UTC(), c.UpdatedAt)
	require.False(t, c.CancelRequested)
	require.Equal(t, jobstore.Lease{ID: testID, Worker: "worker-1", Attempt: 2}, c.Lease())
	require.Equal(t, 1, j.Attempt, "the input is not modified")

	// Not yet due.
	_, err = storekit.ApplyClaim(queued(), "w", t0.Add(-time.Second))
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	var nj *jobstore.NoJobError
	require.ErrorAs(t, err, &nj)
	require.Equal(t, t0, nj.NextRunAt)

	// Not queued.
	for _, st := range []jobstore.State{jobstore.StateRunning, jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled} {
		j := queued()
		j.State = st
		_, err := storekit.ApplyClaim(j, "w", t0)
		require.ErrorIs(t, err, jobstore.ErrInvalidTransition, st)
	}
}

func TestApplyOutcome(t *testing.T) {
	now := t0.Add(time.Minute)
	tests := []struct {
		name      string
		job       jobstore.Job
		outcome   jobstore.Outcome
		wantState jobstore.State
		wantRunAt time.Time // zero: unchanged
		finished  bool
	}{
		{"success", running(1), jobstore.Succeeded(json.RawMessage(`{"ok":1}`)), jobstore.StateSucceeded, time.Time{}, true},
		{"success on the last attempt", running(3), jobstore.Succeeded(nil), jobstore.StateSucceeded, time.Time{}, true},
		{"failure with attempts left uses backoff", running(2), jobstore.Outcome{Error: "e"}, jobstore.StateQueued, now.Add(2 * time.Minute), false},
		{"failure with RetryAfter", running(1), jobstore.Outcome{Error: "e", RetryAfter: 5 * time.Second}, jobstore.StateQueued, now.Add(5 * time.Second), false},
		{"failure of the last attempt", running(3), jobstore.Outcome{Error: "e", RetryAfter: time.Second}, jobstore.StateFailed, time.Time{}, true},
		{"permanent failure", running(1), jobstore.Outcome{Error: "e", Permanent: true}, jobstore.StateFailed, time.Time{}, true},
		{"failure after cancel requested", func() jobstore.Job { j := running(1); j.CancelRequested = true; return j }(),
			jobstore.Outcome{Error: "canceled"}, jobstore.StateCanceled, time.Time{}, true},
		{"success after cancel requested", func() jobstore.Job { j := running(1); j.CancelRequested = true; return j }(),
			jobstore.Succeeded(nil), jobstore.StateSucceeded, time.Time{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storekit.ApplyOutcome(tc.job, tc.job.Lease(), tc.outcome, now, fixedBO)
			require.NoError(t, err)
			require.True(t, jobstore.CanTransition(tc.job.State, got.State), "%s -> %s", tc.job.State, got.State)
			require.Equal(t, tc.wantState, got.State)
			require.Equal(t, tc.job.Attempt, got.Attempt, "completion never changes Attempt")
			require.Equal(t, now, got.UpdatedAt)
			if tc.wantRunAt.IsZero() {
				require.Equal(t, tc.job.RunAt, got.RunAt)
			} else {
				require.Equal(t, tc.wantRunAt, got.RunAt)
			}
			if tc.finished {
				require.Equal(t, now, got.FinishedAt)
			} else {
				require.True(t, got.FinishedAt.IsZero())
			}
			if tc.outcome.Error != "" {
				require.Equal(t, tc.outcome.Error, got.LastError)
				require.Nil(t, got.Result)
			} else {
				require.Equal(t, []byte(tc.outcome.Result), []byte(got.Result))
			}
		})
	}

	// A failure message is truncated.
	got, err := storekit.ApplyOutcome(running(3), running(3).Lease(), jobstore.Outcome{Error: strings.Repeat("x", 2*jobstore.MaxErrorLen)}, now, nil)
	require.NoError(t, err)
	require.Equal(t, jobstore.TruncateError(strings.Repeat("x", 2*jobstore.MaxErrorLen)), got.LastError)

	// A nil backoff means jobstore.Backoff: attempt 1 waits 1s ± 10%.
	got, err = storekit.ApplyOutcome(running(1), running(1).Lease(), jobstore.Outcome{Error: "e"}, now, nil)
	require.NoError(t, err)
	require.WithinRange(t, got.RunAt, now.Add(900*time.Millisecond), now.Add(1100*time.Millisecond))

	// The result is copied.
	res := json.RawMessage(`[1]`)
	got, err = storekit.ApplyOutcome(running(1), running(1).Lease(), jobstore.Succeeded(res), now, nil)
	require.NoError(t, err)
	res[1] = '2'
	require.Equal(t, `[1]`, string(got.Result))
}

// TestApplyOutcomeInterrupted checks that an attempt cut short by its
// worker's shutdown is given back: queued due now, MaxAttempts raised so the
// attempt does not count, Attempt still counting (it fences leases), and the
// history saying so.
func TestApplyOutcomeInterrupted(t *testing.T) {
	now := t0.Add(time.Minute)
	for _, attempt := range []int{1, 3} { // 3: the last attempt is not lost either
		j := running(attempt)
		j.LastError = "earlier failure"
		o := jobstore.Interrupted(errors.New("runner: worker shutting down"))
		o.Permanent, o.RetryAfter = true, time.Hour // ignored
		got, err := storekit.ApplyOutcome(j, j.Lease(), o, now, fixedBO)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State)
		require.Equal(t, now, got.RunAt, "due at once")
		require.Equal(t, attempt, got.Attempt, "Attempt never goes back")
		require.Equal(t, 4, got.MaxAttempts, "the attempt is given back")
		require.Equal(t, "earlier failure", got.LastError, "an interruption is not a failure")
		require.True(t, got.FinishedAt.IsZero())
		require.Equal(t, []jobstore.AttemptRecord{{Attempt: attempt, Worker: "w", StartedAt: t0, FinishedAt: now,
			End: jobstore.EndInterrupted, Error: "runner: worker shutting down"}}, got.History)
		require.False(t, got.History[0].End.Counted())
		used, limit, interrupted := got.CountedAttempts()
		require.Equal(t, []int{attempt - 1, 3, 1}, []int{used, limit, interrupted}, "read as a person should: the limit as it was set")

		// The next claim takes the next attempt number, and the job still
		// has the same number of attempts left as before the interruption.
		again, err := storekit.ApplyClaim(got, "v", now)
		require.NoError(t, err)
		require.Equal(t, attempt+1, again.Attempt)
		require.Equal(t, j.MaxAttempts-j.Attempt, again.MaxAttempts-again.Attempt, "attempts left, this one included")
		used, limit, _ = again.CountedAttempts()
		require.Equal(t, []int{attempt, 3}, []int{used, limit}, "the next claim is attempt %d of 3", attempt)
	}

	// A cancel requested before the interruption still cancels.
	j := running(1)
	j.CancelRequested = true
	got, err := storekit.ApplyOutcome(j, j.Lease(), jobstore.Interrupted(errors.New("stop")), now, nil)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	require.Equal(t, jobstore.EndCanceled, got.History[0].End)

	// A success is a success, whatever else the outcome says.
	o := jobstore.Succeeded(nil)
	o.Interrupted = true
	got, err = storekit.ApplyOutcome(running(1), running(1).Lease(), o, now, nil)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
}

// TestHistory checks what each way an attempt ends adds to Job.History.
func TestHistory(t *testing.T) {
	now := t0.Add(time.Minute)
	canceling := running(1)
	canceling.CancelRequested = true
	tests := []struct {
		name  string
		job   jobstore.Job
		o     jobstore.Outcome
		want  jobstore.AttemptEnd
		error string
	}{
		{"success", running(1), jobstore.Succeeded(nil), jobstore.EndSucceeded, ""},
		{"failure", running(1), jobstore.Outcome{Error: "boom"}, jobstore.EndFailed, "boom"},
		{"final failure", running(3), jobstore.Outcome{Error: "boom"}, jobstore.EndFailed, "boom"},
		{"permanent failure", running(1), jobstore.Outcome{Error: "boom", Permanent: true}, jobstore.EndFailed, "boom"},
		{"timeout", running(1), jobstore.Outcome{Error: "too slow", TimedOut: true}, jobstore.EndTimedOut, "too slow"},
		{"cancel", canceling, jobstore.Outcome{Error: "canceled"}, jobstore.EndCanceled, "canceled"},
		{"interrupted", running(2), jobstore.Interrupted(errors.New("shutdown")), jobstore.EndInterrupted, "shutdown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storekit.ApplyOutcome(tc.job, tc.job.Lease(), tc.o, now, fixedBO)
			require.NoError(t, err)
			require.Equal(t, []jobstore.AttemptRecord{{Attempt: tc.job.Attempt, Worker: "w", StartedAt: t0,
				FinishedAt: now, End: tc.want, Error: tc.error}}, got.History)
			require.Equal(t, tc.want != jobstore.EndInterrupted, tc.want.Counted())
		})
	}

	got, err := storekit.ApplyRecover(running(1), now)
	require.NoError(t, err)
	require.Equal(t, []jobstore.AttemptRecord{{Attempt: 1, Worker: "w", StartedAt: t0, FinishedAt: now,
		End: jobstore.EndWorkerLost, Error: `worker "w" died during attempt 1`}}, got.History)

	// Errors are truncated; the history keeps the last MaxHistory attempts.
	j := running(1)
	j.MaxAttempts = 100
	var last jobstore.Job
	for i := 1; i <= jobstore.MaxHistory+5; i++ {
		j.Attempt, j.State = i, jobstore.StateRunning
		before := j
		j, err = storekit.ApplyOutcome(j, j.Lease(), jobstore.Outcome{Error: fmt.Sprint(i, strings.Repeat("x", 2*jobstore.MaxHistoryErrorLen))}, now, fixedBO)
		require.NoError(t, err)
		if i > 1 {
			require.Len(t, before.History, min(i-1, jobstore.MaxHistory), "the old copy is not changed")
			require.Equal(t, last.History, before.History)
		}
		last = j
	}
	require.Len(t, j.History, jobstore.MaxHistory)
	require.Equal(t, 6, j.History[0].Attempt, "the oldest are dropped")
	require.Equal(t, jobstore.MaxHistory+5, j.History[jobstore.MaxHistory-1].Attempt)
	for _, r := range j.History {
		require.LessOrEqual(t, len(r.Error), jobstore.MaxHistoryErrorLen+len("…"))
	}
	require.Len(t, jobstore.AttemptEnds(), 6)
}

func TestApplyOutcomeNotHeld(t *testing.T) {
	j := running(2)
	for name, l := range map[string]jobstore.Lease{
		"old attempt":  {ID: testID, Worker: "w", Attempt: 1},
		"other worker": {ID: testID, Worker: "v", Attempt: 2},
	} {
		got, err := storekit.ApplyOutcome(j, l, jobstore.Succeeded(nil), t0, nil)
		require.ErrorIs(t, err, jobstore.ErrNotHeld, name)
		require.Equal(t, j, got, "a refused outcome changes nothing")
	}
	done := j
	done.State = jobstore.StateSucceeded
	_, err := storekit.ApplyOutcome(done, j.Lease(), jobstore.Outcome{Error: "late"}, t0, nil)
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "after completion")
}

func TestApplyRecover(t *testing.T) {
	now := t0.Add(time.Hour)
	got, err := storekit.ApplyRecover(running(1), now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Equal(t, now, got.RunAt, "a dead worker's job is due again at once, without backoff")
	require.Equal(t, 1, got.Attempt, "the attempt counts")
	require.Equal(t, `worker "w" died during attempt 1`, got.LastError)

	got, err = storekit.ApplyRecover(running(3), now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, got.State, "the last attempt's death is final")

	for _, st := range []jobstore.State{jobstore.StateQueued, jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled} {
		j := queued()
		j.State = st
		got, err := storekit.ApplyRecover(j, now)
		require.ErrorIs(t, err, jobstore.ErrInvalidTransition, st)
		require.Equal(t, j, got)
	}
}

func TestApplyRelease(t *testing.T) {
	now := t0.Add(time.Hour)
	got, err := storekit.ApplyRelease(running(1), running(1).Lease(), now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Equal(t, now, got.RunAt, "a given-back job is due again at once, as a dead worker's")
	require.Equal(t, 1, got.Attempt, "the attempt counts")
	require.Equal(t, `worker "w" gave attempt 1 back: its outcome could not be recorded`, got.LastError)
	require.Equal(t, jobstore.EndWorkerLost, got.History[len(got.History)-1].End)

	got, err = storekit.ApplyRelease(running(3), running(3).Lease(), now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, got.State, "the last attempt given back is final")

	j := running(2)
	for name, l := range map[string]jobstore.Lease{
		"old attempt":  {ID: testID, Worker: "w", Attempt: 1},
		"other worker": {ID: testID, Worker: "v", Attempt: 2},
	} {
		got, err := storekit.ApplyRelease(j, l, now)
		require.ErrorIs(t, err, jobstore.ErrNotHeld, name)
		require.Equal(t, j, got, "a refused release changes nothing")
	}
}

func TestApplyCancel(t *testing.T) {
	now := t0.Add(time.Minute)

	got, changed, err := storekit.ApplyCancel(queued(), now)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, jobstore.StateCanceled, got.State)
	require.Equal(t, now, got.FinishedAt)
	require.Equal(t, now, got.UpdatedAt)
	require.Zero(t, got.Attempt)

	got, changed, err = storekit.ApplyCancel(running(1), now)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, jobstore.StateRunning, got.State)
	require.True(t, got.CancelRequested)
	require.True(t, got.FinishedAt.IsZero())
	require.True(t, got.Holds(running(1).Lease()), "cancel does not take the job from its worker")

	again, changed, err := storekit.ApplyCancel(got, now.Add(time.Second))
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, got, again)

	canceled, _, _ := storekit.ApplyCancel(queued(), now)
	again, changed, err = storekit.ApplyCancel(canceled, now.Add(time.Second))
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, canceled, again)

	for _, st := range []jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed} {
		j := running(1)
		j.State = st
		_, changed, err := storekit.ApplyCancel(j, now)
		require.False(t, changed)
		var te *jobstore.TransitionError
		require.ErrorAs(t, err, &te)
		require.Equal(t, jobstore.TransitionError{ID: testID, From: st, To: jobstore.StateCanceled}, *te)
	}
}

func TestApplyRetry(t *testing.T) {
	now := t0.Add(time.Hour)
	failed := running(3)
	failed.State = jobstore.StateFailed
	failed.FinishedAt = t0
	failed.LastError = "boom"

	got, err := storekit.ApplyRetry(failed, now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Equal(t, 3, got.Attempt, "Attempt keeps counting")
	require.Equal(t, 4, got.MaxAttempts, "used-up attempts allow one more")
	require.Equal(t, now, got.RunAt)
	require.True(t, got.FinishedAt.IsZero())
	require.Equal(t, "boom", got.LastError)

	permanent := running(1)
	permanent.State = jobstore.StateFailed
	got, err = storekit.ApplyRetry(permanent, now)
	require.NoError(t, err)
	require.Equal(t, 3, got.MaxAttempts, "attempts left: MaxAttempts unchanged")

	canceled := running(1)
	canceled.State = jobstore.StateCanceled
	canceled.CancelRequested = true
	canceled.Result = json.RawMessage(`1`)
	got, err = storekit.ApplyRetry(canceled, now)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.False(t, got.CancelRequested)
	require.Nil(t, got.Result)

	for _, st := range []jobstore.State{jobstore.StateQueued, jobstore.StateRunning, jobstore.StateSucceeded} {
		j := running(1)
		j.State = st
		got, err := storekit.ApplyRetry(j, now)
		var te *jobstore.TransitionError
		require.ErrorAs(t, err, &te, st)
		require.Equal(t, jobstore.TransitionError{ID: testID, From: st, To: jobstore.StateQueued}, *te)
		require.Equal(t, j, got)
	}
}
