package webui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

// TestQueuesPage: the queues page lists each queue with its state, jobs
// and wait, links to its jobs, and pauses and resumes it for the store's
// claims; the jobs page filters by queue; a bad name is refused.
func TestQueuesPage(t *testing.T) {
	e := newEnv(t, nil)
	csrf := e.signIn(testToken)
	ctx := t.Context()
	r := e.do("GET", "/ui/queues", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `id="no-queues"`)
	require.Contains(t, r.body, `href="/ui/queues" aria-current="page"`)

	mail, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "team/mail"})
	require.NoError(t, err)
	other, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	r = e.do("GET", "/ui/queues", nil)
	require.Regexp(t, `<th scope="row"><a href="/ui/jobs\?queue=team%2fmail">team/mail</a></th><td><span class="badge state-running">running</span></td><td><form [^\n]*value="0"[^\n]*</form></td><td>1</td><td>0</td>`, r.body)
	require.Contains(t, r.body, `action="/ui/queues/team%2Fmail/pause"`)

	r = e.act(csrf, "/ui/queues/team%2Fmail/pause", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "Paused team/mail")
	got, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, other.ID, got.ID, "the paused queue's job is passed over")
	r = e.do("GET", "/ui/queues", nil)
	require.Contains(t, r.body, `<span class="badge state-canceled">paused</span>`)
	require.Contains(t, r.body, `<strong>1</strong> paused`)
	require.Contains(t, r.body, `action="/ui/queues/team%2Fmail/resume"`)

	r = e.do("GET", "/ui/jobs?queue=team%2Fmail", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, mail.ID)
	require.NotContains(t, r.body, other.ID)
	r = e.do("GET", "/ui/jobs?queue=bad+name", nil)
	require.Equal(t, http.StatusBadRequest, r.status, r.body)

	r = e.act(csrf, "/ui/queues/team%2Fmail/resume", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	got, err = e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, mail.ID, got.ID)

	r = e.act(csrf, "/ui/queues/team%2Fmail/limit?limit=2", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "At most 2 jobs of team/mail run at once.")
	r = e.do("GET", "/ui/queues", nil)
	require.Contains(t, r.body, `name="limit" type="number" min="0" max="10000" value="2"`)
	for _, bad := range []string{"-1", "x", "10001", ""} {
		r = e.act(csrf, "/ui/queues/team%2Fmail/limit?limit="+bad, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "limit %q: %s", bad, r.body)
	}
	qs, err := e.store.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, qs[1].Limit, "a refused limit changes nothing")
	r = e.act(csrf, "/ui/queues/team%2Fmail/limit?limit=0", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "team/mail has no limit.")

	// The per-partition limit has a form of its own, and leaves the
	// queue's limit as it is.
	require.NoError(t, e.store.SetQueueLimit(ctx, "team/mail", 4))
	r = e.act(csrf, "/ui/queues/team%2Fmail/limit?per_partition=1", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "The jobs of each partition of team/mail run one at a time.")
	r = e.do("GET", "/ui/queues", nil)
	require.Contains(t, r.body, `name="per_partition" type="number" min="0" max="10000" value="1"`)
	for _, bad := range []string{"-1", "x", ""} {
		r = e.act(csrf, "/ui/queues/team%2Fmail/limit?per_partition="+bad, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "per_partition %q: %s", bad, r.body)
	}
	qs, err = e.store.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, qs[1].Limit, "the per-partition form leaves the limit")
	require.Equal(t, 1, qs[1].PerPartition, "a refused limit changes nothing")
	r = e.act(csrf, "/ui/queues/team%2Fmail/limit?per_partition=0", nil)
	require.Contains(t, r.body, "team/mail has no per-partition limit.")

	// The rate has a form of its own too.
	r = e.act(csrf, "/ui/queues/team%2Fmail/limit?rate=100/1m", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, "At most 100 jobs of team/mail start in any window of 1m.")
	r = e.do("GET", "/ui/queues", nil)
	require.Contains(t, r.body, `name="rate" type="text" value="100/1m"`)
	for _, bad := range []string{"fast", "0/1s", "10/0s"} {
		r = e.act(csrf, "/ui/queues/team%2Fmail/limit?rate="+bad, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "rate %q: %s", bad, r.body)
	}
	qs, err = e.store.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, jobstore.Rate{N: 100, Per: time.Minute}, qs[1].Rate, "a refused rate changes nothing")
	require.Equal(t, 4, qs[1].Limit, "the rate form leaves the limit")
	r = e.act(csrf, "/ui/queues/team%2Fmail/limit?rate=", nil)
	require.Contains(t, r.body, "team/mail has no rate limit.")

	// A job's page names its queue, and its partition when it has one.
	pj, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "team/mail", Partition: "customer 7"})
	require.NoError(t, err)
	r = e.do("GET", "/ui/jobs/"+pj.ID, nil)
	require.Contains(t, r.body, "<dt>Queue</dt><dd>team/mail</dd>\n<dt>Partition</dt><dd>customer 7</dd>")
	r = e.do("GET", "/ui/jobs/"+other.ID, nil)
	require.Contains(t, r.body, "<dt>Queue</dt><dd>default</dd>")
	require.NotContains(t, r.body, "<dt>Partition</dt>", "no partition, no row")
	require.NoError(t, e.store.SetQueueLimit(ctx, "team/mail", 0))
	r = e.act(csrf, "/ui/queues/bad%20name/pause", nil)
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	r = e.act(csrf, "/ui/queues/q/explode", nil)
	require.Equal(t, http.StatusNotFound, r.status, r.body)
	r = e.act("wrong", "/ui/queues/q/pause", nil)
	require.Equal(t, http.StatusForbidden, r.status, "a pause needs the page's CSRF token")
	qs, err = e.store.Queues(ctx)
	require.NoError(t, err)
	for _, q := range qs {
		require.False(t, q.Paused, "a refused action paused %s", q.Queue)
	}
}

// TestQueuesPageWithoutController: a store that keeps no queue settings
// gets a page that says so, and its actions are refused.
func TestQueuesPageWithoutController(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	ui, err := webui.New(plainStore{store}, &webui.Options{Tokens: []string{testToken}})
	require.NoError(t, err)
	e := newEnvOn(t, store, ui)
	csrf := e.signIn(testToken)
	r := e.do("GET", "/ui/queues", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `id="queues-unsupported"`)
	r = e.act(csrf, "/ui/queues/q/pause", nil)
	require.Equal(t, http.StatusNotImplemented, r.status, r.body)
}
