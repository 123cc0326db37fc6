package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// batchResult is one element of the batch submit's answer, its job as
// the jobstore.Job it describes.
type batchResult struct {
	Job     jobstore.Job
	Created bool
}

// batch posts body to the batch route and decodes the answer strictly
// into httpapi.BatchResponse, requiring 200.
func (e *env) batch(body string) []batchResult {
	e.t.Helper()
	r := e.do("POST", "/v1/jobs/batch", body)
	require.Equal(e.t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(e.t, "application/json", r.header.Get("Content-Type"))
	var out httpapi.BatchResponse
	strictDecode(e.t, r.body, &out)
	require.NotNil(e.t, out.Results, "results must be an array, never null: %s", r.body)
	res := make([]batchResult, len(out.Results))
	for i, br := range out.Results {
		j, err := br.Job.ToJob()
		require.NoError(e.t, err)
		res[i] = batchResult{Job: j, Created: br.Created}
	}
	return res
}

// batchOf returns a batch body holding the given job objects.
func batchOf(jobs ...string) string {
	return `{"jobs":[` + strings.Join(jobs, ",") + `]}`
}

// requireQueued requires the store to hold n queued jobs.
func requireQueued(t *testing.T, store jobstore.Store, n int) {
	t.Helper()
	st, err := store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, n, st.Counts[jobstore.StateQueued])
}

func TestSubmitBatch(t *testing.T) {
	e := newEnv(t, nil, nil)
	existing := e.submit("report", "nightly")

	res := e.batch(batchOf(
		`{"kind":"email.send","key":"welcome-1","payload":{"to":"a@example.com"},"priority":5,"timeout":"30s"}`,
		`{"kind":"report","key":"nightly","payload":{"ignored":true}}`,
		`{"kind":"email.send","payload":null}`,
		`{"kind":"email.send","key":"welcome-1","payload":{"to":"b@example.com"}}`,
		`{"kind":"resize","run_at":"2030-01-01T09:00:00+01:00"}`,
	))
	require.Len(t, res, 5)
	for i, want := range []bool{true, false, true, false, true} {
		require.Equal(t, want, res[i].Created, "results[%d]", i)
	}
	require.Equal(t, "email.send", res[0].Job.Kind)
	require.JSONEq(t, `{"to":"a@example.com"}`, string(res[0].Job.Payload))
	require.Equal(t, 5, res[0].Job.Priority)
	require.Equal(t, jobstore.StateQueued, res[0].Job.State)

	// A key that names an existing job returns it, untouched.
	require.Equal(t, existing.ID, res[1].Job.ID)
	require.Empty(t, res[1].Job.Payload)
	// A key shared within the batch: one job, created by the first spec.
	require.Equal(t, res[0].Job.ID, res[3].Job.ID)
	require.JSONEq(t, `{"to":"a@example.com"}`, string(res[3].Job.Payload))

	require.Empty(t, res[2].Job.Payload)
	require.Equal(t, "resize", res[4].Job.Kind)
	require.Equal(t, "2030-01-01T08:00:00Z", res[4].Job.RunAt.Format("2006-01-02T15:04:05Z07:00"))

	// Created jobs have distinct IDs, in request order, and are the store's
	// records exactly.
	require.Less(t, res[0].Job.ID, res[2].Job.ID)
	require.Less(t, res[2].Job.ID, res[4].Job.ID)
	for _, i := range []int{0, 2, 4} {
		stored, err := e.store.Get(t.Context(), res[i].Job.ID)
		require.NoError(t, err)
		require.Equal(t, stored.ID, res[i].Job.ID)
		require.Equal(t, stored.Kind, res[i].Job.Kind)
	}
	requireQueued(t, e.store, 4)

	t.Run("the same batch again creates nothing new for its keys", func(t *testing.T) {
		again := e.batch(batchOf(`{"kind":"email.send","key":"welcome-1"}`, `{"kind":"report","key":"nightly"}`))
		require.Equal(t, res[0].Job.ID, again[0].Job.ID)
		require.False(t, again[0].Created)
		require.Equal(t, existing.ID, again[1].Job.ID)
		require.False(t, again[1].Created)
		requireQueued(t, e.store, 4)
	})
}

