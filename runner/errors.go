package runner

import (
	"errors"
	"fmt"
	"time"
)

// Causes of a handler's ctx ending, as context.Cause reports them. Test for
// them with errors.Is: the cause may wrap one of them with details. Their
// text is in plain words, without the package's name: a handler that
// returns one becomes the job's LastError, which people read.
var (
	// ErrCanceled is the cause when Cancel was requested for the running
	// job.
	ErrCanceled = errors.New("job canceled")
	// ErrLeaseLost is the cause when the store reports that this worker no
	// longer holds the job, for example because it was presumed dead and
	// the job was recovered. The handler's outcome will not be recorded.
	ErrLeaseLost = errors.New("lease lost")
	// ErrTimeout is the cause when the attempt ran longer than its timeout.
	ErrTimeout = errors.New("attempt timed out")
	// ErrShutdown is the cause when the runner shut down and the handler
	// did not return within Options.ShutdownGrace, or the store was closed.
	ErrShutdown = errors.New("worker shutting down")
)

// ErrNoHandlers is returned by Run when no handler was registered: claiming
// with no kinds would claim jobs of every kind.
var ErrNoHandlers = errors.New("runner: no handlers registered")

// ErrRunning is returned by Run when the Runner is already running.
var ErrRunning = errors.New("runner: already running")

// Permanent wraps err so that the failed attempt is final: the job becomes
// failed even if attempts remain. It returns nil if err is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was made by Permanent (anywhere in its
// chain).
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RetryAfter wraps err so that, if attempts remain, the next attempt is due
// after d instead of after the store's backoff. It returns nil if err is
// nil; a d of zero or less keeps the store's backoff.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, d: d}
}

type retryAfterError struct {
	err error
	d   time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// PanicError is the error of an attempt whose handler panicked. Its message,
// which becomes the job's LastError, holds the panic value and the stack of
// the panicking goroutine.
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the stack trace at the panic, as debug.Stack formats it.
	Stack []byte
}

// Error returns "panic: " followed by the value, a blank line and the
// stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value if it is an error, so that errors.Is sees
// through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// errGoexit is the error of an attempt whose handler called runtime.Goexit
// (for example through testing.T.FailNow) instead of returning.
var errGoexit = errors.New("runner: handler called runtime.Goexit instead of returning")
