package webui_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeUIBench()
	closeUIPostgres()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const testToken = "s3cret-token-for-the-ui-tests"

// env is a dashboard on a memstore behind a real HTTP listener, and a
// browser-like client with a cookie jar that does not follow redirects.
type env struct {
	t      *testing.T
	store  *memstore.Store
	ui     *webui.Handler
	srv    *httptest.Server
	client *http.Client
}

func newEnv(t *testing.T, opts *webui.Options) *env {
	t.Helper()
	if opts == nil {
		opts = &webui.Options{Tokens: []string{testToken}}
	}
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	ui, err := webui.New(store, opts)
	require.NoError(t, err)
	return newEnvOn(t, store, ui)
}

// newEnvOn serves ui, a Handler on store, behind a real HTTP listener.
func newEnvOn(t *testing.T, store *memstore.Store, ui *webui.Handler) *env {
	t.Helper()
	srv := httptest.NewServer(ui)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &env{t: t, store: store, ui: ui, srv: srv, client: client}
}

// reply is an answer read in full.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request; form, if not nil, is the urlencoded body; hdr is
// "Name: value" lines.
func (e *env) do(method, path string, form url.Values, hdr ...string) reply {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, body)
	require.NoError(e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		if k == "Host" {
			req.Host = v
		}
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// signIn signs in with token and returns the CSRF token of the pages.
func (e *env) signIn(token string) string {
	e.t.Helper()
	r := e.do("POST", "/ui/signin", url.Values{"token": {token}, "next": {"/ui/"}})
	require.Equal(e.t, http.StatusSeeOther, r.status, r.body)
	return e.csrf()
}

var csrfRE = regexp.MustCompile(`data-csrf="([^"]*)"`)

// csrf returns the CSRF token the overview page carries.
func (e *env) csrf() string {
	e.t.Helper()
	r := e.do("GET", "/ui/", nil)
	require.Equal(e.t, http.StatusOK, r.status, r.body)
	m := csrfRE.FindStringSubmatch(r.body)
	require.NotNil(e.t, m, "no CSRF token in the page")
	require.NotEmpty(e.t, m[1])
	return m[1]
}

// sessionCookie returns the session cookie the jar holds for /ui/.
func (e *env) sessionCookie() *http.Cookie {
	u, _ := url.Parse(e.srv.URL + "/ui/")
	for _, c := range e.client.Jar.Cookies(u) {
		if c.Name == webui.CookieName {
			return c
		}
	}
	return nil
}
