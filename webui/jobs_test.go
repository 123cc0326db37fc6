package webui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

var rowRE = regexp.MustCompile(`<tr data-id="([0-9A-Z]{26})">`)

// rows returns the job IDs of a table page, in order.
func rows(body string) []string {
	var ids []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

var nextRE = regexp.MustCompile(`href="([^"]*)" rel="next"`)

func TestJobsTablePagesByCursorInBothOrders(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	var ids []string
	for i := range webui.PageSize*2 + 5 {
		j, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: fmt.Sprint("key-", i)})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	for _, order := range []string{"newest", "oldest"} {
		t.Run(order, func(t *testing.T) {
			var seen []string
			path := "/ui/jobs?order=" + order
			for pages := 0; path != ""; pages++ {
				require.Less(t, pages, 4)
				r := e.do("GET", path, nil)
				require.Equal(t, http.StatusOK, r.status)
				got := rows(r.body)
				require.LessOrEqual(t, len(got), webui.PageSize)
				seen = append(seen, got...)
				path = ""
				if m := nextRE.FindStringSubmatch(r.body); m != nil {
					path = strings.ReplaceAll(m[1], "&amp;", "&")
				}
			}
			want := append([]string(nil), ids...)
			if order == "newest" {
				for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
					want[i], want[j] = want[j], want[i]
				}
			}
			require.Equal(t, want, seen, "every job once, in order")
		})
	}
}

func TestJobsTableFilters(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	a, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail", Key: "user-42-welcome", Tags: []string{"team=growth"}})
	require.NoError(t, err)
	b, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail", Key: "user-7-welcome", Tags: []string{"team=growth", "vip"}})
	require.NoError(t, err)
	c, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "report", Key: "user-42-report"})
	require.NoError(t, err)
	_, err = e.store.Cancel(ctx, b.ID)
	require.NoError(t, err)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{c.ID, b.ID, a.ID}},
		{"state=canceled", []string{b.ID}},
		{"state=queued&order=oldest", []string{a.ID, c.ID}},
		{"kind=mail", []string{b.ID, a.ID}},
		{"key=user-42", []string{c.ID, a.ID}},
		{"kind=mail&key=42", []string{a.ID}},
		{"tag=team%3Dgrowth", []string{b.ID, a.ID}},
		{"tag=vip&state=canceled", []string{b.ID}},
		{"tag=team", nil},
		{"id=" + a.ID, []string{a.ID}},
		{"id=" + strings.ToLower(c.ID[:25]), []string{c.ID}},
		{"id=" + a.ID[:10], nil}, // filled in below: every job shares the millisecond prefix or not
		{"id=8", nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			want := tc.want
			if strings.HasPrefix(tc.query, "id=") && len(tc.query) == 13 {
				for _, id := range []string{c.ID, b.ID, a.ID} {
					if strings.HasPrefix(id, a.ID[:10]) {
						want = append(want, id)
					}
				}
			}
			r := e.do("GET", "/ui/jobs?"+tc.query, nil)
			require.Equal(t, http.StatusOK, r.status, r.body)
			require.Equal(t, want, rows(r.body))
		})
	}
	// A row's tags link to the jobs with them.
	r := e.do("GET", "/ui/jobs", nil)
	require.Contains(t, r.body, `<a class="tag" href="/ui/jobs?tag=team%3dgrowth">team=growth</a> <a class="tag" href="/ui/jobs?tag=vip">vip</a>`)
	for _, bad := range []string{"state=done", "id=IIII", "order=random", "kind=a%20b", "cursor=nope", "tag=a%20b"} {
		r := e.do("GET", "/ui/jobs?"+bad, nil)
		require.Equal(t, http.StatusBadRequest, r.status, bad)
		require.Contains(t, r.body, `class="error"`, bad)
	}
}

func TestStateInWords(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	_, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "later", RunAt: time.Now().Add(5*time.Minute + 30*time.Second)})
	require.NoError(t, err)
	flaky, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "flaky", MaxAttempts: 3})
	require.NoError(t, err)
	claimed, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w1", Kinds: []string{"flaky"}})
	require.NoError(t, err)
	require.Equal(t, flaky.ID, claimed.ID)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Outcome{Error: "boom", RetryAfter: 30 * time.Minute})
	require.NoError(t, err)

	r := e.do("GET", "/ui/jobs", nil)
	require.Regexp(t, `scheduled in 5m 2\ds`, r.body, "minutes and seconds, as the command line writes it")
	require.Regexp(t, `retrying in 29m 5\ds, attempt 2/3`, r.body)
	r = e.do("GET", "/ui/jobs/"+flaky.ID, nil)
	require.Regexp(t, `retrying in 29m 5\ds, attempt 2/3`, r.body)
	require.Contains(t, r.body, "boom")
	require.Contains(t, r.body, "<td>w1</td>", "the attempt's worker")
}

