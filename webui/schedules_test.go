package webui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestSchedulesPage: the schedules page lists each schedule with its spec,
// zone, job, state, next and last ticks and policies; pauses and resumes
// it; runs it now (a job keyed as a tick) where the server submits its
// kind, and not otherwise; a bad name, an unknown action and a request
// without the session's token are refused.
func TestSchedulesPage(t *testing.T) {
	e := newEnv(t, nil)
	csrf := e.signIn(testToken)
	ctx := t.Context()
	r := e.do("GET", "/ui/schedules", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `id="no-schedules"`)
	require.Contains(t, r.body, `href="/ui/schedules" aria-current="page"`)

	_, err := e.store.AddSchedule(ctx, jobstore.Schedule{Name: "nightly", Spec: "0 3 * * *", TZ: "Europe/Berlin",
		Job: jobstore.Spec{Kind: "report.build", Payload: json.RawMessage(`{"full":true}`)}, Overlap: jobstore.OverlapSkip}, false)
	require.NoError(t, err)
	_, err = e.store.AddSchedule(ctx, jobstore.Schedule{Name: "backup", Spec: "@daily",
		Job: jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["./backup.sh","--full"],"dir":"/srv"}`)}}, false)
	require.NoError(t, err)
	r = e.do("GET", "/ui/schedules", nil)
	require.Contains(t, r.body, `<strong>2</strong> schedules.`)
	require.Regexp(t, `<th scope="row">nightly</th><td><code>0 3 \* \* \*</code> Europe/Berlin</td><td class="command">report.build</td><td><span class="badge state-running">active</span></td><td><time datetime="[^"]+">in [^<]+</time></td><td>-</td><td>catch-up one, overlap skip</td>`, r.body)
	require.Contains(t, r.body, `<td class="command">./backup.sh --full</td>`)
	require.Contains(t, r.body, `action="/ui/schedules/nightly/run"`)
	require.NotContains(t, r.body, `action="/ui/schedules/backup/run"`, "this server does not submit exec jobs")

	r = e.act(csrf, "/ui/schedules/nightly/pause", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Paused nightly")
	s, err := e.store.GetSchedule(ctx, "nightly")
	require.NoError(t, err)
	require.True(t, s.Paused)
	r = e.do("GET", "/ui/schedules", nil)
	require.Contains(t, r.body, `<strong>1</strong> paused`)
	require.Contains(t, r.body, `action="/ui/schedules/nightly/resume"`)
	r = e.act(csrf, "/ui/schedules/nightly/resume", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)

	r = e.act(csrf, "/ui/schedules/nightly/run", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var res struct{ Message, Location string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &res))
	require.True(t, strings.HasPrefix(res.Location, "/ui/jobs/"), res.Location)
	j, err := e.store.Get(ctx, strings.TrimPrefix(res.Location, "/ui/jobs/"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(j.Key, "schedule:nightly:"), j.Key)

	require.Equal(t, http.StatusForbidden, e.act(csrf, "/ui/schedules/backup/run", nil).status)
	require.Equal(t, http.StatusBadRequest, e.act(csrf, "/ui/schedules/a%20b/pause", nil).status)
	require.Equal(t, http.StatusNotFound, e.act(csrf, "/ui/schedules/nightly/explode", nil).status)
	require.Equal(t, http.StatusNotFound, e.act(csrf, "/ui/schedules/missing/pause", nil).status)
	r = e.do("POST", "/ui/schedules/nightly/pause", nil, "Jobdir-UI: 1")
	require.NotEqual(t, http.StatusOK, r.status, "an action without the session's token")
	s, err = e.store.GetSchedule(ctx, "nightly")
	require.NoError(t, err)
	require.False(t, s.Paused, "a refused action changed the schedule")
}
