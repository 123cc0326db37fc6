package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// TestQueuesRoutes: GET /v1/queues lists the queues; pause and resume
// change a queue for the store's claims and answer with the queue; a bad
// name is refused and changes nothing; the job routes carry the queue.
func TestQueuesRoutes(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("GET", "/v1/queues", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.JSONEq(t, `{"queues": []}`, string(r.body))

	job := e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "emails"}`).job(t, http.StatusCreated)
	require.Equal(t, "emails", job.Queue)

	r = e.do("POST", "/v1/queues/emails/pause", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var q httpapi.QueueResponse
	strictDecode(t, r.body, &q)
	require.Equal(t, "emails", q.Queue.Queue)
	require.True(t, q.Queue.Paused)
	require.Equal(t, 1, q.Queue.Queued)
	_, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "a paused queue's job is not claimed")

	r = e.do("GET", "/v1/queues", "")
	var qs httpapi.QueuesResponse
	strictDecode(t, r.body, &qs)
	require.Len(t, qs.Queues, 1)
	require.True(t, qs.Queues[0].Paused)

	r = e.do("POST", "/v1/queues/emails/resume", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	strictDecode(t, r.body, &q)
	require.False(t, q.Queue.Paused)
	got, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, job.ID, got.ID)

	e.do("POST", "/v1/queues/bad%20name/pause", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "bad name"}`).apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
	e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": 7}`).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	r = e.do("GET", "/v1/jobs?queue=emails", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var page httpapi.ListResponse
	strictDecode(t, r.body, &page)
	require.Len(t, page.Jobs, 1)
	r = e.do("GET", "/v1/jobs?queue=other", "")
	strictDecode(t, r.body, &page)
	require.Empty(t, page.Jobs)
	e.do("GET", "/v1/jobs?queue=bad%20name", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)

	e.doWith("POST", "/v1/queues/emails/pause", "", nil).apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
	st, err := e.store.Queues(t.Context())
	require.NoError(t, err)
	require.False(t, st[0].Paused, "a refused request changes nothing")
}

// TestQueuesRoutesWithoutController: a store that keeps no queue settings
// (nor limits) gets 501 not_implemented, on every queues route.
func TestQueuesRoutesWithoutController(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(plainClient{store}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	for _, route := range []struct{ method, path string }{{"GET", "/v1/queues"}, {"POST", "/v1/queues/q/pause"}, {"POST", "/v1/queues/q/resume"}, {"POST", "/v1/queues/q/limit"}} {
		req := httptest.NewRequest(route.method, route.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		r.apiError(t, http.StatusNotImplemented, httpapi.CodeNotImplemented)
	}
}

// TestQueueMetrics: each queue that has jobs or settings has its queued
// and running jobs, whether it is paused, and its longest wait as gauges.
func TestQueueMetrics(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "mail"}`).job(t, http.StatusCreated)
	e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "mail"}`).job(t, http.StatusCreated)
	e.do("POST", "/v1/jobs", `{"kind": "k"}`).job(t, http.StatusCreated)
	_, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"mail"}})
	require.NoError(t, err)
	require.NoError(t, e.store.PauseQueue(t.Context(), "held"))
	require.NoError(t, e.store.SetQueueLimit(t.Context(), "mail", 4))
	require.NoError(t, e.store.SetPartitionLimit(t.Context(), "mail", 1))
	require.NoError(t, e.store.SetQueueRate(t.Context(), "mail", jobstore.Rate{N: 120, Per: time.Minute}))
	text := string(e.do("GET", "/metrics", "").body)
	for series, want := range map[string]float64{
		`jobdir_queue_jobs{queue="mail",state="queued"}`:     1,
		`jobdir_queue_jobs{queue="mail",state="running"}`:    1,
		`jobdir_queue_jobs{queue="default",state="queued"}`:  1,
		`jobdir_queue_jobs{queue="default",state="running"}`: 0,
		`jobdir_queue_jobs{queue="held",state="queued"}`:     0,
		`jobdir_queue_paused{queue="held"}`:                  1,
		`jobdir_queue_paused{queue="mail"}`:                  0,
		`jobdir_queue_oldest_due_age_seconds{queue="held"}`:  0,
		`jobdir_queue_limit{queue="mail"}`:                   4,
		`jobdir_queue_limit{queue="held"}`:                   0,
		`jobdir_queue_partition_limit{queue="mail"}`:         1,
		`jobdir_queue_partition_limit{queue="held"}`:         0,
		`jobdir_queue_rate_limit_per_second{queue="mail"}`:   2,
		`jobdir_queue_rate_limit_per_second{queue="held"}`:   0,
	} {
		require.Equal(t, want, metricValue(t, text, series), series)
	}
	require.Contains(t, text, `jobdir_queue_oldest_due_age_seconds{queue="mail"} `)
}

