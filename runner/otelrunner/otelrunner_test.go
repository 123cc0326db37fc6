package otelrunner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
	"github.com/jobdir/jobdir/runner/otelrunner"
)

// setup returns a recorder of the spans of the tracer provider tp, and a
// store, for a test.
func setup(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider, *memstore.Store) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := memstore.New(nil)
	t.Cleanup(func() { _ = s.Close() })
	return rec, tp, s
}

// attrsOf returns the attributes of sp by key.
func attrsOf(sp sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestSpanPerAttempt runs jobs that succeed, fail, panic, time out and
// start a span of their own through a runner with the middleware, and
// reads the spans from the SDK's in-memory recorder: one per attempt,
// named for the kind, with the job's attributes, the outcome, the error
// recorded and the status set, and the handler's own span its child.
func TestSpanPerAttempt(t *testing.T) {
	ctx := t.Context()
	rec, tp, s := setup(t)
	r := runner.New(s, &runner.Options{Concurrency: 4, Worker: "w1",
		Middleware: []runner.Middleware{otelrunner.Middleware(&otelrunner.Options{TracerProvider: tp})}})
	r.Handle("ok", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		_, child := trace.SpanFromContext(ctx).TracerProvider().Tracer("test").Start(ctx, "inside")
		child.End()
		return json.RawMessage(`"done"`), nil
	}))
	r.Handle("bad", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		return nil, runner.Permanent(errors.New("refused"))
	}))
	r.Handle("boom", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		panic("kaboom")
	}))
	r.Handle("slow", runner.HandlerFunc(func(ctx context.Context, _ jobstore.Job) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})

	ids := map[string]string{}
	for _, spec := range []jobstore.Spec{
		{Kind: "ok", Key: "report-1"},
		{Kind: "bad"},
		{Kind: "boom", MaxAttempts: 1},
		{Kind: "slow", MaxAttempts: 1, Timeout: 50 * time.Millisecond},
	} {
		j, _, err := s.Submit(ctx, spec)
		require.NoError(t, err)
		ids[spec.Kind] = j.ID
	}
	for _, id := range ids {
		_, err := s.Wait(ctx, id)
		require.NoError(t, err)
	}

	spans := map[string]sdktrace.ReadOnlySpan{}
	require.Eventually(t, func() bool {
		for _, sp := range rec.Ended() {
			spans[sp.Name()] = sp
		}
		return len(spans) == 5
	}, 5*time.Second, time.Millisecond, "four attempts and the handler's own span")

	ok := spans["jobdir.attempt ok"]
	require.NotNil(t, ok)
	require.Equal(t, trace.SpanKindConsumer, ok.SpanKind())
	a := attrsOf(ok)
	require.Equal(t, ids["ok"], a[otelrunner.AttrJobID].AsString())
	require.Equal(t, "ok", a[otelrunner.AttrJobKind].AsString())
	require.Equal(t, "report-1", a[otelrunner.AttrJobKey].AsString())
	require.Equal(t, int64(1), a[otelrunner.AttrAttempt].AsInt64())
	require.Equal(t, int64(3), a[otelrunner.AttrMaxAttempts].AsInt64())
	require.Equal(t, "w1", a[otelrunner.AttrWorker].AsString())
	require.Equal(t, otelrunner.OutcomeSucceeded, a[otelrunner.AttrOutcome].AsString())
	require.Equal(t, codes.Unset, ok.Status().Code)
	require.Equal(t, ok.SpanContext().SpanID(), spans["inside"].Parent().SpanID(), "the handler's span is the attempt's child")
	require.Equal(t, ok.SpanContext().TraceID(), spans["inside"].SpanContext().TraceID())

	bad := spans["jobdir.attempt bad"]
	require.Equal(t, otelrunner.OutcomeFailed, attrsOf(bad)[otelrunner.AttrOutcome].AsString())
	require.Equal(t, codes.Error, bad.Status().Code)
	require.Equal(t, "refused", bad.Status().Description)
	require.Len(t, bad.Events(), 1)
	require.Equal(t, "exception", bad.Events()[0].Name, "the error is recorded")
	_, noKey := attrsOf(bad)[otelrunner.AttrJobKey]
	require.False(t, noKey, "no key, no key attribute")

	boom := spans["jobdir.attempt boom"]
	require.Equal(t, otelrunner.OutcomePanicked, attrsOf(boom)[otelrunner.AttrOutcome].AsString())
	require.Equal(t, codes.Error, boom.Status().Code)
	j, err := s.Get(ctx, ids["boom"])
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, j.State)
	require.Contains(t, j.LastError, "kaboom", "the runner still records the panic")

	slow := spans["jobdir.attempt slow"]
	require.Equal(t, otelrunner.OutcomeTimedOut, attrsOf(slow)[otelrunner.AttrOutcome].AsString())
	require.Equal(t, codes.Error, slow.Status().Code)
}

