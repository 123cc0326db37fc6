package runner

import "fmt"

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