// act posts an action as the pages' script does and returns the answer.
func (e *env) act(csrf, path string, form url.Values) reply {
	e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	return e.do("POST", path, form, "X-CSRF-Token: "+csrf, "Jobdir-UI: 1")
}

func TestRetryAndRerun(t *testing.T) {
	e := newEnv(t, &webui.Options{Tokens: []string{testToken}})
	csrf := e.signIn(testToken)
	ctx := t.Context()
	job, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", Key: "once", Queue: "reports", Payload: json.RawMessage(`{"n":1}`), Priority: 3})
	require.NoError(t, err)

	r := e.act(csrf, "/ui/jobs/"+job.ID+"/retry", nil)
	require.Equal(t, http.StatusConflict, r.status, "a queued job cannot be retried")
	require.Contains(t, r.body, "the job is queued")

	r = e.act(csrf, "/ui/jobs/"+job.ID+"/cancel", nil)
	require.Equal(t, http.StatusOK, r.status)
	r = e.act(csrf, "/ui/jobs/"+job.ID+"/retry", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	got, err := e.store.Get(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)

	r = e.act(csrf, "/ui/jobs/"+job.ID+"/rerun", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var res struct{ Location string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &res))
	newID := strings.TrimPrefix(res.Location, "/ui/jobs/")
	require.NotEqual(t, job.ID, newID)
	copyJob, err := e.store.Get(ctx, newID)
	require.NoError(t, err)
	require.Equal(t, "k", copyJob.Kind)
	require.JSONEq(t, `{"n":1}`, string(copyJob.Payload))
	require.Equal(t, 3, copyJob.Priority)
	require.Equal(t, "reports", copyJob.Queue, "a re-run stays in its queue")
	require.Empty(t, copyJob.Key, "a key would name the old job")

	// Exec jobs are re-run only where the server accepts them.
	ex, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["true"],"dir":"/"}`)})
	require.NoError(t, err)
	r = e.act(csrf, "/ui/jobs/"+ex.ID+"/rerun", nil)
	require.Equal(t, http.StatusForbidden, r.status)
	page := e.do("GET", "/ui/jobs/"+ex.ID, nil)
	require.Regexp(t, `id="rerun" disabled`, page.body)

	r = e.act(csrf, "/ui/jobs/"+job.ID+"/explode", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	r = e.act(csrf, "/ui/jobs/00000000000000000000000000/cancel", nil)
	require.Equal(t, http.StatusNotFound, r.status)
}

func TestBulkActionsCountThenAct(t *testing.T) {
	e := newEnv(t, nil)
	csrf := e.signIn(testToken)
	ctx := t.Context()
	_, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail", Key: "running"})
	require.NoError(t, err)
	_, err = e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"mail"}})
	require.NoError(t, err)
	var mail []string
	for i := range 7 {
		j, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail", Key: fmt.Sprint("m", i)})
		require.NoError(t, err)
		mail = append(mail, j.ID)
	}
	other, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "other"})
	require.NoError(t, err)

	count := func(q string) (int, bool) {
		r := e.do("GET", "/ui/bulk?"+q, nil, "Jobdir-UI: 1")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var c struct {
			Count int
			More  bool
		}
		require.NoError(t, json.Unmarshal([]byte(r.body), &c))
		return c.Count, c.More
	}
	n, more := count("action=cancel&kind=mail")
	require.Equal(t, 8, n, "7 queued and 1 running")
	require.False(t, more)
	n, _ = count("action=retry&kind=mail")
	require.Zero(t, n)
	n, _ = count("action=cancel&kind=mail&state=succeeded")
	require.Zero(t, n, "no succeeded job can be canceled")

	r := e.act(csrf, "/ui/bulk", url.Values{"action": {"cancel"}, "kind": {"mail"}, "state": {"queued"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Canceled 7 jobs")
	for _, id := range mail {
		j, err := e.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateCanceled, j.State)
	}
	j, err := e.store.Get(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State, "outside the filter")

	r = e.act(csrf, "/ui/bulk", url.Values{"action": {"retry"}, "key": {"m"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Queued again 7 jobs")

	// Without the CSRF token, nothing happens.
	r = e.do("POST", "/ui/bulk", url.Values{"action": {"cancel"}}, "Jobdir-UI: 1")
	require.Equal(t, http.StatusForbidden, r.status)
	n, _ = count("action=cancel")
	require.Equal(t, 9, n)
	r = e.act(csrf, "/ui/bulk", url.Values{"action": {"purge"}})
	require.Equal(t, http.StatusBadRequest, r.status)
}

// TestBulkDeleteOfFinishedJobs: the bulk delete counts and deletes only
// the finished jobs among those the filter or the selection names, and
// has what goes with each deleted job deleted too (Options.Deleted).
func TestBulkDeleteOfFinishedJobs(t *testing.T) {
	var gone []string
	e := newEnv(t, &webui.Options{Tokens: []string{testToken}, Deleted: func(_ context.Context, id string) error {
		gone = append(gone, id)
		return nil
	}})
	csrf := e.signIn(testToken)
	ctx := t.Context()
	var done []string
	for i := range 3 {
		j, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail", Key: fmt.Sprint("d", i)})
		require.NoError(t, err)
		_, err = e.store.Cancel(ctx, j.ID)
		require.NoError(t, err)
		done = append(done, j.ID)
	}
	queued, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail"})
	require.NoError(t, err)
	require.Contains(t, e.do("GET", "/ui/jobs", nil).body, `id="selected-delete"`)

	r := e.do("GET", "/ui/bulk?action=delete&job="+done[0]+"&job="+queued.ID, nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"count": 1, "more": false}`, r.body, "only the finished one of the selection")
	r = e.act(csrf, "/ui/bulk", url.Values{"action": {"delete"}, "job": {done[0], queued.ID}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Deleted 1 jobs.")
	_, err = e.store.Get(ctx, done[0])
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = e.store.Get(ctx, queued.ID)
	require.NoError(t, err, "a queued job was deleted")
	require.Equal(t, []string{done[0]}, gone)

	r = e.act(csrf, "/ui/bulk", url.Values{"action": {"delete"}, "kind": {"mail"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Deleted 2 jobs.")
	st, err := e.store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Matching("", nil), "the queued job is all that is left")
	require.ElementsMatch(t, done, gone)
	_, created, err := e.store.Submit(ctx, jobstore.Spec{Kind: "mail", Key: "d1"})
	require.NoError(t, err)
	require.True(t, created, "the deleted job's key is not free")
}

// TestBulkDeleteWithoutDeleter: a store that cannot delete jobs one by
// one shows no delete button and refuses the action.
func TestBulkDeleteWithoutDeleter(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	ui, err := webui.New(plainStore{store}, &webui.Options{Tokens: []string{testToken}})
	require.NoError(t, err)
	e := newEnvOn(t, store, ui)
	csrf := e.signIn(testToken)
	require.NotContains(t, e.do("GET", "/ui/jobs", nil).body, `data-bulk="delete"`)
	r := e.act(csrf, "/ui/bulk", url.Values{"action": {"delete"}})
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	require.Contains(t, r.body, "cannot delete jobs one by one")
}

// plainStore is a store with nothing but the methods of webui.Store.
type plainStore struct{ webui.Store }

func TestOverview(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	for _, k := range []string{"a", "a", "b"} {
		_, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: k, MaxAttempts: 1})
		require.NoError(t, err)
	}
	j1, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "worker-one"})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, j1.Lease(), jobstore.Outcome{Error: "no"})
	require.NoError(t, err)
	j2, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "worker-two"})
	require.NoError(t, err)

	r := e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Regexp(t, `id="count-queued"><span class="n">1</span>`, r.body)
	require.Regexp(t, `id="count-running"><span class="n">1</span>`, r.body)
	require.Regexp(t, `id="count-failed"><span class="n">1</span>`, r.body)
	require.Contains(t, r.body, `<span id="failed">1</span>`)
	require.Contains(t, r.body, `<rect class="bad"`)
	require.Contains(t, r.body, `<td>worker-two</td>`)
	require.Contains(t, r.body, j2.ID)
	require.Regexp(t, `jobs\?kind=a">a</a></th><td>\d</td><td>\d</td><td>\d</td><td>\d</td><td>\d</td><td>\d</td><td>2</td>`, r.body)
	require.Contains(t, r.body, `id="oldest-wait"`)

	// The live part alone, for the pages' script.
	f := e.do("GET", "/ui/", nil, "Jobdir-Fragment: 1", "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, f.status)
	require.NotContains(t, f.body, "<html")
	require.Contains(t, f.body, `id="count-queued"`)

	// The queued jobs split: due now, waiting for their time, waiting to
	// retry.
	require.Contains(t, r.body, `<strong id="queued-due">1</strong> due now, <strong id="queued-scheduled">0</strong> waiting for their time, <strong id="queued-retrying">0</strong> waiting to retry.`)
	_, _, err = e.store.Submit(ctx, jobstore.Spec{Kind: "later", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, _, err = e.store.Submit(ctx, jobstore.Spec{Kind: "flaky", MaxAttempts: 2})
	require.NoError(t, err)
	flaky, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"flaky"}})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, flaky.Lease(), jobstore.Outcome{Error: "try again", RetryAfter: time.Hour})
	require.NoError(t, err)
	require.Contains(t, e.do("GET", "/ui/", nil).body, `<strong id="queued-due">1</strong> due now, <strong id="queued-scheduled">1</strong> waiting for their time, <strong id="queued-retrying">1</strong> waiting to retry.`)

	// A running exec job shows its command and key, not only its ID.
	_, _, err = e.store.Submit(ctx, jobstore.Spec{Kind: "exec", Key: "build-42", Payload: json.RawMessage(`{"argv":["make","build"],"dir":"/"}`)})
	require.NoError(t, err)
	_, err = e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "worker-three", Kinds: []string{"exec"}})
	require.NoError(t, err)
	require.Contains(t, e.do("GET", "/ui/", nil).body, `<td class="command">make build</td><td class="key">build-42</td><td>worker-three</td>`)
}