func TestSubmitBatchEmpty(t *testing.T) {
	e := newEnv(t, nil, nil)
	require.Empty(t, e.batch(`{"jobs":[]}`))
	r := e.do("POST", "/v1/jobs/batch", `{"jobs":[]}`)
	require.JSONEq(t, `{"results":[]}`, string(r.body))
	requireQueued(t, e.store, 0)
}

func TestSubmitBatchRefusesTheWholeBatch(t *testing.T) {
	mustHaveTo := func(p json.RawMessage) error {
		var v struct{ To string }
		if err := json.Unmarshal(p, &v); err != nil || v.To == "" {
			return fmt.Errorf("%w: payload needs a \"to\"", jobstore.ErrInvalidInput)
		}
		return nil
	}
	e := newEnv(t, &httpapi.Options{
		Tokens:            []string{testToken},
		MaxBodyBytes:      4096,
		MaxBatchBodyBytes: 1 << 20,
		AllowedKinds:      []string{"email.send", "k"},
		Validators:        map[string]func(json.RawMessage) error{"email.send": mustHaveTo},
	}, &memstore.Options{MaxPayload: 1024})
	ok := `{"kind":"k"}`
	bigPayload := `{"kind":"k","payload":"` + strings.Repeat("x", 2000) + `"}`
	tooMany := batchOf(strings.TrimSuffix(strings.Repeat(ok+",", jobstore.MaxBatch+1), ","))
	tooLong := batchOf(strings.TrimSuffix(strings.Repeat(bigPayload+",", 600), ","))

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		message    string // a part of the message, "" for no check
	}{
		{"empty body", "", http.StatusBadRequest, httpapi.CodeInvalidInput, "empty"},
		{"not an object", `[{"kind":"k"}]`, http.StatusBadRequest, httpapi.CodeInvalidInput, ""},
		{"no jobs field", `{}`, http.StatusBadRequest, httpapi.CodeInvalidInput, `"jobs"`},
		{"jobs null", `{"jobs":null}`, http.StatusBadRequest, httpapi.CodeInvalidInput, `"jobs"`},
		{"a single spec", ok, http.StatusBadRequest, httpapi.CodeInvalidInput, "unknown field"},
		{"unknown top-level field", `{"jobs":[],"job":{}}`, http.StatusBadRequest, httpapi.CodeInvalidInput, "unknown field"},
		{"trailing value", `{"jobs":[]} {"jobs":[]}`, http.StatusBadRequest, httpapi.CodeInvalidInput, ""},
		{"unknown field in a spec", batchOf(ok, ok, `{"kind":"k","kinds":"x"}`), http.StatusBadRequest, httpapi.CodeInvalidInput, "jobs[2]: "},
		{"wrong type in a spec", batchOf(ok, `{"kind":"k","priority":"high"}`), http.StatusBadRequest, httpapi.CodeInvalidInput, "jobs[1]: "},
		{"a spec that is not an object", batchOf(ok, `"k"`), http.StatusBadRequest, httpapi.CodeInvalidInput, "jobs[1]: "},
		{"bad run_at", batchOf(ok, `{"kind":"k","run_at":"tomorrow"}`), http.StatusBadRequest, httpapi.CodeInvalidInput, "jobs[1]: "},
		{"bad timeout", batchOf(ok, ok, ok, `{"kind":"k","timeout":"30"}`), http.StatusBadRequest, httpapi.CodeInvalidInput, "jobs[3]: "},
		{"no kind", batchOf(ok, `{"payload":1}`), http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "jobs[1]: "},
		{"bad kind", batchOf(ok, `{"kind":"a b"}`), http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "jobs[1]: "},
		{"priority out of range", batchOf(ok, ok, `{"kind":"k","priority":5000}`), http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "jobs[2]: "},
		{"bad key", batchOf(ok, `{"kind":"k","key":"a\u0000b"}`), http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "jobs[1]: "},
		{"negative timeout", batchOf(ok, `{"kind":"k","timeout":"-1s"}`), http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "jobs[1]: "},
		{"kind not allowed", batchOf(ok, `{"kind":"other"}`), http.StatusForbidden, httpapi.CodeKindNotAllowed, `jobs[1]: this server does not accept jobs of kind "other"`},
		{"exec not allowed", batchOf(ok, ok, `{"kind":"exec","payload":{"argv":["true"]}}`), http.StatusForbidden, httpapi.CodeKindNotAllowed, "jobs[2]: "},
		{"validator refuses", batchOf(`{"kind":"email.send","payload":{"to":"a@example.com"}}`, `{"kind":"email.send","payload":{}}`),
			http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, `jobs[1]: invalid payload for kind "email.send"`},
		{"the first bad spec is the one named", batchOf(ok, `{"kind":"other"}`, `{"kind":"k","priority":5000}`), http.StatusForbidden, httpapi.CodeKindNotAllowed, "jobs[1]: "},
		{"payload over the store limit", batchOf(ok, bigPayload), http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge, "jobs[1]: "},
		{"too many specs", tooMany, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, fmt.Sprint(jobstore.MaxBatch)},
		{"body over MaxBatchBodyBytes", tooLong, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := e.do("POST", "/v1/jobs/batch", tc.body).apiError(t, tc.status, tc.code)
			require.Contains(t, ae.Message, tc.message)
			requireQueued(t, e.store, 0)
		})
	}

	t.Run("a batch over the single body limit is accepted", func(t *testing.T) {
		specs := make([]string, 20)
		for i := range specs {
			specs[i] = `{"kind":"k","payload":"` + strings.Repeat("y", 500) + `"}`
		}
		body := batchOf(specs...)
		require.Greater(t, len(body), 4096)
		require.Len(t, e.batch(body), 20)
		requireQueued(t, e.store, 20)
	})
}

