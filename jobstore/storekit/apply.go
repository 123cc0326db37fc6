package storekit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/internal/clip"
	"github.com/jobdir/jobdir/jobstore"
)

// The functions below compute each state change as a pure function of the
// current record, so that every store applies the same rules. A store reads
// the record, calls one of them while it holds the job exclusively, and
// writes the result back.

// ClaimOrder reports whether a should be claimed before b: higher Priority
// first, then earlier RunAt, then older ID (FIFO).
func ClaimOrder(a, b jobstore.Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.RunAt.Equal(b.RunAt) {
		return a.RunAt.Before(b.RunAt)
	}
	return a.ID < b.ID
}

// ApplyClaim returns j claimed by worker at now: running, with Attempt
// incremented. It fails with a *TransitionError unless j is queued, and with
// ErrNoJob if j is not yet due.
func ApplyClaim(j jobstore.Job, worker string, now time.Time) (jobstore.Job, error) {
	if err := jobstore.CheckTransition(j.ID, j.State, jobstore.StateRunning); err != nil {
		return j, err
	}
	if !j.Due(now) {
		return j, &jobstore.NoJobError{NextRunAt: j.RunAt}
	}
	now = now.UTC()
	j.State = jobstore.StateRunning
	j.Attempt++
	j.Worker = worker
	j.StartedAt = now
	j.UpdatedAt = now
	j.CancelRequested = false
	return j, nil
}

// ApplyOutcome returns j after the attempt that lease holds ended with o at
// now, with the attempt added to j.History. backoff (nil means Backoff) sets
// the delay before a retry. It fails with ErrNotHeld unless lease holds j.
//
// A success makes j succeeded. A failure makes it canceled if Cancel was
// requested; else queued again due now, with the attempt not counted, if
// o.Interrupted; else failed if o.Permanent or its attempts are used up;
// else queued again after o.RetryAfter or the backoff.
func ApplyOutcome(j jobstore.Job, lease jobstore.Lease, o jobstore.Outcome, now time.Time, backoff jobstore.BackoffFunc) (jobstore.Job, error) {
	end := jobstore.EndFailed
	if o.TimedOut {
		end = jobstore.EndTimedOut
	}
	return applyOutcome(j, lease, o, now, backoff, end)
}

// applyOutcome is ApplyOutcome with the end a failure is recorded with in
// the history (unless a cancel or an interruption says otherwise).
func applyOutcome(j jobstore.Job, lease jobstore.Lease, o jobstore.Outcome, now time.Time, backoff jobstore.BackoffFunc, failEnd jobstore.AttemptEnd) (jobstore.Job, error) {
	if !j.Holds(lease) {
		return j, fmt.Errorf("%w: job %s is %s, attempt %d by %q; lease is attempt %d by %q",
			jobstore.ErrNotHeld, j.ID, j.State, j.Attempt, j.Worker, lease.Attempt, lease.Worker)
	}
	now = now.UTC()
	j.UpdatedAt = now
	rec := jobstore.AttemptRecord{Attempt: j.Attempt, Worker: j.Worker, StartedAt: j.StartedAt, FinishedAt: now}
	if o.Error == "" {
		j.State = jobstore.StateSucceeded
		j.Result = nil
		if len(o.Result) > 0 {
			j.Result = append(json.RawMessage(nil), o.Result...)
		}
		j.FinishedAt = now
		rec.End = jobstore.EndSucceeded
		j.History = appendHistory(j.History, rec)
		return j, nil
	}
	rec.Error = clip.String(o.Error, jobstore.MaxHistoryErrorLen)
	switch {
	case j.CancelRequested:
		j.LastError = jobstore.TruncateError(o.Error)
		j.State = jobstore.StateCanceled
		j.FinishedAt = now
		rec.End = jobstore.EndCanceled
	case o.Interrupted:
		// Not the job's fault and not a failure: LastError keeps the
		// latest real failure, and the attempt is given back.
		j.State = jobstore.StateQueued
		j.RunAt = now
		j.MaxAttempts++
		rec.End = jobstore.EndInterrupted
	case o.Permanent || j.Attempt >= j.MaxAttempts:
		j.LastError = jobstore.TruncateError(o.Error)
		j.State = jobstore.StateFailed
		j.FinishedAt = now
		rec.End = failEnd
	default:
		j.LastError = jobstore.TruncateError(o.Error)
		delay := o.RetryAfter
		if delay <= 0 {
			if backoff == nil {
				backoff = jobstore.Backoff
			}
			delay = backoff(j.Attempt)
		}
		j.State = jobstore.StateQueued
		j.RunAt = now.Add(delay)
		rec.End = failEnd
	}
	j.History = appendHistory(j.History, rec)
	return j, nil
}