func TestFinishedStateFilterReadsABoundedPage(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	old, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = e.store.Cancel(ctx, old.ID)
	require.NoError(t, err)
	specs := make([]jobstore.Spec, webui.ScanBudget+10)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	_, err = e.store.SubmitBatch(ctx, specs)
	require.NoError(t, err)

	r := e.do("GET", "/ui/jobs?state=canceled", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, rows(r.body), "the one canceled job lies beyond the first page's budget")
	require.Contains(t, r.body, "This page ends early")
	m := nextRE.FindStringSubmatch(r.body)
	require.NotNil(t, m)
	r = e.do("GET", strings.ReplaceAll(m[1], "&amp;", "&"), nil)
	require.Equal(t, []string{old.ID}, rows(r.body))
	require.Nil(t, nextRE.FindStringSubmatch(r.body), "the last page")
}

// TestRerunExplicitKinds: the kinds "*" does not allow are
// Options.ExplicitKinds when given (exec otherwise, TestRetryAndRerun):
// a re-run of one is refused unless it is named, and exec is then a kind
// like any other.
func TestRerunExplicitKinds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed []string
		deploy  int
	}{
		{"star", []string{"*"}, http.StatusForbidden},
		{"star and deploy", []string{"*", "deploy"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, &webui.Options{Tokens: []string{testToken}, AllowedKinds: tc.allowed, ExplicitKinds: []string{"deploy"}})
			csrf := e.signIn(testToken)
			for kind, want := range map[string]int{"exec": http.StatusOK, "deploy": tc.deploy} {
				j, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: kind, Payload: json.RawMessage(`{"argv":["true"],"dir":"/"}`)})
				require.NoError(t, err)
				r := e.act(csrf, "/ui/jobs/"+j.ID+"/rerun", nil)
				require.Equal(t, want, r.status, "%s: %s", kind, r.body)
			}
		})
	}
}

