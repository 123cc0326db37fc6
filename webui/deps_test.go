package webui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestJobPageShowsDependenciesAndDependents: a waiting job's page says
// how many of its dependencies have not ended, lists them with links and
// their states, and says whether it runs whatever their outcomes; a
// dependency's page lists the jobs that wait for it; a job of a batch,
// and the batch's callback, say what is known of the batch.
func TestJobPageShowsDependenciesAndDependents(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	a, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "build"})
	require.NoError(t, err)
	b, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "part", Batch: "exports"})
	require.NoError(t, err)
	c, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "deploy", After: []string{a.ID, b.ID}})
	require.NoError(t, err)
	cb, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "merge", AfterBatch: "exports"})
	require.NoError(t, err)

	r := e.do("GET", "/ui/jobs/"+c.ID, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `<span class="badge state-waiting" id="state">waiting</span> <span id="words">waiting for 2 of 2 jobs</span>`)
	require.Contains(t, r.body, `<h2 id="h-after">Dependencies</h2>`)
	require.Contains(t, r.body, `<a class="id" href="/ui/jobs/`+a.ID+`">`+a.ID+`</a></td><td>build</td><td><span class="badge state-queued">queued</span>`)
	require.Contains(t, r.body, `<a class="id" href="/ui/jobs/`+b.ID+`">`)
	require.Contains(t, r.body, `<dt>After any</dt><dd>no: canceled as soon as a dependency fails or is canceled</dd>`)
	require.Regexp(t, `id="cancel">Cancel</button>`, r.body, "a waiting job can be canceled")
	require.NotContains(t, r.body, `id="h-dependents"`, "no dependents section for a job without")

	claimed, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"build"}})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	r = e.do("GET", "/ui/jobs/"+c.ID, nil)
	require.Contains(t, r.body, `<span id="words">waiting for 1 of 2 jobs</span>`)
	require.Contains(t, r.body, `<span class="badge state-succeeded">succeeded</span>`)

	r = e.do("GET", "/ui/jobs/"+a.ID, nil)
	require.Contains(t, r.body, `<h2 id="h-dependents">Dependents</h2>`)
	require.Contains(t, r.body, `<a class="id" href="/ui/jobs/`+c.ID+`">`+c.ID+`</a></td><td>deploy</td><td><span class="badge state-waiting">waiting</span>`)
	require.NotContains(t, r.body, `id="h-after"`, "no dependencies section for a job without")

	r = e.do("GET", "/ui/jobs/"+b.ID, nil)
	require.Contains(t, r.body, `<dt>Batch</dt><dd>exports: 1 job, 0 ended; closed by its callback, no job may join</dd>`)
	require.Contains(t, r.body, `href="/ui/jobs/`+c.ID+`"`, "b's dependents")
	require.Contains(t, r.body, `href="/ui/jobs/`+cb.ID+`"`)
	r = e.do("GET", "/ui/jobs/"+cb.ID, nil)
	require.Contains(t, r.body, `<dt>Callback of batch</dt><dd>exports: 1 job, 0 ended; closed by its callback, no job may join</dd>`)
	require.Contains(t, r.body, `<dt>After any</dt><dd>yes: runs once its dependencies ended, whatever their outcomes</dd>`)
	require.Contains(t, r.body, `<span id="words">waiting for 1 job</span>`)

	// The live part the page polls holds them too.
	f := e.do("GET", "/ui/jobs/"+c.ID, nil, "Jobdir-Fragment: 1", "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, f.status)
	require.Contains(t, f.body, `id="h-after"`)
}

