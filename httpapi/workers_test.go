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

// TestWorkersRoute: GET /v1/workers lists the live workers with the jobs
// each runs, the kinds whose queued jobs no worker runs, and the workers
// that ended lately.
func TestWorkersRoute(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("GET", "/v1/workers", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.JSONEq(t, `{"workers": [], "unserved_kinds": [], "unserved_queues": []}`, string(r.body))

	u, err := e.store.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w1", Host: "h", PID: 7, Kinds: []string{"mail"}, Concurrency: 2, Version: "v1"})
	require.NoError(t, err)
	defer u()
	mail, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "mail"})
	require.NoError(t, err)
	_, _, err = e.store.Submit(t.Context(), jobstore.Spec{Kind: "resize"})
	require.NoError(t, err)
	_, err = e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w1", Kinds: []string{"mail"}})
	require.NoError(t, err)

	r = e.do("GET", "/v1/workers", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var got httpapi.WorkersResponse
	strictDecode(t, r.body, &got)
	require.Len(t, got.Workers, 1)
	w := got.Workers[0]
	require.Equal(t, "w1", w.ID)
	require.Equal(t, "h", w.Host)
	require.Equal(t, 7, w.PID)
	require.Equal(t, []string{"mail"}, w.Kinds)
	require.Equal(t, 2, w.Concurrency)
	require.Equal(t, "v1", w.Version)
	require.Equal(t, []string{mail.ID}, w.Running)
	require.Equal(t, []string{"resize"}, got.UnservedKinds)
	require.Empty(t, got.UnservedQueues, "a worker of no queues takes every queue")

	r = e.doWith("GET", "/v1/workers", "", nil)
	r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)

	// Once it stopped, the worker is among the ended ones.
	require.NoError(t, u())
	r = e.do("GET", "/v1/workers", "")
	got = httpapi.WorkersResponse{}
	strictDecode(t, r.body, &got)
	require.Empty(t, got.Workers)
	require.Len(t, got.Ended, 1)
	require.Equal(t, "w1", got.Ended[0].ID)
	require.False(t, got.Ended[0].EndedAt.IsZero())
	require.Contains(t, string(r.body), `"ended":[{"id":"w1",`)
}

// plainClient is a jobstore.Client that keeps no list of workers.
type plainClient struct{ jobstore.Client }

// TestWorkersRouteWithoutRegistry: a store that keeps no list of workers
// gets 501 not_implemented.
func TestWorkersRouteWithoutRegistry(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(plainClient{store}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	r.apiError(t, http.StatusNotImplemented, httpapi.CodeNotImplemented)
}