// TestJobsTableShowsCommandAndLastError: a row of the jobs table shows an
// exec job's command line and the last error of a job that failed or waits
// for a retry, each clipped, so that failed exec jobs do not look alike; a
// job that succeeded after a failed attempt shows no error.
func TestJobsTableShowsCommandAndLastError(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	long := strings.Repeat("x", 200)
	ex, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["make","release"],"dir":"/"}`)})
	require.NoError(t, err)
	exLong, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["echo","` + long + `"],"dir":"/"}`)})
	require.NoError(t, err)
	flaky, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	require.NoError(t, err)
	failed, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	require.NoError(t, err)
	fail := func(id, msg string) {
		t.Helper()
		j, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k"}})
		require.NoError(t, err)
		require.Equal(t, id, j.ID)
		_, err = e.store.Complete(ctx, j.Lease(), jobstore.Outcome{Error: msg, RetryAfter: time.Millisecond})
		require.NoError(t, err)
	}
	fail(flaky.ID, "connection refused")
	fail(failed.ID, "exit status 2: "+long)

	row := func(id string) string {
		t.Helper()
		body := e.do("GET", "/ui/jobs", nil).body
		m := regexp.MustCompile(`(?s)<tr data-id="` + id + `">.*?</tr>`).FindString(body)
		require.NotEmpty(t, m, "no row of %s", id)
		return m
	}
	require.Contains(t, row(ex.ID), `<td data-label="Command" class="command">make release</td>`)
	require.Contains(t, row(exLong.ID), `<td data-label="Command" class="command">echo `+strings.Repeat("x", 74)+`…</td>`)
	require.Contains(t, row(flaky.ID), `<td data-label="Last error" class="error-text">connection refused</td>`, "retrying")
	require.Contains(t, row(failed.ID), `<td data-label="Last error" class="error-text">exit status 2: `+strings.Repeat("x", 104)+`…</td>`)
	require.Contains(t, row(flaky.ID), `<td data-label="Command" class="command"></td>`, "not an exec job")

	time.Sleep(2 * time.Millisecond) // the retry's time
	j, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k"}})
	require.NoError(t, err)
	require.Equal(t, flaky.ID, j.ID)
	_, err = e.store.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.Contains(t, row(flaky.ID), `<td data-label="Last error" class="error-text"></td>`, "succeeded at last")
}

