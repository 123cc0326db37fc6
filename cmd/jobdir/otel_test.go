package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is a fake OTLP/HTTP collector: it keeps the spans sent to
// POST /v1/traces and the service names of their resources.
type collector struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not OTLP/HTTP traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.services = append(c.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestWorkOTelSendsASpanPerAttempt: jobdir work --otel sends, by OTLP over
// HTTP to where OTEL_EXPORTER_OTLP_ENDPOINT says, one span per attempt
// with the job's attributes, from the service OTEL_SERVICE_NAME names,
// before it exits.
func TestWorkOTelSendsASpanPerAttempt(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "nightly-worker")
	dir := newStoreDir(t)
	t.Chdir(t.TempDir())
	ok := submit(t, dir, "--", "true")
	bad := submit(t, dir, "--max-attempts", "1", "--", "false")

	r := jdOK(t, dir, "work", "--exit-when-idle", "--otel")
	require.NotContains(t, r.stderr, "could not be sent")

	c.mu.Lock()
	defer c.mu.Unlock()
	require.Len(t, c.spans, 2, "one span per attempt")
	byJob := map[string]*tracepb.Span{}
	for _, s := range c.spans {
		require.Equal(t, "jobdir.attempt exec", s.Name)
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.GetValue().GetStringValue()
		}
		byJob[attrs["jobdir.job.id"]] = s
	}
	require.Contains(t, byJob, ok)
	require.Contains(t, byJob, bad)
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, byJob[bad].GetStatus().GetCode(), "the failed attempt's span")
	require.NotEqual(t, tracepb.Status_STATUS_CODE_ERROR, byJob[ok].GetStatus().GetCode())
	require.Contains(t, c.services, "nightly-worker")
}

// TestOTelRefusesGRPC: --otel speaks OTLP over HTTP only, and says so
// rather than sending to a gRPC collector that cannot read it.
func TestOTelRefusesGRPC(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	dir := newStoreDir(t)
	r := jd(t, dir, "work", "--exit-when-idle", "--otel")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "--otel sends OTLP over HTTP (http/protobuf); OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported")
	r = jd(t, dir, "serve", "--insecure-no-auth", "--otel")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.True(t, strings.Contains(r.stderr, "give --work N too"), "%s", r)
}
