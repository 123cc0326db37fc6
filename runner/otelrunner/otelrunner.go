// Package otelrunner traces jobdir's work with OpenTelemetry: a span per
// attempt of a runner, with the job's ID, kind, key and attempt and how
// the attempt ended (Middleware), and a span per submit of a client
// (SubmitMiddleware, for jobstore.WithSubmitMiddleware).
//
// A submit's trace context goes with its jobs, in their metadata
// (jobstore.Spec.Meta, as W3C Trace Context: "traceparent" and
// "tracestate"), and each attempt's span is a child of it, in whatever
// process runs the job: one trace holds the request that submitted a job
// and every attempt of it.
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
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
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
	// AttrBatchSize is how many specs a submit carried.
	AttrBatchSize = attribute.Key("jobdir.submit.specs")
	// AttrCreated is how many jobs a submit created (the others' keys
	// named a job already).
	AttrCreated = attribute.Key("jobdir.submit.created")
	// AttrQueue is the job's queue.
	AttrQueue = attribute.Key("jobdir.job.queue")
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
	// Propagator writes a submit's trace context into its jobs' metadata
	// and reads it back at each attempt; nil means W3C Trace Context
	// (propagation.TraceContext), whose keys are "traceparent" and
	// "tracestate". The submitting and the running processes must agree.
	Propagator propagation.TextMapPropagator
}

// propagator returns the propagator of o (nil: the zero Options).
func (o *Options) propagator() propagation.TextMapPropagator {
	if o != nil && o.Propagator != nil {
		return o.Propagator
	}
	return propagation.TraceContext{}
}

// tracer returns the tracer of the spans of o (nil: the zero Options).
func (o *Options) tracer() trace.Tracer {
	var tp trace.TracerProvider
	if o != nil {
		tp = o.TracerProvider
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Middleware returns a runner.Middleware that runs each attempt inside a
// span named "jobdir.attempt <kind>", of kind consumer, with the job's
// attributes (AttrJobID and the others). Its parent is the trace context
// the job's metadata carries (see SubmitMiddleware), if any, else the span
// of the handler's ctx. When the handler returns, the
// span gets AttrOutcome, and a handler's error is recorded on it, with
// the span's status set to error; a panic ends the span as
// OutcomePanicked and goes on to the runner, which records it.
func Middleware(opts *Options) runner.Middleware {
	tracer, prop := opts.tracer(), opts.propagator()
	return func(next runner.Handler) runner.Handler {
		return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (result json.RawMessage, err error) {
			if len(job.Meta) > 0 {
				ctx = prop.Extract(ctx, propagation.MapCarrier(job.Meta))
			}
			attrs := []attribute.KeyValue{
				AttrJobID.String(job.ID), AttrJobKind.String(job.Kind), AttrQueue.String(jobstore.QueueOf(job.Queue)),
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

// SubmitMiddleware returns a jobstore.SubmitMiddleware that runs each
// submit inside a span named "jobdir.submit <kind>" (or "jobdir.submit"
// for a batch of several kinds), of kind producer, with the number of
// specs (AttrBatchSize), the kind, and for one spec its key; when the
// submit returns, the job's ID (one spec) and how many jobs it created
// (AttrCreated), or its error, recorded, with the span's status set to
// error. The span is a child of the span in the submit's ctx.
//
// The span's trace context goes into each spec's metadata (a copy: the
// caller's map is left as it is), so that the attempts of the jobs are
// its children, in any process. A spec that carries a trace context
// already (its submitter's, "traceparent" with the default propagator)
// keeps it; one whose metadata is full (jobstore.MaxMetaEntries) goes
// without, and the span says so in an event. A submit whose key names a
// job already returns that job, with the trace context of its own submit.
func SubmitMiddleware(opts *Options) jobstore.SubmitMiddleware {
	tracer, prop := opts.tracer(), opts.propagator()
	return func(next jobstore.SubmitFunc) jobstore.SubmitFunc {
		return func(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
			name := "jobdir.submit"
			attrs := []attribute.KeyValue{AttrBatchSize.Int(len(specs))}
			if kind, one := oneKind(specs); one {
				name += " " + kind
				attrs = append(attrs, AttrJobKind.String(kind))
			}
			if len(specs) == 1 && specs[0].Key != "" {
				attrs = append(attrs, AttrJobKey.String(specs[0].Key))
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			if span.SpanContext().IsValid() {
				carried := carry(ctx, prop, specs)
				if carried < len(specs) {
					span.AddEvent("trace context not carried", trace.WithAttributes(
						attribute.Int("jobdir.submit.uncarried", len(specs)-carried),
						attribute.String("jobdir.submit.reason", "the spec's metadata already holds a trace context, or is full")))
				}
			}
			res, err := next(ctx, specs)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				return res, err
			}
			created := 0
			for _, r := range res {
				if r.Created {
					created++
				}
			}
			span.SetAttributes(AttrCreated.Int(created))
			if len(res) == 1 {
				span.SetAttributes(AttrJobID.String(res[0].Job.ID))
			}
			return res, nil
		}
	}
}

// oneKind returns the kind of specs if they all have the same one.
func oneKind(specs []jobstore.Spec) (string, bool) {
	if len(specs) == 0 {
		return "", false
	}
	for _, s := range specs[1:] {
		if s.Kind != specs[0].Kind {
			return "", false
		}
	}
	return specs[0].Kind, true
}

// carry writes the trace context of ctx into the metadata of each of
// specs (the middleware's own copy of the slice) that has none and room
// for it, replacing its map with a copy, and returns how many it wrote.
func carry(ctx context.Context, prop propagation.TextMapPropagator, specs []jobstore.Spec) int {
	c := propagation.MapCarrier{}
	prop.Inject(ctx, c)
	if len(c) == 0 {
		return 0
	}
	n := 0
	for i := range specs {
		meta := specs[i].Meta
		has, room := false, len(meta)
		for k := range c {
			if _, ok := meta[k]; ok {
				has = true
			} else {
				room++
			}
		}
		if has || room > jobstore.MaxMetaEntries {
			continue
		}
		out := make(map[string]string, room)
		maps.Copy(out, meta)
		maps.Copy(out, c)
		specs[i].Meta = out
		n++
	}
	return n
}
