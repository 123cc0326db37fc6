package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// metricValue returns the value of the sample whose name and labels (as
// written in the exposition, sorted) are series, failing if it is absent.
func metricValue(t *testing.T, exposition, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(exposition)
	require.NotNil(t, m, "no sample %s in:\n%s", series, exposition)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

func TestMetricsAfterTraffic(t *testing.T) {
	e := newEnv(t, nil, nil)

	ctx, stop := context.WithCancel(t.Context())
	r := runner.New(e.store, &runner.Options{Concurrency: 2, Metrics: e.api})
	r.Handle("ok", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		return json.RawMessage(`"done"`), nil
	}))
	r.Handle("bad", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		return nil, runner.Permanent(errors.New("refused"))
	}))
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-ran)
	})

	a, b, c := e.submit("ok", ""), e.submit("ok", ""), e.submit("bad", "")
	e.do("POST", "/v1/jobs", `{"kind":"ok","key":"`+a.Key+`x"}`) // another ok job
	e.do("POST", "/v1/jobs", `{"kind":"exec"}`)                  // 403
	e.do("GET", "/v1/jobs/nope", "")                             // 400
	for _, j := range []jobstore.Job{a, b} {
		got := e.do("GET", "/v1/jobs/"+j.ID+"/wait?timeout=30s", "").job(t, http.StatusOK)
		require.Equal(t, jobstore.StateSucceeded, got.State)
	}
	got := e.do("GET", "/v1/jobs/"+c.ID+"/wait?timeout=30s", "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateFailed, got.State)
	// The fourth job: wait for all three ok jobs to finish.
	require.Eventually(t, func() bool {
		st, err := e.store.Stats(t.Context())
		return err == nil && st.Counts[jobstore.StateSucceeded] == 3
	}, 30*time.Second, 5*time.Millisecond)
	queued := e.submit("never-runs", "")
	e.do("POST", "/v1/jobs/"+queued.ID+"/cancel", "").job(t, http.StatusOK)
	nr := e.submit("never-runs", "")
	// A job that waits for it.
	e.do("POST", "/v1/jobs", `{"kind":"later","after":["`+nr.ID+`"]}`).job(t, http.StatusCreated)

	resp := e.do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, resp.status)
	require.Contains(t, resp.header.Get("Content-Type"), "text/plain")
	text := string(resp.body)

	for series, want := range map[string]float64{
		`jobdir_store_up`:                                                          1,
		`jobdir_workers`:                                                           1,
		`jobdir_unserved_jobs{kind="never-runs"}`:                                  1,
		`jobdir_jobs{state="waiting"}`:                                             1,
		`jobdir_jobs{state="queued"}`:                                              1,
		`jobdir_jobs{state="running"}`:                                             0,
		`jobdir_jobs{state="succeeded"}`:                                           3,
		`jobdir_jobs{state="failed"}`:                                              1,
		`jobdir_jobs{state="canceled"}`:                                            1,
		`jobdir_jobs_by_kind{kind="ok",state="succeeded"}`:                         3,
		`jobdir_jobs_by_kind{kind="ok",state="queued"}`:                            0,
		`jobdir_jobs_by_kind{kind="bad",state="failed"}`:                           1,
		`jobdir_jobs_by_kind{kind="never-runs",state="queued"}`:                    1,
		`jobdir_jobs_by_kind{kind="never-runs",state="canceled"}`:                  1,
		`jobdir_jobs_by_kind{kind="later",state="waiting"}`:                        1,
		`jobdir_jobs_by_kind{kind="ok",state="waiting"}`:                           0,
		`jobdir_jobs_submitted_total{kind="ok"}`:                                   3,
		`jobdir_jobs_submitted_total{kind="bad"}`:                                  1,
		`jobdir_jobs_submitted_total{kind="never-runs"}`:                           2,
		`jobdir_jobs_claimed_total{kind="ok"}`:                                     3,
		`jobdir_jobs_claimed_total{kind="bad"}`:                                    1,
		`jobdir_jobs_completed_total{kind="ok"}`:                                   3,
		`jobdir_jobs_failed_total{kind="bad"}`:                                     1,
		`jobdir_jobs_canceled_total{kind="never-runs",via="http"}`:                 1,
		`jobdir_claim_latency_seconds_count{kind="ok"}`:                            3,
		`jobdir_run_duration_seconds_count{kind="ok",state="succeeded"}`:           3,
		`jobdir_run_duration_seconds_count{kind="bad",state="failed"}`:             1,
		`jobdir_http_requests_total{code="201",route="POST /v1/jobs"}`:             7,
		`jobdir_http_requests_total{code="403",route="POST /v1/jobs"}`:             1,
		`jobdir_http_requests_total{code="400",route="GET /v1/jobs/{id}"}`:         1,
		`jobdir_http_requests_total{code="200",route="GET /v1/jobs/{id}/wait"}`:    3,
		`jobdir_http_requests_total{code="200",route="POST /v1/jobs/{id}/cancel"}`: 1,
	} {
		require.Equal(t, want, metricValue(t, text, series), series)
	}
	require.Contains(t, text, `jobdir_claim_latency_seconds_bucket{kind="ok",le="+Inf"} 3`)
	require.Contains(t, text, "jobdir_oldest_queued_age_seconds ")
	require.Contains(t, text, `jobdir_oldest_queued_age_by_kind_seconds{kind="never-runs"} `, "the kind with a due job")
	require.NotContains(t, text, `jobdir_oldest_queued_age_by_kind_seconds{kind="ok"}`, "no job of it is due")
	require.NotContains(t, text, `jobdir_unserved_jobs{kind="ok"}`, "a worker runs it")
	require.Contains(t, text, "go_goroutines ", "the private registry holds the Go collector")
	require.Contains(t, text, `jobdir_http_request_duration_seconds_count{route="POST /v1/jobs"}`)
}

