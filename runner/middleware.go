package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Middleware wraps a Handler: it returns a Handler that does what it adds
// (logging, metrics, a trace span, a check) around a call of next.Work, or
// instead of it. Options.Middleware applies a list to the handler of every
// kind, so every attempt goes through it, whatever its kind.
//
// A middleware sees the job before its handler does (job.Kind,
// job.Attempt, job.Payload) and the result and error after; what it
// returns is the attempt's outcome, wrapped errors (Permanent,
// RetryAfter) included. The ctx it passes on is the handler's: it may add
// values to it, and it ends when the attempt is canceled, times out or the
// runner shuts down (context.Cause says which).
type Middleware func(next Handler) Handler

// wrap returns h inside mw, mw[0] outermost. A nil middleware, or one
// that returns a nil Handler, is an error.
func wrap(kind string, h Handler, mw []Middleware) (Handler, error) {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			return nil, fmt.Errorf("runner: Options.Middleware[%d] is nil", i)
		}
		if h = mw[i](h); h == nil {
			return nil, fmt.Errorf("runner: Options.Middleware[%d] returned no handler for kind %q", i, kind)
		}
	}
	return h, nil
}

// AttemptEnd is what became of an attempt once its handler returned, as
// AfterAttempt reports it.
type AttemptEnd struct {
	// Job is the job as the store recorded the outcome (succeeded, queued
	// for a retry, failed or canceled) when Recorded; else as claimed.
	Job jobstore.Job
	// Outcome is the outcome the runner recorded, or would have.
	Outcome jobstore.Outcome
	// RunDuration is how long the handler ran, its middleware included.
	RunDuration time.Duration
	// Recorded reports that the store recorded Outcome. When false, the
	// outcome was dropped: the lease was lost, or Complete kept failing
	// (and the attempt was given back); Err says why.
	Recorded bool
	// Err is the handler's error (nil on success) when Recorded, else why
	// the outcome was dropped.
	Err error
}

// AfterAttempt, called by a middleware (or a handler) with the ctx of an
// attempt that a Runner runs, has the runner call f once it has recorded
// the attempt's outcome, or dropped it, with what became of it: what a
// middleware cannot see from the handler's return alone (whether a failure
// is retried, or the outcome reached the store at all). f is called from
// the runner's goroutine, after the handler returned, in the order of the
// calls of AfterAttempt; it must not block. It reports false, and never
// calls f, for a ctx that is not a Runner's attempt (Attempt's, say).
// MetricsMiddleware is built on it.
func AfterAttempt(ctx context.Context, f func(AttemptEnd)) bool {
	at, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok || f == nil {
		return false
	}
	a := &at.after
	a.mu.Lock()
	a.fs = append(a.fs, f)
	a.mu.Unlock()
	return true
}

// afterHooks are the functions AfterAttempt registered for one attempt.
type afterHooks struct {
	mu sync.Mutex
	fs []func(AttemptEnd)
}

// run calls the registered functions with e.
func (a *afterHooks) run(e AttemptEnd) {
	a.mu.Lock()
	fs := a.fs
	a.fs = nil
	a.mu.Unlock()
	for _, f := range fs {
		f(e)
	}
}
