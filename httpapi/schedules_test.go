package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// TestScheduleRoutes: a schedule added over HTTP is listed with its next
// tick, read, paused and resumed, run at once (a job keyed as a tick),
// replaced only when asked and removed; bad ones are refused in words and
// change nothing; a kind the server does not accept is refused as a
// submit of it would be.
func TestScheduleRoutes(t *testing.T) {
	e := newEnv(t, nil, nil)
	var list httpapi.SchedulesResponse
	strictDecode(t, e.do("GET", "/v1/schedules", "").body, &list)
	require.NotNil(t, list.Schedules)
	require.Empty(t, list.Schedules)

	body := `{"name":"nightly","spec":"0 3 * * *","tz":"Europe/Berlin","job":{"kind":"report.build","payload":{"full":true},"tags":["nightly"]},"catch_up":"all","catch_up_window":"48h","overlap":"skip"}`
	r := e.do("POST", "/v1/schedules", body)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Equal(t, "schedules/nightly", r.header.Get("Location"))
	var got httpapi.Schedule
	strictDecode(t, r.body, &got)
	require.Equal(t, "nightly", got.Name)
	require.Equal(t, "Europe/Berlin", got.TZ)
	require.Equal(t, "report.build", got.Job.Kind)
	require.Equal(t, []string{"nightly"}, got.Job.Tags)
	require.Equal(t, "all", got.CatchUp)
	require.Equal(t, httpapi.Duration(48*time.Hour), got.CatchUpWindow)
	require.Equal(t, "skip", got.Overlap)
	require.NotNil(t, got.Next)
	require.Equal(t, 2, got.Next.UTC().Hour(), "03:00 in Berlin in winter")
	require.Nil(t, got.Last)

	e.do("POST", "/v1/schedules", body).apiError(t, http.StatusConflict, httpapi.CodeScheduleExists)
	replaced := strings.Replace(body, `"spec":"0 3 * * *"`, `"spec":"@hourly","replace":true`, 1)
	r = e.do("POST", "/v1/schedules", replaced)
	require.Equal(t, http.StatusOK, r.status, "a replace answers 200: %s", r.body)
	strictDecode(t, e.do("GET", "/v1/schedules/nightly", "").body, &got)
	require.Equal(t, "@hourly", got.Spec)

	for name, bad := range map[string]struct {
		body   string
		status int
		code   string
		says   string
	}{
		"bad spec":     {`{"name":"x","spec":"61 * * * *","job":{"kind":"k"}}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "is not a cron expression"},
		"bad zone":     {`{"name":"x","spec":"@daily","tz":"Mars/Olympus","job":{"kind":"k"}}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "IANA name"},
		"keyed job":    {`{"name":"x","spec":"@daily","job":{"kind":"k","key":"k"}}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "keyed by its tick"},
		"bad name":     {`{"name":"a b","spec":"@daily","job":{"kind":"k"}}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "only letters, digits and ._-"},
		"bad window":   {`{"name":"x","spec":"@daily","job":{"kind":"k"},"catch_up_window":"long"}`, http.StatusBadRequest, httpapi.CodeInvalidInput, "not a duration"},
		"unknown key":  {`{"name":"x","spec":"@daily","job":{"kind":"k"},"every":"day"}`, http.StatusBadRequest, httpapi.CodeInvalidInput, "every"},
		"exec refused": {`{"name":"x","spec":"@daily","job":{"kind":"exec","payload":{"argv":["true"],"dir":"/"}}}`, http.StatusForbidden, httpapi.CodeKindNotAllowed, "exec"},
	} {
		ae := e.do("POST", "/v1/schedules", bad.body).apiError(t, bad.status, bad.code)
		require.Contains(t, ae.Message, bad.says, name)
		require.NotContains(t, ae.Message, "cron:", name)
	}
	strictDecode(t, e.do("GET", "/v1/schedules", "").body, &list)
	require.Len(t, list.Schedules, 1, "a refused schedule was added")

	r = e.do("POST", "/v1/schedules/nightly/pause", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	strictDecode(t, r.body, &got)
	require.True(t, got.Paused)
	require.Nil(t, got.Next, "a paused schedule has no next tick")
	strictDecode(t, e.do("POST", "/v1/schedules/nightly/resume", "").body, &got)
	require.False(t, got.Paused)

	j := e.do("POST", "/v1/schedules/nightly/run", "").job(t, http.StatusCreated)
	require.True(t, strings.HasPrefix(j.Key, "schedule:nightly:"), j.Key)
	require.Equal(t, "report.build", j.Kind)

	e.do("GET", "/v1/schedules/missing", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("POST", "/v1/schedules/missing/run", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("GET", "/v1/schedules/a%20b", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	r = e.do("DELETE", "/v1/schedules/nightly", "")
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	e.do("DELETE", "/v1/schedules/nightly", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, st.Counts[jobstore.StateQueued], "the run's job stays")

	e.doWith("GET", "/v1/schedules", "", nil).apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
}

// TestScheduleRoutesWithoutScheduler: a store that keeps no schedules gets
// 501 not_implemented.
func TestScheduleRoutesWithoutScheduler(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(plainClient{store}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	for _, req := range []*http.Request{httptest.NewRequest("GET", "/v1/schedules", nil),
		httptest.NewRequest("POST", "/v1/schedules", strings.NewReader(`{"name":"x","spec":"@daily","job":{"kind":"k"}}`))} {
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}.apiError(t, http.StatusNotImplemented, httpapi.CodeNotImplemented)
	}
}