// TestQueueRoutesSlashInName: a queue whose name holds a slash is named in
// the path with it escaped.
func TestQueueRoutesSlashInName(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("POST", "/v1/queues/team%2Fa/pause", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var q httpapi.QueueResponse
	strictDecode(t, r.body, &q)
	require.Equal(t, "team/a", q.Queue.Queue)
	require.True(t, q.Queue.Paused)
}

// TestQueueLimitRoute: POST /v1/queues/{queue}/limit sets and clears a
// queue's limit, which the store's claims keep; a bad body or limit is
// refused and changes nothing.
func TestQueueLimitRoute(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("POST", "/v1/queues/deploys/limit", `{"limit": 1}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var q httpapi.QueueResponse
	strictDecode(t, r.body, &q)
	require.Equal(t, 1, q.Queue.Limit)
	for range 2 {
		e.do("POST", "/v1/jobs", `{"kind": "deploy", "queue": "deploys"}`).job(t, http.StatusCreated)
	}
	_, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "the limit holds")

	for _, body := range []string{`{}`, `{"limit": -1}`, `{"limit": 10001}`, `{"limit": "2"}`, `{"limit": 2, "rate": 1}`, `not json`} {
		e.do("POST", "/v1/queues/deploys/limit", body).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	}
	e.do("POST", "/v1/queues/bad%20name/limit", `{"limit": 1}`).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	qs, err := e.store.Queues(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, qs[0].Limit, "a refused request changes nothing")

	r = e.do("POST", "/v1/queues/deploys/limit", `{"limit": 0}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	_, err = e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err, "no limit any more")
}

// TestPartitionLimitRoute: POST /v1/queues/{queue}/limit with
// per_partition sets the queue's per-partition limit and leaves its limit
// as it is, and the other way round; a job's partition is submitted and
// sent with the job; a request with one bad value changes neither.
func TestPartitionLimitRoute(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("POST", "/v1/queues/mail/limit", `{"limit": 5}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r = e.do("POST", "/v1/queues/mail/limit", `{"per_partition": 1}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var q httpapi.QueueResponse
	strictDecode(t, r.body, &q)
	require.Equal(t, 5, q.Queue.Limit, "the limit is left as it was")
	require.Equal(t, 1, q.Queue.PerPartition)
	require.Contains(t, string(r.body), `"per_partition":1`)

	a := e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "mail", "partition": "customer-1"}`).job(t, http.StatusCreated)
	require.Equal(t, "customer-1", a.Partition)
	e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "mail", "partition": "customer-1"}`).job(t, http.StatusCreated)
	got := e.do("GET", "/v1/jobs/"+a.ID, "").job(t, http.StatusOK)
	require.Equal(t, "customer-1", got.Partition)
	_, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "one job of the partition at a time")

	e.do("POST", "/v1/jobs", `{"kind": "mail", "partition": "a\tb"}`).apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
	for _, body := range []string{`{"limit": 3, "per_partition": -1}`, `{"limit": -1, "per_partition": 3}`, `{"per_partition": "1"}`} {
		e.do("POST", "/v1/queues/mail/limit", body).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	}
	qs, err := e.store.Queues(t.Context())
	require.NoError(t, err)
	require.Equal(t, 5, qs[0].Limit, "a refused request changes nothing")
	require.Equal(t, 1, qs[0].PerPartition, "a refused request changes nothing")
	r = e.do("POST", "/v1/queues/mail/limit", `{"limit": 0, "per_partition": 0}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	strictDecode(t, r.body, &q)
	require.Zero(t, q.Queue.Limit)
	require.Zero(t, q.Queue.PerPartition)
}

// TestQueueRateRoute: POST /v1/queues/{queue}/limit with rate sets the
// queue's rate limit and leaves its other limits as they are; "off"
// removes it; a malformed rate is refused, in words, and changes nothing.
func TestQueueRateRoute(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("POST", "/v1/queues/mail/limit", `{"limit": 5, "rate": "2/1h"}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var q httpapi.QueueResponse
	strictDecode(t, r.body, &q)
	require.Equal(t, 5, q.Queue.Limit)
	require.Equal(t, jobstore.Rate{N: 2, Per: time.Hour}, q.Queue.Rate)
	require.Contains(t, string(r.body), `"rate":"2/1h"`)
	for range 3 {
		e.do("POST", "/v1/jobs", `{"kind": "mail", "queue": "mail"}`).job(t, http.StatusCreated)
	}
	for range 2 {
		_, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
	}
	_, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "two starts an hour")

	for _, body := range []string{`{"rate": "fast"}`, `{"rate": "0/1s"}`, `{"rate": "10/0s"}`, `{"rate": 10}`, `{"limit": 1, "rate": "x"}`} {
		b := e.do("POST", "/v1/queues/mail/limit", body)
		b.apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	}
	b := e.do("POST", "/v1/queues/mail/limit", `{"rate": "fast"}`)
	require.Contains(t, string(b.body), "N/DURATION", "the error says what to send")
	qs, err := e.store.Queues(t.Context())
	require.NoError(t, err)
	require.Equal(t, 5, qs[0].Limit, "a refused request changes nothing")
	require.Equal(t, jobstore.Rate{N: 2, Per: time.Hour}, qs[0].Rate, "a refused request changes nothing")

	r = e.do("POST", "/v1/queues/mail/limit", `{"rate": "off"}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	q = httpapi.QueueResponse{}
	strictDecode(t, r.body, &q)
	require.True(t, q.Queue.Rate.IsZero())
	require.Equal(t, 5, q.Queue.Limit, "the limit is left as it was")
	require.NotContains(t, string(r.body), `"rate"`)
	_, err = e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err, "no rate any more")
}