// TestJobsTableShowsWaitingJobs: the state filter offers waiting, lists
// the waiting jobs with how many of their dependencies have not ended,
// and the overview counts them.
func TestJobsTableShowsWaitingJobs(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	a, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	b, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "b"})
	require.NoError(t, err)
	c, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID}})
	require.NoError(t, err)

	r := e.do("GET", "/ui/jobs", nil)
	require.Contains(t, r.body, `<option value="waiting">waiting</option>`)
	r = e.do("GET", "/ui/jobs?state=waiting", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `<option value="waiting" selected>waiting</option>`)
	require.Contains(t, r.body, `id="row-`+c.ID+`"`)
	require.NotContains(t, r.body, `id="row-`+a.ID+`"`)
	require.Contains(t, r.body, `<span class="badge state-waiting">waiting</span> <span class="words">waiting for 2 of 2 jobs</span>`)
	require.Contains(t, r.body, `<span id="total">1 job matches</span>`)

	r = e.do("GET", "/ui/", nil)
	require.Contains(t, r.body, `<a href="/ui/jobs?state=waiting" class="count state-waiting" id="count-waiting"><span class="n">1</span> waiting</a>`)
}

// TestActionsOnWaitingJobs: a waiting job is canceled by the page's
// button and by the bulk cancel; retrying a job that a failed dependency
// canceled says, in words, to retry the dependency first; the bulk retry
// counts such jobs apart.
func TestActionsOnWaitingJobs(t *testing.T) {
	e := newEnv(t, nil)
	csrf := e.signIn(testToken)
	ctx := t.Context()
	a, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	w1, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "w", After: []string{a.ID}})
	require.NoError(t, err)
	w2, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "w", After: []string{a.ID}})
	require.NoError(t, err)

	r := e.do("GET", "/ui/bulk?action=cancel&kind=w", nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"count":2,"more":false}`, r.body, "waiting jobs can be canceled")
	r = e.act(csrf, "/ui/jobs/"+w1.ID+"/cancel", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = e.act(csrf, "/ui/bulk", url.Values{"action": {"cancel"}, "state": {"waiting"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Canceled 1 jobs")
	got, err := e.store.Get(ctx, w2.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)

	// A dependent that a failed dependency canceled.
	d, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "d", After: []string{a.ID}})
	require.NoError(t, err)
	claimed, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"a"}})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Outcome{Error: "boom", Permanent: true})
	require.NoError(t, err)
	r = e.do("GET", "/ui/jobs/"+d.ID, nil)
	require.Contains(t, r.body, `<pre class="error-text" id="last-error">dependency `+a.ID+` failed</pre>`)
	r = e.act(csrf, "/ui/jobs/"+d.ID+"/retry", nil)
	require.Equal(t, http.StatusConflict, r.status, r.body)
	require.Contains(t, r.body, "it cannot be retried yet: job "+d.ID+": dependency "+a.ID+" failed; retry that job first")
	require.NotContains(t, r.body, "memstore")

	r = e.act(csrf, "/ui/bulk", url.Values{"action": {"retry"}, "kind": {"d"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	var res struct {
		Message string
		Done    int
		Refused int
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &res))
	require.Equal(t, 0, res.Done)
	require.Equal(t, 1, res.Refused)
	require.Contains(t, res.Message, "1 were not retried: a job they depend on failed or was canceled and is still so; retry those first.")

	r = e.act(csrf, "/ui/jobs/"+a.ID+"/retry", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = e.act(csrf, "/ui/jobs/"+d.ID+"/retry", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Retried: it waits for its dependencies again.")
}

// TestJobPageListsAHundredDependencies: a job that waits for many lists
// the first hundred, says how many more, and still counts them all.
func TestJobPageListsAHundredDependencies(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	ctx := t.Context()
	var ids []string
	for range 105 {
		j, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "part"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	c, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "merge", After: ids})
	require.NoError(t, err)
	r := e.do("GET", "/ui/jobs/"+c.ID, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `<span id="words">waiting for 105 of 105 jobs</span>`)
	require.Contains(t, r.body, `<p class="hint" id="more-after">And 5 more.</p>`)
	require.Contains(t, r.body, ids[99])
	require.NotContains(t, r.body, ids[100])
	r = e.do("GET", "/ui/jobs/"+ids[0], nil)
	require.Contains(t, r.body, `href="/ui/jobs/`+c.ID+`"`)
}