// TestSpanPerSubmit: a client wrapped with SubmitMiddleware makes a
// producer span per Submit and per SubmitBatch, a child of the caller's
// span, with the kind, the key, the job's ID and the jobs created, and the
// error of a refused submit recorded.
func TestSpanPerSubmit(t *testing.T) {
	ctx := t.Context()
	rec, tp, s := setup(t)
	c, err := jobstore.WithSubmitMiddleware(s, otelrunner.SubmitMiddleware(&otelrunner.Options{TracerProvider: tp}))
	require.NoError(t, err)

	ctx, parent := tp.Tracer("test").Start(ctx, "request")
	j, _, err := c.Submit(ctx, jobstore.Spec{Kind: "report.build", Key: "nightly"})
	require.NoError(t, err)
	_, err = c.SubmitBatch(ctx, []jobstore.Spec{{Kind: "email.send", Key: "a"}, {Kind: "email.send", Key: "a"}, {Kind: "email.send"}})
	require.NoError(t, err)
	_, err = c.SubmitBatch(ctx, []jobstore.Spec{{Kind: "a"}, {Kind: "b"}})
	require.NoError(t, err)
	_, _, err = c.Submit(ctx, jobstore.Spec{Kind: "bad kind"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	parent.End()

	spans := rec.Ended()
	require.Len(t, spans, 5)
	one, batch, mixed, bad := spans[0], spans[1], spans[2], spans[3]
	require.Equal(t, "jobdir.submit report.build", one.Name())
	require.Equal(t, trace.SpanKindProducer, one.SpanKind())
	require.Equal(t, parent.SpanContext().SpanID(), one.Parent().SpanID(), "a child of the caller's span")
	a := attrsOf(one)
	require.Equal(t, j.ID, a[otelrunner.AttrJobID].AsString())
	require.Equal(t, "nightly", a[otelrunner.AttrJobKey].AsString())
	require.Equal(t, int64(1), a[otelrunner.AttrCreated].AsInt64())

	require.Equal(t, "jobdir.submit email.send", batch.Name())
	require.Equal(t, int64(3), attrsOf(batch)[otelrunner.AttrBatchSize].AsInt64())
	require.Equal(t, int64(2), attrsOf(batch)[otelrunner.AttrCreated].AsInt64(), "the second spec's key named the first's job")
	require.Equal(t, "jobdir.submit", mixed.Name(), "a batch of several kinds")

	require.Equal(t, codes.Error, bad.Status().Code)
	require.Len(t, bad.Events(), 1)
	require.Equal(t, "exception", bad.Events()[0].Name)
}

// TestAttemptsAreChildrenOfTheSubmit: a submit made inside a request's span
// carries its trace context in the job's metadata, and every attempt of
// the job, run by a runner with a tracer provider of its own (another
// process's, as far as the spans go), is a child of the submit's span, in
// the request's trace. The caller's metadata map is left as it was; a
// spec that carries a trace context keeps it; one whose metadata is full
// goes without, and the submit's span says so.
func TestAttemptsAreChildrenOfTheSubmit(t *testing.T) {
	ctx := t.Context()
	submitted, tpSubmit, s := setup(t)
	worked := tracetest.NewSpanRecorder()
	tpWork := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(worked))
	t.Cleanup(func() { _ = tpWork.Shutdown(context.Background()) })
	c, err := jobstore.WithSubmitMiddleware(s, otelrunner.SubmitMiddleware(&otelrunner.Options{TracerProvider: tpSubmit}))
	require.NoError(t, err)

	reqCtx, request := tpSubmit.Tracer("test").Start(ctx, "request")
	meta := map[string]string{"request": "r-1"}
	j, _, err := c.Submit(reqCtx, jobstore.Spec{Kind: "flaky", Meta: meta, MaxAttempts: 2})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"request": "r-1"}, meta, "the caller's map is its own")
	require.Contains(t, j.Meta, "traceparent")
	require.Equal(t, "r-1", j.Meta["request"])

	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	full := map[string]string{}
	for i := range jobstore.MaxMetaEntries {
		full[fmt.Sprintf("k%d", i)] = "v"
	}
	res, err := c.SubmitBatch(reqCtx, []jobstore.Spec{{Kind: "keep", Meta: map[string]string{"traceparent": own}}, {Kind: "full", Meta: full}})
	require.NoError(t, err)
	require.Equal(t, own, res[0].Job.Meta["traceparent"], "a spec's own trace context is kept")
	require.Equal(t, full, res[1].Job.Meta, "a full metadata map goes as it is")
	request.End()

	r := runner.New(s, &runner.Options{Concurrency: 2, Worker: "w1",
		Middleware: []runner.Middleware{otelrunner.Middleware(&otelrunner.Options{TracerProvider: tpWork})}})
	r.Handle("flaky", runner.HandlerFunc(func(_ context.Context, job jobstore.Job) (json.RawMessage, error) {
		if job.Attempt == 1 {
			return nil, runner.RetryAfter(errors.New("once more"), time.Millisecond)
		}
		return nil, nil
	}))
	for _, k := range []string{"keep", "full"} {
		r.Handle(k, runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil }))
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	for _, id := range []string{j.ID, res[0].Job.ID, res[1].Job.ID} {
		w, err := s.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, w.State)
	}
	stop()
	require.NoError(t, <-done)

	var submitSpan, batchSpan sdktrace.ReadOnlySpan
	for _, sp := range submitted.Ended() {
		switch sp.Name() {
		case "jobdir.submit flaky":
			submitSpan = sp
		case "jobdir.submit":
			batchSpan = sp
		}
	}
	require.NotNil(t, submitSpan)
	require.Equal(t, request.SpanContext().TraceID(), submitSpan.SpanContext().TraceID())
	require.NotNil(t, batchSpan)
	require.Len(t, batchSpan.Events(), 1, "the batch's span says a spec went without")
	require.Equal(t, "trace context not carried", batchSpan.Events()[0].Name)

	byKind := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range worked.Ended() {
		byKind[attrsOf(sp)[otelrunner.AttrJobKind].AsString()] = append(byKind[attrsOf(sp)[otelrunner.AttrJobKind].AsString()], sp)
	}
	require.Len(t, byKind["flaky"], 2, "two attempts")
	for _, sp := range byKind["flaky"] {
		require.Equal(t, request.SpanContext().TraceID(), sp.SpanContext().TraceID(), "an attempt is in the request's trace")
		require.Equal(t, submitSpan.SpanContext().SpanID(), sp.Parent().SpanID(), "an attempt is a child of the submit's span")
		require.True(t, sp.Parent().IsRemote())
	}
	require.Len(t, byKind["keep"], 1)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", byKind["keep"][0].SpanContext().TraceID().String())
	require.Len(t, byKind["full"], 1)
	require.False(t, byKind["full"][0].Parent().IsValid(), "a job without a trace context starts a trace")
}
