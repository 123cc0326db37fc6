package runner

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jobdir/jobdir/jobstore"
)

// Typed returns a Handler that decodes each job's payload into a T (see
// jobstore.DecodeArgs) and calls fn with it. A payload that does not decode
// fails the attempt with Permanent: another attempt would not decode it
// either, and the error, which becomes the job's LastError, names T.
func Typed[T jobstore.Args](fn func(ctx context.Context, job jobstore.Job, args T) error) Handler {
	return HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		args, err := jobstore.DecodeArgs[T](job)
		if err != nil {
			return nil, Permanent(err)
		}
		return nil, fn(ctx, job, args)
	})
}

// TypedResult is Typed for a function with a result, which becomes the
// job's result encoded as JSON. A result that does not encode fails the
// attempt with Permanent.
func TypedResult[T jobstore.Args, R any](fn func(ctx context.Context, job jobstore.Job, args T) (R, error)) Handler {
	return HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		args, err := jobstore.DecodeArgs[T](job)
		if err != nil {
			return nil, Permanent(err)
		}
		res, err := fn(ctx, job, args)
		if err != nil {
			return nil, err
		}
		out, err := json.Marshal(res)
		if err != nil {
			return nil, Permanent(fmt.Errorf("cannot encode the result, a %T, as JSON: %w", res, err))
		}
		return out, nil
	})
}

// Register registers fn for the jobs of the kind T names
// (jobstore.KindOf), with their payload decoded into a T as Typed does.
// It panics as Handle does.
func Register[T jobstore.Args](r *Runner, fn func(ctx context.Context, job jobstore.Job, args T) error) {
	r.Handle(jobstore.KindOf[T](), Typed(fn))
}

// RegisterResult is Register for a function with a result (see
// TypedResult).
func RegisterResult[T jobstore.Args, R any](r *Runner, fn func(ctx context.Context, job jobstore.Job, args T) (R, error)) {
	r.Handle(jobstore.KindOf[T](), TypedResult(fn))
}