// ApplyRecover returns j after its worker was found dead during the running
// attempt: failed with an error that says so, and then, by the rules of
// ApplyOutcome, failed for good if its attempts are used up (canceled if
// cancel was requested), or else queued again due at once. A worker's death
// is rarely the job's fault (a deploy, an OOM kill of the whole process, a
// drained node), and the job has already waited for the death to be
// noticed, so no backoff is added; the attempt still counts, so a job that
// kills every worker that runs it ends failed after MaxAttempts. The
// history records the attempt as EndWorkerLost.
func ApplyRecover(j jobstore.Job, now time.Time) (jobstore.Job, error) {
	if j.State != jobstore.StateRunning {
		// Not CheckTransition: failed and canceled may move to queued (by
		// Retry), but recovery applies only to a running job.
		return j, &jobstore.TransitionError{ID: j.ID, From: j.State, To: jobstore.StateQueued}
	}
	msg := fmt.Sprintf("worker %q died during attempt %d", j.Worker, j.Attempt)
	return applyOutcome(j, j.Lease(), jobstore.Outcome{Error: msg}, now, noBackoff, jobstore.EndWorkerLost)
}

// ApplyRelease returns j after the worker that lease names gave the
// running attempt back without an outcome (Store.Release): exactly as
// ApplyRecover, with an error that says the outcome could not be recorded.
// The attempt counts and the history records it as EndWorkerLost. It fails
// with ErrNotHeld unless lease holds j.
func ApplyRelease(j jobstore.Job, lease jobstore.Lease, now time.Time) (jobstore.Job, error) {
	msg := fmt.Sprintf("worker %q gave attempt %d back: its outcome could not be recorded", lease.Worker, lease.Attempt)
	return applyOutcome(j, lease, jobstore.Outcome{Error: msg}, now, noBackoff, jobstore.EndWorkerLost)
}

// noBackoff makes a recovered job due at once.
func noBackoff(int) time.Duration { return 0 }

// ApplyCancel returns j canceled at now and whether anything changed: a
// queued or waiting job becomes canceled, a running one gets CancelRequested, and a
// canceled one is unchanged. Other states give a *TransitionError.
func ApplyCancel(j jobstore.Job, now time.Time) (jobstore.Job, bool, error) {
	now = now.UTC()
	switch j.State {
	case jobstore.StateQueued, jobstore.StateWaiting:
		j.State = jobstore.StateCanceled
		j.FinishedAt = now
		j.UpdatedAt = now
		return j, true, nil
	case jobstore.StateRunning:
		if j.CancelRequested {
			return j, false, nil
		}
		j.CancelRequested = true
		j.UpdatedAt = now
		return j, true, nil
	case jobstore.StateCanceled:
		return j, false, nil
	}
	return j, false, jobstore.CheckTransition(j.ID, j.State, jobstore.StateCanceled)
}

// ApplyRetry returns j queued again at now after it failed or was canceled,
// or waiting again if it has dependencies (Job.After), which the store then
// settles (SettleRetry). Attempt keeps counting (so old leases stay fenced off); if the attempts are
// used up, MaxAttempts grows to allow one more.
func ApplyRetry(j jobstore.Job, now time.Time) (jobstore.Job, error) {
	if j.State != jobstore.StateFailed && j.State != jobstore.StateCanceled {
		// Not CheckTransition: running may move to queued (by Complete),
		// but Retry applies only to a failed or canceled job.
		return j, &jobstore.TransitionError{ID: j.ID, From: j.State, To: jobstore.StateQueued}
	}
	now = now.UTC()
	j.State = jobstore.StateQueued
	if len(j.After) > 0 {
		j.State = jobstore.StateWaiting
	}
	j.RunAt = now
	j.UpdatedAt = now
	j.FinishedAt = time.Time{}
	j.CancelRequested = false
	j.Result = nil
	if j.Attempt >= j.MaxAttempts {
		j.MaxAttempts = j.Attempt + 1
	}
	return j, nil
}

// appendHistory returns h with r added at the end and the oldest entries
// dropped beyond MaxHistory. It never writes to h's array, which other
// copies of the job may share.
func appendHistory(h []jobstore.AttemptRecord, r jobstore.AttemptRecord) []jobstore.AttemptRecord {
	if drop := len(h) + 1 - jobstore.MaxHistory; drop > 0 {
		h = h[drop:]
	}
	out := make([]jobstore.AttemptRecord, 0, len(h)+1)
	return append(append(out, h...), r)
}
