package httpapi_test

import (
	"fmt"
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

// TestDependenciesOverHTTP: a submit's after, after_keys and after_any
// come back with the job, which is waiting; ?state=waiting lists it; the
// dependents route names it; a dependency that does not exist is a 422
// that names it, and creates nothing.
func TestDependenciesOverHTTP(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.submit("build", "build-1")
	b := e.do("POST", "/v1/jobs", fmt.Sprintf(`{"kind":"deploy","after":[%q],"after_keys":["build-1"],"after_any":true}`, a.ID)).job(t, http.StatusCreated)
	require.Equal(t, jobstore.StateWaiting, b.State)
	require.Equal(t, []string{a.ID}, b.After, "an ID and a key of one job are one dependency")
	require.True(t, b.AfterAny)

	var page httpapi.ListResponse
	r := e.do("GET", "/v1/jobs?state=waiting", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	strictDecode(t, r.body, &page)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, b.ID, page.Jobs[0].ID)
	require.Equal(t, []string{a.ID}, page.Jobs[0].After)

	var deps httpapi.DependentsResponse
	r = e.do("GET", "/v1/jobs/"+a.ID+"/dependents", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	strictDecode(t, r.body, &deps)
	require.Len(t, deps.Jobs, 1)
	require.Equal(t, b.ID, deps.Jobs[0].ID)
	r = e.do("GET", "/v1/jobs/"+b.ID+"/dependents", "")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"jobs":[]}`, string(r.body), "no dependents is an empty list, never null")
	e.do("GET", "/v1/jobs/"+jobstore.NewID(time.Now())+"/dependents", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("GET", "/v1/jobs/nope/dependents", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)

	missing := jobstore.NewID(time.Now())
	for _, tc := range []struct{ name, body, msg string }{
		{"unknown ID", fmt.Sprintf(`{"kind":"k","after":[%q]}`, missing), missing},
		{"unknown key", `{"kind":"k","after_keys":["no-such-key"]}`, "no-such-key"},
		{"an index in a single submit", `{"kind":"k","after_specs":[0]}`, "only a spec of a batch"},
		{"unknown batch", `{"kind":"k","after_batch":"nope"}`, "nope"},
		{"bad batch name", `{"kind":"k","batch":"a b"}`, "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := e.do("POST", "/v1/jobs", tc.body).apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
			require.Contains(t, ae.Message, tc.msg)
			require.NotContains(t, ae.Message, "memstore")
		})
	}
	// A malformed ID is a bad request, as it is in a path.
	ae := e.do("POST", "/v1/jobs", `{"kind":"k","after":["not-an-id"]}`).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	require.Contains(t, ae.Message, `after: `)
	require.Contains(t, ae.Message, `"not-an-id"`)
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, st.Counts[jobstore.StateQueued]+st.Counts[jobstore.StateWaiting], "a refused submit creates nothing")

	// Wrong types name the field.
	for _, tc := range []struct{ body, msg string }{
		{`{"kind":"k","after":"01M8M7AB6JD9EYQ6QDAWZ282C2"}`, "after is a string, not a list of strings"},
		{`{"kind":"k","after":[7]}`, "an ID of after is the number 7, not a string"},
		{`{"kind":"k","after_keys":[true]}`, "a key of after_keys is a boolean, not a string"},
		{`{"kind":"k","after_specs":["0"]}`, "an index of after_specs is a string, not an integer"},
		{`{"kind":"k","after_any":"yes"}`, "after_any is a string, not a boolean: send true or false"},
		{`{"kind":"k","batch":1}`, "batch is the number 1, not a string"},
	} {
		ae := e.do("POST", "/v1/jobs", tc.body).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
		require.Contains(t, ae.Message, tc.msg)
	}
}

// TestGraphInOneBatchSubmit: the jobs of a batch submit name earlier ones
// by index and by key; a job that names a later one refuses the batch,
// with a message that names it as the request does.
func TestGraphInOneBatchSubmit(t *testing.T) {
	e := newEnv(t, nil, nil)
	res := e.batch(batchOf(
		`{"kind":"build","key":"b-1"}`,
		`{"kind":"test","after_specs":[0]}`,
		`{"kind":"lint","after_keys":["b-1"]}`,
		`{"kind":"deploy","after_specs":[1,2]}`,
	))
	require.Len(t, res, 4)
	require.Equal(t, jobstore.StateQueued, res[0].Job.State)
	require.Equal(t, []string{res[0].Job.ID}, res[1].Job.After)
	require.Equal(t, []string{res[0].Job.ID}, res[2].Job.After)
	require.Equal(t, []string{res[1].Job.ID, res[2].Job.ID}, res[3].Job.After)
	for _, r := range res[1:] {
		require.Equal(t, jobstore.StateWaiting, r.Job.State)
	}

	for _, tc := range []struct {
		name, body, msg string
	}{
		{"a later index", batchOf(`{"kind":"a"}`, `{"kind":"b","after_specs":[1]}`), "jobs[1]: after_specs[0] is 1: a job can only name an earlier job of its batch, by its index in jobs (0 to 0)"},
		{"an index from the first job", batchOf(`{"kind":"a","after_specs":[0]}`), "jobs[0]: after_specs[0] is 0: the first job of a batch has no earlier job to name"},
		{"a key of a later job", batchOf(`{"kind":"a"}`, `{"kind":"b","after_keys":["later"]}`, `{"kind":"c","key":"later"}`), "jobs[1]: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := e.do("POST", "/v1/jobs/batch", tc.body).apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
			require.Contains(t, ae.Message, tc.msg)
			require.NotContains(t, ae.Message, "memstore")
			require.NotContains(t, ae.Message, "spec 1")
		})
	}
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 4, st.Counts[jobstore.StateQueued]+st.Counts[jobstore.StateWaiting], "a refused batch creates nothing")
}

// TestBatchesOverHTTP: GET /v1/batches/{name} counts a batch's jobs by
// state, says whether a callback closed it and names its callbacks; a
// submit to a closed batch is a 409 batch_closed; an unknown batch is a
// 404 and a bad name a 400.
func TestBatchesOverHTTP(t *testing.T) {
	e := newEnv(t, nil, nil)
	res := e.batch(batchOf(`{"kind":"part","batch":"exports"}`, `{"kind":"part","batch":"exports"}`))
	r := e.do("GET", "/v1/batches/exports", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"batch":"exports","total":2,"states":{"queued":2},"closed":false}`, string(r.body))

	cb := e.do("POST", "/v1/jobs", `{"kind":"merge","after_batch":"exports"}`).job(t, http.StatusCreated)
	require.Equal(t, jobstore.StateWaiting, cb.State)
	require.Equal(t, "exports", cb.AfterBatch)
	require.True(t, cb.AfterAny)
	require.ElementsMatch(t, []string{res[0].Job.ID, res[1].Job.ID}, cb.After)
	r = e.do("GET", "/v1/batches/exports", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, fmt.Sprintf(`{"batch":"exports","total":2,"states":{"queued":2},"closed":true,"callbacks":[%q]}`, cb.ID), string(r.body))

	ae := e.do("POST", "/v1/jobs", `{"kind":"part","batch":"exports"}`).apiError(t, http.StatusConflict, httpapi.CodeBatchClosed)
	require.Equal(t, `batch "exports" has its callback already; no job may join it`, ae.Message)
	ae = e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"x"}`, `{"kind":"part","batch":"exports"}`)).apiError(t, http.StatusConflict, httpapi.CodeBatchClosed)
	require.Contains(t, ae.Message, `jobs[1]: batch "exports" has its callback already`)

	e.do("GET", "/v1/batches/nope", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("GET", "/v1/batches/a%20b", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
}

// TestRetryOfADependentWhoseDependencyFailed: retrying a job that a
// failed dependency canceled is a 409 dependency_failed that names the
// dependency in plain words; once the dependency is retried, so can the
// job be, and it waits again.
func TestRetryOfADependentWhoseDependencyFailed(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := t.Context()
	a := e.submit("a", "")
	b := e.do("POST", "/v1/jobs", fmt.Sprintf(`{"kind":"b","after":[%q]}`, a.ID)).job(t, http.StatusCreated)
	c, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"a"}})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "boom", Permanent: true})
	require.NoError(t, err)
	got := e.do("GET", "/v1/jobs/"+b.ID, "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateCanceled, got.State)
	require.Equal(t, "dependency "+a.ID+" failed", got.LastError)

	ae := e.do("POST", "/v1/jobs/"+b.ID+"/retry", "").apiError(t, http.StatusConflict, httpapi.CodeDependencyFailed)
	require.Equal(t, "job "+b.ID+": dependency "+a.ID+" failed; retry that job first", ae.Message)

	e.do("POST", "/v1/jobs/"+a.ID+"/retry", "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateWaiting, e.do("POST", "/v1/jobs/"+b.ID+"/retry", "").job(t, http.StatusOK).State)
}

// TestDependencyRoutesWithoutReader: a store that keeps no dependencies
// gets 501 not_implemented on the dependents and batches routes.
func TestDependencyRoutesWithoutReader(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(plainClient{store}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	for _, path := range []string{"/v1/jobs/" + jobstore.NewID(time.Now()) + "/dependents", "/v1/batches/b"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}.apiError(t, http.StatusNotImplemented, httpapi.CodeNotImplemented)
	}
}