func TestSubmitBatchNeedsAuth(t *testing.T) {
	e := newEnv(t, nil, nil)
	body := batchOf(`{"kind":"k"}`)
	r := e.doWith("POST", "/v1/jobs/batch", body, nil)
	r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
	require.Equal(t, `Bearer realm="jobdir"`, r.header.Get("WWW-Authenticate"))
	e.doWith("POST", "/v1/jobs/batch", body, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer wrong-token")
	}).apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
	e.doWith("POST", "/v1/jobs/batch", body, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+testToken)
		r.Header.Set("Sec-Fetch-Site", "cross-site")
	}).apiError(t, http.StatusForbidden, httpapi.CodeForbidden)
	requireQueued(t, e.store, 0)

	require.Len(t, e.batch(body), 1)
	requireQueued(t, e.store, 1)
}

func TestSubmitBatchMethods(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("DELETE", "/v1/jobs/batch", "")
	r.apiError(t, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed)
	require.Contains(t, r.header.Get("Allow"), "POST")
	// GET still means the job with that ID, which "batch" is not.
	e.do("GET", "/v1/jobs/batch", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
}

func TestSubmitBatchMetrics(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.submit("report", "nightly")
	e.batch(batchOf(`{"kind":"a"}`, `{"kind":"a"}`, `{"kind":"b","key":"x"}`, `{"kind":"b","key":"x"}`, `{"kind":"report","key":"nightly"}`))
	e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"a"}`, `{"kind":"exec"}`)) // 403
	e.batch(`{"jobs":[]}`)

	text := string(e.do("GET", "/metrics", "").body)
	for series, want := range map[string]float64{
		`jobdir_jobs_submitted_total{kind="a"}`:                                   2,
		`jobdir_jobs_submitted_total{kind="b"}`:                                   1,
		`jobdir_jobs_submitted_total{kind="report"}`:                              1,
		`jobdir_http_requests_total{code="200",route="POST /v1/jobs/batch"}`:      2,
		`jobdir_http_requests_total{code="403",route="POST /v1/jobs/batch"}`:      1,
		`jobdir_http_request_duration_seconds_count{route="POST /v1/jobs/batch"}`: 3,
	} {
		require.Equal(t, want, metricValue(t, text, series), series)
	}
}
