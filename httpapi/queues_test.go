package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

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
// gets 501 not_implemented.
func TestQueuesRoutesWithoutController(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(plainClient{store}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	for _, route := range []struct{ method, path string }{{"GET", "/v1/queues"}, {"POST", "/v1/queues/q/pause"}, {"POST", "/v1/queues/q/resume"}} {
		req := httptest.NewRequest(route.method, route.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		r.apiError(t, http.StatusNotImplemented, httpapi.CodeNotImplemented)
	}
}
