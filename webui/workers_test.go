package webui_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

// TestWorkersPage: the workers page lists each live worker with its kinds
// and the jobs it runs, links them, and warns of the kinds whose queued
// jobs no worker runs, as the overview does.
func TestWorkersPage(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	r := e.do("GET", "/ui/workers", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `id="no-workers"`)
	require.Contains(t, r.body, `href="/ui/workers" aria-current="page"`)

	u, err := e.store.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "mailer-1", Host: "pod-a", PID: 42, Kinds: []string{"mail"}, Concurrency: 4, Version: "v1.2"})
	require.NoError(t, err)
	defer u()
	j, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "mail"})
	require.NoError(t, err)
	_, err = e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "mailer-1", Kinds: []string{"mail"}})
	require.NoError(t, err)
	_, _, err = e.store.Submit(t.Context(), jobstore.Spec{Kind: "resize"})
	require.NoError(t, err)

	r = e.do("GET", "/ui/workers", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Regexp(t, `<th scope="row" class="worker">mailer-1</th><td>pod-a</td><td>42</td><td>mail</td><td>1 of 4 <a class="id" href="/ui/jobs/`+j.ID+`">`, r.body)
	require.Contains(t, r.body, "<td>v1.2</td>")
	require.Contains(t, r.body, `<strong>1</strong> worker runs <strong>1</strong> job of the <strong>4</strong> it may run at once.`)
	require.Regexp(t, `id="unserved".*>resize<`, r.body, "the unserved kind")
	require.NotRegexp(t, regexp.MustCompile(`id="unserved"[^\n]*>mail<`), r.body, "a served kind named unserved")

	r = e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Regexp(t, `id="unserved".*>resize<`, r.body, "the overview does not warn")
	require.Contains(t, r.body, `id="workers-count">1</a>`)
}

// TestWorkersPageWithoutRegistry: a store that keeps no list of workers
// gets a page that says so, and an overview without a count of workers.
func TestWorkersPageWithoutRegistry(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	ui, err := webui.New(plainStore{store}, &webui.Options{Tokens: []string{testToken}})
	require.NoError(t, err)
	e := newEnvOn(t, store, ui)
	e.signIn(testToken)
	r := e.do("GET", "/ui/workers", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `id="workers-unsupported"`)
	r = e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.NotContains(t, r.body, `id="workers-count"`)
	require.NotContains(t, r.body, `id="unserved"`)
}
