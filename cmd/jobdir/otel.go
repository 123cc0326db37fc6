package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jobdir/jobdir/runner/otelrunner"
)

// tracingShutdownTimeout bounds the sending of the last spans at exit.
const tracingShutdownTimeout = 5 * time.Second

// startTracing makes the tracer provider of --otel: a span per attempt
// and per HTTP submit (otelrunner), batched and sent by OTLP over HTTP
// where the standard OTEL_EXPORTER_OTLP_* variables say
// (http://localhost:4318 by default), from a service named by
// OTEL_SERVICE_NAME (default jobdir). It returns otelrunner's options for
// the spans, and stop, which sends what is left and must be called before
// exit.
func startTracing(ctx context.Context, log *slog.Logger) (*otelrunner.Options, func(), error) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" && p != "http/protobuf" {
			return nil, nil, usagef("--otel sends OTLP over HTTP (http/protobuf); %s=%s is not supported: unset it, or point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)", v, p)
		}
		if os.Getenv(v) != "" {
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("--otel: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "jobdir"), attribute.String("service.version", version())),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		// A partial resource is still usable; say what is missing.
		log.Warn("--otel: some resource attributes are missing: " + err.Error())
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("--otel: the last spans could not be sent: " + err.Error())
		}
	}
	return &otelrunner.Options{TracerProvider: tp}, stop, nil
}

// tracedRequests serves h with each request's ctx holding the trace
// context its headers carry (W3C traceparent and tracestate), so that the
// span of a submit made by the request (otelrunner.SubmitMiddleware), and
// with it every attempt of the jobs it submits, is in the caller's trace.
func tracedRequests(h http.Handler) http.Handler {
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
	})
}
