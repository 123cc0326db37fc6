// Package otelrunner traces a runner's attempts with OpenTelemetry: one
// span per attempt, with the job's ID, kind, key and attempt, and how the
// attempt ended.
//
// Add its middleware to the runner's options:
//
//	r := runner.New(store, &runner.Options{
//		Middleware: []runner.Middleware{otelrunner.Middleware(nil)},
//	})
//
// The spans come from the global TracerProvider (otel.SetTracerProvider)
// unless Options says another. The handler's ctx carries the attempt's
// span, so the spans the handler starts are its children.
package otelrunner

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/jobdir/jobdir/runner/otelrunner"

// The attributes of an attempt's span.
const (
	// AttrJobID is the job's ID.
	AttrJobID = attribute.Key("jobdir.job.id")
	// AttrJobKind is the job's kind.
	AttrJobKind = attribute.Key("jobdir.job.kind")
	// AttrJobKey is the job's key, when it has one.
	AttrJobKey = attribute.Key("jobdir.job.key")
	// AttrAttempt is the attempt's number (1 for the first).
	AttrAttempt = attribute.Key("jobdir.job.attempt")
	// AttrMaxAttempts is the job's limit of attempts.
	AttrMaxAttempts = attribute.Key("jobdir.job.max_attempts")
	// AttrWorker names the worker that runs the attempt.
	AttrWorker = attribute.Key("jobdir.worker")
	// AttrOutcome says how the handler ended, one of the Outcome values.
	AttrOutcome = attribute.Key("jobdir.attempt.outcome")
)

// How an attempt's handler ended, the values of AttrOutcome. The runner
// decides from the handler's error whether a failed job is retried; the
// span says what the handler did.
const (
	OutcomeSucceeded = "succeeded"
	// OutcomeFailed: the handler returned an error, with none of the
	// causes below.
	OutcomeFailed = "failed"
	// OutcomeCanceled: Cancel was requested while the attempt ran.
	OutcomeCanceled = "canceled"
	// OutcomeTimedOut: the attempt ran past its timeout.
	OutcomeTimedOut = "timed_out"
	// OutcomeInterrupted: the worker shut down during the attempt, which
	// then does not count.
	OutcomeInterrupted = "interrupted"
	// OutcomeLeaseLost: the store no longer counted this worker as the
	// job's holder.
	OutcomeLeaseLost = "lease_lost"
	// OutcomePanicked: the handler panicked (or called runtime.Goexit);
	// the runner records the panic as the attempt's failure.
	OutcomePanicked = "panicked"
)

// Options configures Middleware. The zero Options (or nil) is ready to use.
type Options struct {
	// TracerProvider makes the tracer of the spans; nil means the global
	// one, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// Middleware returns a runner.Middleware that runs each attempt inside a
// span named "jobdir.attempt <kind>", of kind consumer, with the job's
// attributes (AttrJobID and the others). When the handler returns, the
// span gets AttrOutcome, and a handler's error is recorded on it, with
// the span's status set to error; a panic ends the span as
// OutcomePanicked and goes on to the runner, which records it.
func Middleware(opts *Options) runner.Middleware {
	var o Options
	if opts != nil {
		o = *opts
	}
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(ScopeName)
	return func(next runner.Handler) runner.Handler {
		return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (result json.RawMessage, err error) {
			attrs := []attribute.KeyValue{
				AttrJobID.String(job.ID), AttrJobKind.String(job.Kind),
				AttrAttempt.Int(job.Attempt), AttrMaxAttempts.Int(job.MaxAttempts),
			}
			if job.Key != "" {
				attrs = append(attrs, AttrJobKey.String(job.Key))
			}
			if job.Worker != "" {
				attrs = append(attrs, AttrWorker.String(job.Worker))
			}
			ctx, span := tracer.Start(ctx, "jobdir.attempt "+job.Kind,
				trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
			returned := false
			defer func() {
				if !returned {
					// A panic, or runtime.Goexit: the runner turns it into
					// the attempt's failure, with its value and stack.
					span.SetAttributes(AttrOutcome.String(OutcomePanicked))
					span.SetStatus(codes.Error, "the handler panicked")
					span.End()
					return
				}
				outcome := outcomeOf(ctx, err)
				span.SetAttributes(AttrOutcome.String(outcome))
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
				span.End()
			}()
			result, err = next.Work(ctx, job)
			returned = true
			return result, err
		})
	}
}

// outcomeOf says how a handler that returned err ended, given its ctx.
func outcomeOf(ctx context.Context, err error) string {
	if err == nil {
		return OutcomeSucceeded
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, runner.ErrCanceled):
		return OutcomeCanceled
	case errors.Is(cause, runner.ErrTimeout):
		return OutcomeTimedOut
	case errors.Is(cause, runner.ErrShutdown):
		return OutcomeInterrupted
	case errors.Is(cause, runner.ErrLeaseLost):
		return OutcomeLeaseLost
	}
	return OutcomeFailed
}
