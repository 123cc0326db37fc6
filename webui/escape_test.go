package webui_test

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

const hostile = `</pre><script>alert("x")</script><img src=x onerror=alert(1)>`

// requireNoMarkup checks that hostile text in a page is text: escaped, and
// never markup.
func requireNoMarkup(t *testing.T, body string) {
	t.Helper()
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.Contains(t, body, "&lt;script&gt;alert(")
}

func TestHostileJobFieldsShowAsText(t *testing.T) {
	e := newEnv(t, &webui.Options{Tokens: []string{testToken}, AllowedKinds: []string{"*"}})
	e.signIn(testToken)
	ctx := t.Context()
	payload, err := json.Marshal(map[string]string{"note": hostile})
	require.NoError(t, err)
	job, _, err := e.store.Submit(ctx, jobstore.Spec{Kind: "k", Key: hostile, Payload: payload, MaxAttempts: 1})
	require.NoError(t, err)
	claimed, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w" + hostile[:0]})
	require.NoError(t, err)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Outcome{Error: hostile})
	require.NoError(t, err)

	for _, path := range []string{"/ui/jobs/" + job.ID, "/ui/jobs", "/ui/jobs?key=" + url.QueryEscape("<script>")} {
		r := e.do("GET", path, nil)
		require.Equal(t, http.StatusOK, r.status, path)
		requireNoMarkup(t, r.body)
		r = e.do("GET", path, nil, "Jobdir-Fragment: 1", "Jobdir-UI: 1")
		require.Equal(t, http.StatusOK, r.status, path)
		requireNoMarkup(t, r.body)
	}
	r := e.do("GET", "/ui/jobs/"+job.ID, nil)
	require.Contains(t, r.body, `id="last-error"`)
	require.Contains(t, r.body, `&#34;note&#34;`, "the payload, formatted")
}

func TestHostileLogIsPlainText(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	logDir := t.TempDir()
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{testToken}, LogDir: logDir})
	require.NoError(t, err)
	ui, err := webui.New(store, &webui.Options{Tokens: []string{testToken}, Log: api})
	require.NoError(t, err)
	srv := httptest.NewServer(ui)
	defer srv.Close()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	e := &env{t: t, store: store, ui: ui, srv: srv,
		client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}

	ctx := t.Context()
	job, _, err := store.Submit(ctx, jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["sh","-c","echo <b>"],"dir":"/tmp"}`)})
	require.NoError(t, err)
	path, err := joblog.Path(logDir, job.ID)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(hostile+"\n"), 0o600))
	_, err = store.Cancel(ctx, job.ID)
	require.NoError(t, err)

	// Without a session, no log.
	r := e.do("GET", "/ui/jobs/"+job.ID+"/log", nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusUnauthorized, r.status)

	e.signIn(testToken)
	page := e.do("GET", "/ui/jobs/"+job.ID, nil)
	require.Contains(t, page.body, `data-log="/ui/jobs/`+job.ID+`/log"`)
	require.Contains(t, page.body, `sh -c &#39;echo &lt;b&gt;&#39;`, "the command, quoted as a shell reads it")
	r = e.do("GET", "/ui/jobs/"+job.ID+"/log", nil, "Jobdir-UI: 1")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
	require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	require.True(t, strings.HasPrefix(r.body, hostile), "the log, byte for byte: %q", r.body)
}
