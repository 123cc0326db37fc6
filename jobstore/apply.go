package jobstore

import (
	"fmt"
	"time"
)

// The functions below compute each state change as a pure function of the
// current record, so that every store applies the same rules. A store reads
// the record, calls one of them while it holds the job exclusively, and
// writes the result back.

// ClaimOrder reports whether a should be claimed before b: higher Priority
// first, then earlier RunAt, then older ID (FIFO).
func ClaimOrder(a, b Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.RunAt.Equal(b.RunAt) {
		return a.RunAt.Before(b.RunAt)
	}
	return a.ID < b.ID
}

// Due reports whether j is queued and its RunAt has passed at now.
func (j Job) Due(now time.Time) bool {
	return j.State == StateQueued && !j.RunAt.After(now)
}

// ApplyClaim returns j claimed by worker at now: running, with Attempt
// incremented. It fails with a *TransitionError unless j is queued, and with
// ErrNoJob if j is not yet due.
func ApplyClaim(j Job, worker string, now time.Time) (Job, error) {
	if err := CheckTransition(j.ID, j.State, StateRunning); err != nil {
		return j, err
	}
	if !j.Due(now) {
		return j, &NoJobError{NextRunAt: j.RunAt}
	}
	now = now.UTC()
	j.State = StateRunning
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
func ApplyOutcome(j Job, lease Lease, o Outcome, now time.Time, backoff BackoffFunc) (Job, error) {
	end := EndFailed
	if o.TimedOut {
		end = EndTimedOut
	}
	return applyOutcome(j, lease, o, now, backoff, end)
}

// applyOutcome is ApplyOutcome with the end a failure is recorded with in
// the history (unless a cancel or an interruption says otherwise).
func applyOutcome(j Job, lease Lease, o Outcome, now time.Time, backoff BackoffFunc, failEnd AttemptEnd) (Job, error) {
	if !j.Holds(lease) {
		return j, fmt.Errorf("%w: job %s is %s, attempt %d by %q; lease is attempt %d by %q",
			ErrNotHeld, j.ID, j.State, j.Attempt, j.Worker, lease.Attempt, lease.Worker)
	}
	now = now.UTC()
	j.UpdatedAt = now
	rec := AttemptRecord{Attempt: j.Attempt, Worker: j.Worker, StartedAt: j.StartedAt, FinishedAt: now}
	if o.Error == "" {
		j.State = StateSucceeded
		j.Result = compactOrNil(o.Result)
		j.FinishedAt = now
		rec.End = EndSucceeded
		j.History = appendHistory(j.History, rec)
		return j, nil
	}
	rec.Error = truncate(o.Error, MaxHistoryErrorLen)
	switch {
	case j.CancelRequested:
		j.LastError = TruncateError(o.Error)
		j.State = StateCanceled
		j.FinishedAt = now
		rec.End = EndCanceled
	case o.Interrupted:
		// Not the job's fault and not a failure: LastError keeps the
		// latest real failure, and the attempt is given back.
		j.State = StateQueued
		j.RunAt = now
		j.MaxAttempts++
		rec.End = EndInterrupted
	case o.Permanent || j.Attempt >= j.MaxAttempts:
		j.LastError = TruncateError(o.Error)
		j.State = StateFailed
		j.FinishedAt = now
		rec.End = failEnd
	default:
		j.LastError = TruncateError(o.Error)
		delay := o.RetryAfter
		if delay <= 0 {
			if backoff == nil {
				backoff = Backoff
			}
			delay = backoff(j.Attempt)
		}
		j.State = StateQueued
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
func ApplyRecover(j Job, now time.Time) (Job, error) {
	if j.State != StateRunning {
		// Not CheckTransition: failed and canceled may move to queued (by
		// Retry), but recovery applies only to a running job.
		return j, &TransitionError{ID: j.ID, From: j.State, To: StateQueued}
	}
	msg := fmt.Sprintf("worker %q died during attempt %d", j.Worker, j.Attempt)
	return applyOutcome(j, j.Lease(), Outcome{Error: msg}, now, noBackoff, EndWorkerLost)
}

// ApplyRelease returns j after the worker that lease names gave the
// running attempt back without an outcome (Store.Release): exactly as
// ApplyRecover, with an error that says the outcome could not be recorded.
// The attempt counts and the history records it as EndWorkerLost. It fails
// with ErrNotHeld unless lease holds j.
func ApplyRelease(j Job, lease Lease, now time.Time) (Job, error) {
	msg := fmt.Sprintf("worker %q gave attempt %d back: its outcome could not be recorded", lease.Worker, lease.Attempt)
	return applyOutcome(j, lease, Outcome{Error: msg}, now, noBackoff, EndWorkerLost)
}

// noBackoff makes a recovered job due at once.
func noBackoff(int) time.Duration { return 0 }

// ApplyCancel returns j canceled at now and whether anything changed: a
// queued job becomes canceled, a running one gets CancelRequested, and a
// canceled one is unchanged. Other states give a *TransitionError.
func ApplyCancel(j Job, now time.Time) (Job, bool, error) {
	now = now.UTC()
	switch j.State {
	case StateQueued:
		j.State = StateCanceled
		j.FinishedAt = now
		j.UpdatedAt = now
		return j, true, nil
	case StateRunning:
		if j.CancelRequested {
			return j, false, nil
		}
		j.CancelRequested = true
		j.UpdatedAt = now
		return j, true, nil
	case StateCanceled:
		return j, false, nil
	}
	return j, false, CheckTransition(j.ID, j.State, StateCanceled)
}

// ApplyRetry returns j queued again at now after it failed or was canceled.
// Attempt keeps counting (so old leases stay fenced off); if the attempts are
// used up, MaxAttempts grows to allow one more.
func ApplyRetry(j Job, now time.Time) (Job, error) {
	if j.State != StateFailed && j.State != StateCanceled {
		// Not CheckTransition: running may move to queued (by Complete),
		// but Retry applies only to a failed or canceled job.
		return j, &TransitionError{ID: j.ID, From: j.State, To: StateQueued}
	}
	now = now.UTC()
	j.State = StateQueued
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

// Prunable reports whether j is terminal and finished before cutoff.
func (j Job) Prunable(cutoff time.Time) bool {
	return j.State.Terminal() && j.FinishedAt.Before(cutoff)
}

// MatchesList reports whether j passes the filters of opts (not the cursor).
func (j Job) MatchesList(opts ListOptions) bool {
	if opts.Kind != "" && j.Kind != opts.Kind {
		return false
	}
	if len(opts.States) == 0 {
		return true
	}
	for _, s := range opts.States {
		if j.State == s {
			return true
		}
	}
	return false
}

// Normalize validates opts and fills in its defaults.
func (opts ListOptions) Normalize() (ListOptions, error) {
	for _, s := range opts.States {
		if !s.Valid() {
			return opts, fmt.Errorf("%w: unknown state %q", ErrInvalidInput, s)
		}
	}
	if opts.Kind != "" {
		if err := ValidateKind(opts.Kind); err != nil {
			return opts, err
		}
	}
	if opts.Cursor != "" {
		if err := ValidateID(opts.Cursor); err != nil {
			return opts, fmt.Errorf("%w: bad cursor", err)
		}
	}
	switch {
	case opts.Limit < 0:
		return opts, fmt.Errorf("%w: negative limit", ErrInvalidInput)
	case opts.Limit == 0:
		opts.Limit = DefaultListLimit
	case opts.Limit > MaxListLimit:
		opts.Limit = MaxListLimit
	}
	if opts.Order != NewestFirst && opts.Order != OldestFirst {
		return opts, fmt.Errorf("%w: unknown order %d", ErrInvalidInput, opts.Order)
	}
	if opts.MaxBytes < 0 {
		return opts, fmt.Errorf("%w: negative byte limit", ErrInvalidInput)
	}
	return opts, nil
}

// AfterCursor reports whether id comes after cursor in order (always true
// for an empty cursor).
func (opts ListOptions) AfterCursor(id string) bool {
	if opts.Cursor == "" {
		return true
	}
	if opts.Order == OldestFirst {
		return id > opts.Cursor
	}
	return id < opts.Cursor
}

// ValidateWorker checks a worker name: 1 to 256 bytes of printable ASCII.
func ValidateWorker(w string) error {
	if w == "" || len(w) > 256 {
		return fmt.Errorf("%w: worker name must be 1 to 256 bytes", ErrInvalidInput)
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 0x21 || w[i] > 0x7e {
			return fmt.Errorf("%w: worker name %q: printable ASCII without spaces only", ErrInvalidInput, truncate(w, 64))
		}
	}
	return nil
}