// TestJobsTableSearchesCommandErrorAndPayload: the text filter keeps the
// jobs whose command line, last error or payload contains it, in any case,
// with the other filters, and the bulk actions count what it keeps.
func TestJobsTableSearchesCommandErrorAndPayload(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	submit := func(spec jobstore.Spec) string {
		t.Helper()
		j, _, err := e.store.Submit(ctx, spec)
		require.NoError(t, err)
		return j.ID
	}
	deploy := submit(jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["./Deploy.sh","--env","prod"],"dir":"/"}`)})
	report := submit(jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["make","report"],"dir":"/"}`)})
	mail := submit(jobstore.Spec{Kind: "email.send", Payload: json.RawMessage(`{"to":"ada@example.com"}`), MaxAttempts: 1})
	j, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"email.send"}})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, j.Lease(), jobstore.Outcome{Error: "SMTP said 550: mailbox unavailable"})
	require.NoError(t, err)

	for text, want := range map[string][]string{
		"deploy.sh":   {deploy},               // a command, in another case
		"--env prod":  {deploy},               // across arguments, as the shell reads them
		"mailbox":     {mail},                 // a last error
		"ada@example": {mail},                 // a payload
		"make":        {report},               //
		"nothing":     nil,                    //
		"e":           {mail, report, deploy}, // newest first
	} {
		body := e.do("GET", "/ui/jobs?text="+url.QueryEscape(text), nil).body
		require.Equal(t, want, rows(body), "text %q", text)
		require.Contains(t, body, `id="f-text" name="text" value="`+text+`"`, "the field keeps the text")
	}
	require.Equal(t, []string{mail}, rows(e.do("GET", "/ui/jobs?state=failed&text=550", nil).body))
	require.Empty(t, rows(e.do("GET", "/ui/jobs?state=queued&text=550", nil).body))

	r := e.do("GET", "/ui/bulk?action=cancel&text=deploy", nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `"count":1`, "only the deploy job is counted for a cancel")
}

var prevRE = regexp.MustCompile(`href="([^"]*)" rel="prev"`)