func TestMetricsWhenTheStoreIsClosed(t *testing.T) {
	e := newEnv(t, nil, nil)
	require.NoError(t, e.store.Close())
	resp := e.do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, resp.status, "a failing store must not fail the whole scrape")
	require.Equal(t, 0.0, metricValue(t, string(resp.body), "jobdir_store_up"))
	require.NotContains(t, string(resp.body), `jobdir_jobs{state=`)
}

// TestCountersOfKnownKindsStartAtZero: the per-kind counters of the kinds
// a Server is told of (its allowed kinds, and KnownKinds: the kinds of a
// runner in the same process) are in the first scrape, at 0, before any
// job of them; a kind nobody named appears with its first event.
func TestCountersOfKnownKindsStartAtZero(t *testing.T) {
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, AllowedKinds: []string{"email", httpapi.AnyKind}}, nil)
	e.api.KnownKinds("resize", "not a kind!")
	body := string(e.do("GET", "/metrics", "").body)
	for _, kind := range []string{"email", "resize"} {
		for _, series := range []string{
			`jobdir_jobs_submitted_total{kind="` + kind + `"}`,
			`jobdir_jobs_claimed_total{kind="` + kind + `"}`,
			`jobdir_jobs_completed_total{kind="` + kind + `"}`,
			`jobdir_jobs_failed_total{kind="` + kind + `"}`,
			`jobdir_jobs_retried_total{kind="` + kind + `"}`,
			`jobdir_jobs_canceled_total{kind="` + kind + `",via="http"}`,
			`jobdir_jobs_canceled_total{kind="` + kind + `",via="runner"}`,
			`jobdir_claim_latency_seconds_count{kind="` + kind + `"}`,
		} {
			require.Zero(t, metricValue(t, body, series), series)
		}
	}
	require.NotContains(t, body, `kind="not a kind!"`)
	require.NotContains(t, body, `kind="other"`)
	e.submit("other", "")
	body = string(e.do("GET", "/metrics", "").body)
	require.Equal(t, 1.0, metricValue(t, body, `jobdir_jobs_submitted_total{kind="other"}`))
}

// TestKindLabelsAreBounded: the kind label takes at most 100 values in a
// process; the jobs of further kinds are counted under "_other", in the
// counters and in jobdir_jobs_by_kind alike.
func TestKindLabelsAreBounded(t *testing.T) {
	e := newEnv(t, nil, nil)
	const kinds = 105
	for i := range kinds {
		e.submit(fmt.Sprintf("kind-%03d", i), "")
	}
	text := string(e.do("GET", "/metrics", "").body)
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^jobdir_jobs_submitted_total\{kind="([^"]+)"\}`).FindAllStringSubmatch(text, -1) {
		labels[m[1]] = true
	}
	require.Len(t, labels, 101, "100 kinds and _other")
	require.True(t, labels["_other"])
	require.Equal(t, float64(kinds-100), metricValue(t, text, `jobdir_jobs_submitted_total{kind="_other"}`))
	require.Equal(t, float64(kinds-100), metricValue(t, text, `jobdir_jobs_by_kind{kind="_other",state="queued"}`))
	require.Equal(t, float64(1), metricValue(t, text, `jobdir_jobs_by_kind{kind="kind-000",state="queued"}`))
	require.Equal(t, float64(0), metricValue(t, text, `jobdir_jobs_by_kind{kind="kind-000",state="running"}`))
	require.Contains(t, text, `jobdir_oldest_queued_age_by_kind_seconds{kind="_other"} `)
	require.Contains(t, text, `jobdir_oldest_queued_age_by_kind_seconds{kind="kind-000"} `)
	require.NotContains(t, text, `jobdir_oldest_queued_age_by_kind_seconds{kind="kind-104"}`, "past the bound")
}

// TestScheduleMetrics: the ticks a runner of the process fired, their lag
// and the ticks dropped are series by schedule, whose label is bounded as
// the kind label is.
func TestScheduleMetrics(t *testing.T) {
	e := newEnv(t, nil, nil)
	var sm runner.ScheduleMetrics = e.api
	sm.ObserveTick("nightly", 1500*time.Millisecond)
	sm.ObserveTick("nightly", 2*time.Millisecond)
	sm.ObserveTicksSkipped("nightly", 9)
	for i := range 105 {
		sm.ObserveTick(fmt.Sprintf("s-%03d", i), 0)
	}
	text := string(e.do("GET", "/metrics", "").body)
	require.Equal(t, float64(2), metricValue(t, text, `jobdir_schedule_ticks_total{schedule="nightly"}`))
	require.Equal(t, 0.002, metricValue(t, text, `jobdir_schedule_tick_lag_seconds{schedule="nightly"}`), "the latest tick's lag")
	require.Equal(t, float64(9), metricValue(t, text, `jobdir_schedule_ticks_skipped_total{schedule="nightly"}`))
	require.Equal(t, float64(6), metricValue(t, text, `jobdir_schedule_ticks_total{schedule="_other"}`), "past 100 schedules")
}
