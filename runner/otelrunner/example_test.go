package otelrunner_test

import (
	"context"
	"encoding/json"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
	"github.com/jobdir/jobdir/runner/otelrunner"
)

// A runner whose attempts are traced; here the spans go to the SDK's
// in-memory recorder, in a program to an exporter (OTLP, say).
func Example() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	ctx := context.Background()
	store := memstore.New(nil)
	defer store.Close()
	r := runner.New(store, &runner.Options{
		Middleware: []runner.Middleware{otelrunner.Middleware(&otelrunner.Options{TracerProvider: tp})},
	})
	r.Handle("email.send", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		return nil, nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	j, _, _ := store.Submit(ctx, jobstore.Spec{Kind: "email.send"})
	_, _ = store.Wait(ctx, j.ID)
	stop()
	<-done

	for _, span := range rec.Ended() {
		for _, kv := range span.Attributes() {
			if kv.Key == otelrunner.AttrOutcome {
				fmt.Println(span.Name(), kv.Value.AsString())
			}
		}
	}
	// Output: jobdir.attempt email.send succeeded
}