// TestJobsTablePreviousPageAndTotal: from any page after the first, the
// previous page is the one the next links led from, in both orders, and
// the table says how many jobs match when the store's counts say it (a
// filter of states and a kind), not when a key, a text or an ID prefix
// filters.
func TestJobsTablePreviousPageAndTotal(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	n := webui.PageSize*2 + 7
	for i := range n {
		_, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: fmt.Sprint("key-", i)})
		require.NoError(t, err)
	}
	link := func(re *regexp.Regexp, body string) string {
		m := re.FindStringSubmatch(body)
		if m == nil {
			return ""
		}
		return strings.ReplaceAll(m[1], "&amp;", "&")
	}
	for _, order := range []string{"newest", "oldest"} {
		t.Run(order, func(t *testing.T) {
			first := e.do("GET", "/ui/jobs?order="+order, nil).body
			require.Empty(t, link(prevRE, first), "the first page has no previous one")
			require.Contains(t, first, fmt.Sprintf(`<span id="total">%d jobs match</span>`, n))
			second := e.do("GET", link(nextRE, first), nil).body
			third := e.do("GET", link(nextRE, second), nil).body
			require.Len(t, rows(third), 7)
			require.Equal(t, rows(second), rows(e.do("GET", link(prevRE, third), nil).body), "back from the third page")
			require.Equal(t, rows(first), rows(e.do("GET", link(prevRE, second), nil).body), "back from the second page")
		})
	}
	require.Contains(t, e.do("GET", "/ui/jobs?state=queued&kind=k", nil).body, fmt.Sprintf(`<span id="total">%d jobs match</span>`, n))
	require.Contains(t, e.do("GET", "/ui/jobs?state=failed", nil).body, `<span id="total">0 jobs match</span>`)
	require.Contains(t, e.do("GET", "/ui/jobs?kind=other", nil).body, `<span id="total">0 jobs match</span>`)
	require.NotContains(t, e.do("GET", "/ui/jobs?key=key-1", nil).body, `id="total"`, "a key filter: not counted")
}

// TestOverviewChartRanges: the overview's chart and counts by kind cover
// the last hour by default, or the last 24 hours or 7 days, each in 60
// bars; a job that finished five hours ago is in the 24-hour chart and
// not in the hour's; an unknown range is refused.
func TestOverviewChartRanges(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	now := time.Now().UTC()
	old := jobstore.NewJob(jobstore.Spec{Kind: "nightly"}, now.Add(-5*time.Hour-time.Minute))
	old.State, old.Attempt, old.StartedAt, old.FinishedAt, old.Worker = jobstore.StateSucceeded, 1, now.Add(-5*time.Hour), now.Add(-5*time.Hour), "w"
	old.History = []jobstore.AttemptRecord{{Attempt: 1, Worker: "w", StartedAt: old.StartedAt, FinishedAt: old.FinishedAt, End: jobstore.EndSucceeded}}
	n, err := e.store.Import(ctx, []jobstore.Job{old})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	hour := e.do("GET", "/ui/", nil).body
	require.Contains(t, hour, `<h2 id="h-chart">Finished per minute, the last hour</h2>`)
	require.Contains(t, hour, `id="range-1h" aria-current="page"`)
	require.Contains(t, hour, `<span id="finished">0</span>`)
	require.Contains(t, hour, "No job was created in the last hour.")

	day := e.do("GET", "/ui/?range=24h", nil)
	require.Equal(t, http.StatusOK, day.status)
	require.Contains(t, day.body, `<h2 id="h-chart">Finished per 24 minutes, the last 24 hours</h2>`)
	require.Contains(t, day.body, `id="range-24h" aria-current="page"`)
	require.Contains(t, day.body, `<span id="finished">1</span>`)
	require.Regexp(t, `busiest 24 minutes: 1 job, from 5h( \d+m)? to [45]h( \d+m)? ago`, day.body)
	require.Contains(t, day.body, `jobs?kind=nightly">nightly</a>`)
	require.Contains(t, day.body, `<rect class="ok" x="376"`, "in bar 47 of 60: 19 of the 24 hours in")

	week := e.do("GET", "/ui/?range=7d", nil).body
	require.Contains(t, week, `Finished per 2 h 48 m, the last 7 days`)
	require.Contains(t, week, `<span id="finished">1</span>`)

	require.Equal(t, http.StatusBadRequest, e.do("GET", "/ui/?range=1y", nil).status)
}

