package webui_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

func TestNewRefusesNoAuthAndBoth(t *testing.T) {
	_, err := webui.New(memstore.New(nil), nil)
	require.Error(t, err)
	_, err = webui.New(memstore.New(nil), &webui.Options{Tokens: []string{testToken}, InsecureNoAuth: true})
	require.Error(t, err)
}

func TestPagesNeedASession(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("GET", "/ui/jobs?state=queued", nil)
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/ui/signin?next="+url.QueryEscape("/ui/jobs?state=queued"), r.header.Get("Location"))

	// The pages' script gets 401, which it turns into the sign-in page.
	r = e.do("GET", "/ui/jobs", nil, "Jobdir-UI: 1", "Jobdir-Fragment: 1")
	require.Equal(t, http.StatusUnauthorized, r.status)

	job, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	r = e.do("POST", "/ui/jobs/"+job.ID+"/cancel", url.Values{"csrf": {"x"}})
	require.Equal(t, http.StatusUnauthorized, r.status)
	got, err := e.store.Get(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)

	// A forged cookie is no session.
	u, _ := url.Parse(e.srv.URL + "/ui/")
	e.client.Jar.SetCookies(u, []*http.Cookie{{Name: webui.CookieName, Value: "forged", Path: "/ui/"}})
	r = e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusSeeOther, r.status)
}

func TestSignInWithAWrongTokenIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/ui/signin", url.Values{"token": {"not-the-token-at-all"}})
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Contains(t, r.body, "not one this server accepts")
	require.Nil(t, e.sessionCookie())
}

func TestSignInSetsAStrictHttpOnlyCookie(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/ui/signin", url.Values{"token": {testToken}, "next": {"/ui/jobs"}})
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Equal(t, "/ui/jobs", r.header.Get("Location"))
	set := r.header.Get("Set-Cookie")
	require.Contains(t, set, webui.CookieName+"=")
	require.Contains(t, set, "HttpOnly")
	require.Contains(t, set, "SameSite=Strict")
	require.Contains(t, set, "Path=/ui/")
	require.Contains(t, set, "Max-Age=43200")
	require.NotContains(t, set, "Secure", "plain HTTP without SecureCookie")
	require.NotContains(t, set, testToken, "the cookie is not the token")
	r = e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `id="signout"`)
}

func TestSessionCookieIsSecureOverTLS(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	for _, tc := range []struct {
		name   string
		tls    bool
		secure bool
	}{{"tls", true, false}, {"option", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ui, err := webui.New(store, &webui.Options{Tokens: []string{testToken}, SecureCookie: tc.secure})
			require.NoError(t, err)
			srv := httptest.NewUnstartedServer(ui)
			if tc.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := client.PostForm(srv.URL+"/ui/signin", url.Values{"token": {testToken}})
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Contains(t, resp.Header.Get("Set-Cookie"), "; Secure")
		})
	}
}

func TestSignInGoesBackOnlyToTheDashboard(t *testing.T) {
	e := newEnv(t, nil)
	for _, next := range []string{"//evil.example/ui/", "https://evil.example/", "/v1/jobs", "/ui/\\evil"} {
		r := e.do("POST", "/ui/signin", url.Values{"token": {testToken}, "next": {next}})
		require.Equal(t, http.StatusSeeOther, r.status)
		require.Equal(t, "/ui/", r.header.Get("Location"), "next %q", next)
	}
}

func TestSignOutEndsTheSession(t *testing.T) {
	e := newEnv(t, nil)
	csrf := e.signIn(testToken)
	old := e.sessionCookie()
	require.NotNil(t, old)

	// Without the CSRF token, a sign-out is refused (and the session
	// stays).
	r := e.do("POST", "/ui/signout", url.Values{})
	require.Equal(t, http.StatusForbidden, r.status)
	require.Equal(t, http.StatusOK, e.do("GET", "/ui/", nil).status)

	r = e.do("POST", "/ui/signout", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, r.status)
	require.Contains(t, r.header.Get("Set-Cookie"), "Max-Age=0")
	require.Nil(t, e.sessionCookie())
	// The old cookie, replayed, is no session any more.
	u, _ := url.Parse(e.srv.URL + "/ui/")
	e.client.Jar.SetCookies(u, []*http.Cookie{old})
	r = e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusSeeOther, r.status)
	require.True(t, strings.HasPrefix(r.header.Get("Location"), "/ui/signin"))
}

func TestSessionExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(nil)
		defer store.Close()
		ui, err := webui.New(store, &webui.Options{Tokens: []string{testToken}, SessionTTL: time.Hour})
		require.NoError(t, err)
		w := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		ui.ServeHTTP(w, req)
		require.Equal(t, http.StatusSeeOther, w.Code)
		cookie := w.Result().Cookies()[0]
		require.Equal(t, 3600, cookie.MaxAge)

		get := func() int {
			w := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/ui/", nil)
			req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
			ui.ServeHTTP(w, req)
			return w.Code
		}
		time.Sleep(time.Hour - time.Second)
		require.Equal(t, http.StatusOK, get())
		time.Sleep(time.Second)
		require.Equal(t, http.StatusSeeOther, get(), "the session ended after its TTL")
	})
}

func TestActionsNeedTheCSRFTokenAndTheSameSite(t *testing.T) {
	e := newEnv(t, nil)
	csrf := e.signIn(testToken)
	job, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	path := "/ui/jobs/" + job.ID + "/cancel"
	for _, tc := range []struct {
		name string
		form url.Values
		hdr  []string
	}{
		{"no token", url.Values{}, nil},
		{"wrong token", url.Values{"csrf": {"wrong"}}, nil},
		{"another session's token", url.Values{"csrf": {newEnv(t, nil).signIn(testToken)}}, nil},
		{"cross-site fetch", url.Values{"csrf": {csrf}}, []string{"Sec-Fetch-Site: cross-site"}},
		{"foreign origin", url.Values{"csrf": {csrf}}, []string{"Origin: https://evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", path, tc.form, tc.hdr...)
			require.Equal(t, http.StatusForbidden, r.status, r.body)
			got, err := e.store.Get(t.Context(), job.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateQueued, got.State, "a refused action does nothing")
		})
	}
	// The header form of the token, as the pages' script sends it.
	r := e.do("POST", path, nil, "X-CSRF-Token: "+csrf, "Jobdir-UI: 1", "Sec-Fetch-Site: same-origin")
	require.Equal(t, http.StatusOK, r.status, r.body)
	got, err := e.store.Get(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
}

func TestSignInFromAnotherSiteIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/ui/signin", url.Values{"token": {testToken}}, "Sec-Fetch-Site: cross-site")
	require.Equal(t, http.StatusForbidden, r.status)
	require.Nil(t, e.sessionCookie())
}

func TestNoAuthShowsABannerAndStillNeedsCSRF(t *testing.T) {
	e := newEnv(t, &webui.Options{InsecureNoAuth: true})
	r := e.do("GET", "/ui/", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `id="noauth-banner"`)
	require.Contains(t, r.body, "--insecure-no-auth")
	require.NotContains(t, r.body, `id="signout"`)

	job, _, err := e.store.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	r = e.do("POST", "/ui/jobs/"+job.ID+"/cancel", url.Values{})
	require.Equal(t, http.StatusForbidden, r.status)
	r = e.do("POST", "/ui/jobs/"+job.ID+"/cancel", url.Values{"csrf": {e.csrf()}})
	require.Equal(t, http.StatusSeeOther, r.status)

	// Defeats DNS rebinding: a name other than localhost is refused.
	r = e.do("GET", "/ui/", nil, "Host: evil.example")
	require.Equal(t, http.StatusForbidden, r.status)
}

func TestPagesForbidForeignScripts(t *testing.T) {
	e := newEnv(t, nil)
	e.signIn(testToken)
	r := e.do("GET", "/ui/", nil)
	csp := r.header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	r = e.do("GET", "/ui/static/app.js", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.header.Get("Content-Type"), "javascript")
}
