package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

// TestDashboardIconAndMetrics: serve's dashboard has an icon that a
// browser can fetch before any sign-in (its pages name it, and
// /favicon.ico leads to it, where it answered 401), and its requests are
// counted in the API's metrics by route.
func TestDashboardIconAndMetrics(t *testing.T) {
	const token = "dashboard-test-token-0123456789"
	st := memstore.New(nil)
	defer st.Close()
	api, err := httpapi.New(st, &httpapi.Options{Tokens: []string{token}})
	require.NoError(t, err)
	ui, err := webui.New(st, &webui.Options{Tokens: []string{token}})
	require.NoError(t, err)
	srv := httptest.NewServer(withDashboard(api, ui))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}

	resp, _ := get("/favicon.ico", "")
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	require.Equal(t, "/ui/static/favicon.svg", resp.Header.Get("Location"))
	resp, body := get("/ui/static/favicon.svg", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "image/svg+xml", resp.Header.Get("Content-Type"))
	require.True(t, strings.HasPrefix(body, "<svg"), body)

	resp, body = get("/ui/signin", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">`)
	resp, _ = get("/ui/", "") // not signed in: sent to the sign-in page
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%v", resp.Header)

	resp, body = get("/metrics", token)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, series := range []string{
		`jobdir_http_requests_total{code="200",route="GET /ui/static/"} 1`,
		`jobdir_http_requests_total{code="200",route="GET /ui/signin"} 1`,
		`jobdir_http_requests_total{code="303",route="GET /ui/{$}"} 1`,
		`jobdir_http_request_duration_seconds_count{route="GET /ui/signin"} 1`,
	} {
		require.Contains(t, body, series)
	}
}
