package jobstore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Stores return them wrapped with context; test for them
// with errors.Is.
var (
	// ErrNotFound is returned when no job has the given ID (or it was pruned).
	ErrNotFound = errors.New("job not found")
	// ErrInvalidTransition is returned when an operation does not apply to a
	// job in its current state, for example Retry of a running job. The
	// concrete error is a *TransitionError.
	ErrInvalidTransition = errors.New("invalid state transition")
	// ErrInvalidInput is returned for a malformed request: a bad kind, key,
	// state, cursor or option. ErrInvalidID and ErrPayloadTooLarge wrap it.
	ErrInvalidInput = errors.New("invalid input")
	// ErrInvalidID is returned for a string that is not a job ID. It wraps
	// ErrInvalidInput. A store never turns an invalid ID into a path.
	ErrInvalidID = fmt.Errorf("%w: invalid job id", ErrInvalidInput)
	// ErrPayloadTooLarge is returned when a payload or result exceeds the
	// store's limit. It wraps ErrInvalidInput.
	ErrPayloadTooLarge = fmt.Errorf("%w: payload too large", ErrInvalidInput)
	// ErrNoJob is returned by Claim when no queued job is due. The concrete
	// error may be a *NoJobError that says when the next one is due.
	ErrNoJob = errors.New("no job available")
	// ErrNotFinished is returned by Deleter.Delete for a queued or
	// running job: only a finished job is deleted. It wraps
	// ErrInvalidTransition.
	ErrNotFinished = fmt.Errorf("%w: only a finished job can be deleted", ErrInvalidTransition)
	// ErrNotHeld is returned by Complete, Release and WatchCancel when the
	// lease no longer holds the job: another attempt has started, the job
	// was recovered from a worker presumed dead, or it already finished.
	ErrNotHeld = errors.New("job not held by this lease")
	// ErrClosed is returned by every method of a closed store.
	ErrClosed = errors.New("store closed")
	// ErrCorrupt is returned when a stored record cannot be decoded. The
	// message names the record; the store keeps running.
	ErrCorrupt = errors.New("corrupt job record")
	// ErrUntrusted is returned by Claim of a store that users other than
	// the caller's own (and root) can write, such as a store directory
	// writable by others: running its jobs would run programs they chose
	// as the caller's user. Reading, submitting and canceling are not
	// refused. A store that cannot tell whose its data is never returns
	// it.
	ErrUntrusted = errors.New("store writable by other users")
	// ErrNotDurable is returned when a change took effect (every reader
	// sees it) but the flush that makes it survive a power cut failed, so
	// whether it survives one is unknown. The change is not undone: the
	// operation's documentation says what a retry does. For Complete, a
	// retry with the same lease makes the recorded outcome durable and
	// returns the job.
	ErrNotDurable = errors.New("change made, but not known to survive a power cut")
)

// TransitionError reports an operation that the state machine does not allow.
// It unwraps to ErrInvalidTransition.
type TransitionError struct {
	ID       string
	From, To State
}

// Error says which job could not move between which states.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("job %s: cannot move from %s to %s", e.ID, e.From, e.To)
}

// Unwrap returns ErrInvalidTransition.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// NoJobError is the ErrNoJob a store returns when it knows when the next
// queued job becomes due. It unwraps to ErrNoJob.
type NoJobError struct {
	// NextRunAt is when to try again: the earliest RunAt among queued jobs
	// that are not yet due, or, when a due job was momentarily held by
	// someone else, a moment from now. It is the zero time if the store has
	// no queued jobs.
	NextRunAt time.Time
	// Since marks where the store's account of work stood when the Claim
	// began, for a store that is a WorkAwaiter: its AwaitWorkSince returns
	// at once if work may have arrived since. Zero from other stores.
	Since uint64
}

// Error says that no job is due, and when the next one will be.
func (e *NoJobError) Error() string {
	if e.NextRunAt.IsZero() {
		return ErrNoJob.Error()
	}
	return fmt.Sprintf("%s (next due at %s)", ErrNoJob, e.NextRunAt.Format(time.RFC3339Nano))
}

// Unwrap returns ErrNoJob.
func (e *NoJobError) Unwrap() error { return ErrNoJob }