// TestBulkActionsOnSelectedJobs: the bulk actions act on the jobs selected
// in the table (job=ID, repeated) and on no other, among those the action
// applies to; a pruned one is skipped, and a malformed ID is refused.
func TestBulkActionsOnSelectedJobs(t *testing.T) {
	e := newEnv(t, &webui.Options{Tokens: []string{testToken}})
	csrf := e.signIn(testToken)
	ctx := t.Context()
	var ids []string
	for range 4 {
		j, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	gone := "01M8M7AB6JD9EYQ6QDAWZ282C2" // never submitted
	q := url.Values{"action": {"cancel"}, "job": {ids[0], ids[2], gone}}

	r := e.do("GET", "/ui/bulk?"+q.Encode(), nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `"count":2`)
	r = e.act(csrf, "/ui/bulk", q)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Canceled 2 jobs.")
	for i, id := range ids {
		j, err := e.store.Get(ctx, id)
		require.NoError(t, err)
		want := jobstore.StateQueued
		if i == 0 || i == 2 {
			want = jobstore.StateCanceled
		}
		require.Equal(t, want, j.State, "job %d", i)
	}

	// The selection is a filter like the others: the table shows it, and
	// retry applies only to those of it that can be retried.
	require.ElementsMatch(t, []string{ids[0], ids[2]}, rows(e.do("GET", "/ui/jobs?job="+ids[0]+"&job="+ids[2], nil).body))
	r = e.do("GET", "/ui/bulk?action=retry&job="+ids[0]+"&job="+ids[1], nil, "Jobdir-UI: 1")
	require.Contains(t, r.body, `"count":1`, "the queued one cannot be retried")

	r = e.do("GET", "/ui/bulk?action=cancel&job=nope", nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusBadRequest, r.status)
}

// TestJobsTablePrefixAtTheRangesEdge: a prefix search finds the IDs at
// both ends of its range, the prefix padded with Z and with 0, newest and
// oldest first.
func TestJobsTablePrefixAtTheRangesEdge(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	now := time.Now().UTC()
	first := jobstore.NewJob(jobstore.Spec{Kind: "k"}, now)
	last := first
	first.ID = first.ID[:10] + strings.Repeat("0", 16)
	last.ID = last.ID[:10] + strings.Repeat("Z", 16)
	_, err := e.store.Import(t.Context(), []jobstore.Job{first, last})
	require.NoError(t, err)
	for _, prefix := range []string{first.ID[:10], first.ID[:25], last.ID[:25]} {
		for _, order := range []string{"newest", "oldest"} {
			r := e.do("GET", "/ui/jobs?id="+prefix+"&order="+order, nil)
			require.Equal(t, http.StatusOK, r.status, r.body)
			var want []string
			for _, id := range []string{last.ID, first.ID} {
				if strings.HasPrefix(id, prefix) {
					want = append(want, id)
				}
			}
			if order == "oldest" {
				slices.Reverse(want)
			}
			require.Equal(t, want, rows(r.body), "id=%s, %s first", prefix, order)
		}
	}
}

// TestInterruptedAttemptIsNotCounted: an attempt that a graceful shutdown
// cut short is not counted against the job's attempts, on its page and in
// the overview's running jobs, as the command line shows it.
func TestInterruptedAttemptIsNotCounted(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	j, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	require.NoError(t, err)
	claimed, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Interrupted(errors.New("worker shutting down")))
	require.NoError(t, err)
	r := e.do("GET", "/ui/jobs/"+j.ID, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "<dt>Attempt</dt><dd>0 of 3 (and 1 interrupted, not counted)</dd>")
	_, err = e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	r = e.do("GET", "/ui/", nil)
	require.Regexp(t, `<td>1/3</td></tr>`, r.body, "the running attempt is the first that counts")
	require.NotContains(t, r.body, "<td>2/4</td>")
}

// TestJobPageShowsTagsAndMeta: a job's page lists its tags, each a link to
// the jobs with it, and its metadata by key, escaped.
func TestJobPageShowsTagsAndMeta(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	j, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "mail", Tags: []string{"nightly", "team=ops"},
		Meta: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "note": "<b>bold</b>"}})
	require.NoError(t, err)
	r := e.do("GET", "/ui/jobs/"+j.ID, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `<dd id="tags"><a class="tag" href="/ui/jobs?tag=nightly">nightly</a> <a class="tag" href="/ui/jobs?tag=team%3dops">team=ops</a> </dd>`)
	require.Contains(t, r.body, `<dt>note</dt><dd>&lt;b&gt;bold&lt;/b&gt;</dd>`)
	require.Contains(t, r.body, `<dt>traceparent</dt><dd>00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01</dd>`)
	plain, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "mail"})
	require.NoError(t, err)
	r = e.do("GET", "/ui/jobs/"+plain.ID, nil)
	require.NotContains(t, r.body, `id="h-meta"`, "no metadata section for a job without")
	require.NotContains(t, r.body, `id="tags"`)
}
