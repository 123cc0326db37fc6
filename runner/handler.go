package runner

import (
	"context"
	"encoding/json"

	"github.com/jobdir/jobdir/jobstore"
)

// Handler runs jobs of one kind.
type Handler interface {
	// Work runs one attempt of job and returns its result, a JSON value
	// (nil for none), or an error that fails the attempt. It should return
	// soon after ctx ends; context.Cause(ctx) says why it ended (ErrCanceled,
	// ErrLeaseLost, ErrTimeout or ErrShutdown). Wrap the error with
	// Permanent to fail the job at once, or with RetryAfter to choose the
	// delay before the next attempt.
	Work(ctx context.Context, job jobstore.Job) (result json.RawMessage, err error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job jobstore.Job) (json.RawMessage, error)

// Work calls f(ctx, job).
func (f HandlerFunc) Work(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
	return f(ctx, job)
}
