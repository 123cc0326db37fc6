package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// TestMetricsPassPromtool: the exposition of /metrics, after traffic that
// makes every jobdir series appear (submits, a cancel, a refused request,
// a runner's claims and outcomes, a dashboard-free scrape), passes
// Prometheus's own check, promtool check metrics (Debian's prometheus
// package, which .ci/run installs): names, types, units and help text.
// It is skipped without promtool, and fails without it under CI=true.
func TestMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed, and CI=true: %v", err)
		}
		t.Skip("promtool is not installed (apt-get install -y prometheus)")
	}
	e := newEnv(t, nil, nil)
	ctx, stop := context.WithCancel(t.Context())
	r := runner.New(e.store, &runner.Options{Concurrency: 2, Metrics: e.api})
	r.Handle("ok", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		return json.RawMessage(`"done"`), nil
	}))
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-ran)
	})
	j := e.submit("ok", "")
	e.do("GET", "/v1/jobs/"+j.ID+"/wait?timeout=30s", "").job(t, http.StatusOK)
	queued := e.submit("never-runs", "")
	e.do("POST", "/v1/jobs/"+queued.ID+"/cancel", "").job(t, http.StatusOK)
	e.do("POST", "/v1/jobs", `{"kind":"exec"}`) // 403

	resp := e.do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, resp.status)
	require.Contains(t, string(resp.body), "jobdir_jobs_by_kind{")
	cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(resp.body)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "promtool check metrics")
}
