package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
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
	r = jd(t, dir, "serve", "--insecure-no-auth", "--addr", "127.0.0.1:0", "--otel")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "--otel sends OTLP over HTTP (http/protobuf); OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported")
}

// TestE2EOTelTraceCrossesProcesses: a request that carries a trace context
// (a W3C traceparent header) submits an exec job to one jobdir serve
// --otel process; another process, jobdir work --otel, runs it. The
// collector gets one trace: the serve process's submit span is a child of
// the request's span, the worker process's attempt span a child of the
// submit span, and the program got the attempt's trace context in
// TRACEPARENT. jobdir submit, run with TRACEPARENT in its environment (as
// from a traced script), puts the job in that trace too.
func TestE2EOTelTraceCrossesProcesses(t *testing.T) {
	c := &collector{}
	col := httptest.NewServer(c)
	t.Cleanup(col.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL)
	t.Setenv("TRACEPARENT", "")
	dir := newStoreDir(t)
	wd := t.TempDir()
	const token = "otel-e2e-token-0123456789"
	const traceID, requestSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

	srv := startServer(t, dir, wd, token, "--otel", "--allow-kind", "exec")
	body, err := json.Marshal(map[string]any{"kind": "exec",
		"payload": map[string]any{"argv": []string{"sh", "-c", "echo tp=$TRACEPARENT"}, "dir": wd}})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.url+"/v1/jobs", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+requestSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var job struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&job))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	srv.stop(t) // sends its spans

	const scriptTrace, scriptSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	sub := jobdirCmd(dir, wd, "submit", "--", "true")
	sub.Env = append(sub.Env, "TRACEPARENT=00-"+scriptTrace+"-"+scriptSpan+"-01")
	p := start(t, sub)
	require.Equal(t, 0, p.wait(t), "%s", p.errb.String())
	scripted := strings.TrimSpace(p.out.String())

	w := runBin(t, dir, wd, "work", "--exit-when-idle", "--otel", "-q")
	require.Equal(t, 0, w.code, "%s", w)
	logs := runBin(t, dir, wd, "logs", job.ID)
	require.Equal(t, 0, logs.code, "%s", logs)

	c.mu.Lock()
	defer c.mu.Unlock()
	hexOf := func(b []byte) string { return hex.EncodeToString(b) }
	var submitSpan, attempt, scriptedAttempt *tracepb.Span
	for _, s := range c.spans {
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.GetValue().GetStringValue()
		}
		switch {
		case s.Name == "jobdir.submit exec":
			submitSpan = s
		case s.Name == "jobdir.attempt exec" && attrs["jobdir.job.id"] == job.ID:
			attempt = s
		case s.Name == "jobdir.attempt exec" && attrs["jobdir.job.id"] == scripted:
			scriptedAttempt = s
		}
	}
	require.NotNil(t, submitSpan, "the serve process's submit span")
	require.NotNil(t, attempt, "the worker process's attempt span")
	require.Equal(t, traceID, hexOf(submitSpan.TraceId), "the submit is in the request's trace")
	require.Equal(t, requestSpan, hexOf(submitSpan.ParentSpanId), "the submit span is a child of the request's")
	require.Equal(t, traceID, hexOf(attempt.TraceId), "the attempt, in another process, is in the request's trace")
	require.Equal(t, hexOf(submitSpan.SpanId), hexOf(attempt.ParentSpanId), "the attempt span is a child of the submit span")
	require.Contains(t, logs.stdout, "tp=00-"+traceID+"-"+hexOf(attempt.SpanId)+"-01", "the program got the attempt's trace context")
	t.Logf("trace %s: request span %s <- jobdir.submit exec (serve, pid of its own) span %s <- jobdir.attempt exec (work) span %s; program's TRACEPARENT 00-%s-%s-01",
		traceID, requestSpan, hexOf(submitSpan.SpanId), hexOf(attempt.SpanId), traceID, hexOf(attempt.SpanId))
	require.NotNil(t, scriptedAttempt)
	require.Equal(t, scriptTrace, hexOf(scriptedAttempt.TraceId), "jobdir submit carries TRACEPARENT")
	require.Equal(t, scriptSpan, hexOf(scriptedAttempt.ParentSpanId))
}
