package httpapi_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
)

// logEnv is a server that serves the logs in its LogDir, and a job with a
// log of two attempts there.
func logEnv(t *testing.T) (*env, jobstore.Job, string) {
	t.Helper()
	logDir := t.TempDir()
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, LogDir: logDir}, nil)
	j := e.submit("work", "")
	path, err := joblog.Path(logDir, j.ID)
	require.NoError(t, err)
	log := joblog.Note("job attempt 1", true) + "one\ntwo\n" + joblog.Note("attempt 1 exited with status 0", true)
	require.NoError(t, os.WriteFile(path, []byte(log), 0o600))
	return e, j, path
}

func TestLogRoute(t *testing.T) {
	e, j, path := logEnv(t)
	whole, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, tc := range []struct {
		query, want string
	}{
		{"", string(whole)},
		{"?raw=1", "one\ntwo\n"},
		{"?raw=true&tail=1", "two\n"},
		{"?tail=1", joblog.Note("attempt 1 exited with status 0", true)},
		{"?raw=0&follow=0", string(whole)},
	} {
		r := e.do("GET", "/v1/jobs/"+j.ID+"/log"+tc.query, "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", tc.query, r.body)
		require.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
		require.Equal(t, "queued", r.header.Get(httpapi.StateHeader))
		require.Equal(t, tc.want, string(r.body), tc.query)
	}

	// A job without output yet has an empty log.
	other := e.submit("work", "")
	r := e.do("GET", "/v1/jobs/"+other.ID+"/log", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.body)
}

func TestLogRouteErrors(t *testing.T) {
	e, j, path := logEnv(t)
	e.do("GET", "/v1/jobs/"+jobstore.NewID(time.Now())+"/log", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("GET", "/v1/jobs/nope/log", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	for _, q := range []string{"?tail=-1", "?tail=x", "?raw=maybe", "?lines=3", "?tail=1&tail=2"} {
		e.do("GET", "/v1/jobs/"+j.ID+"/log"+q, "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	}
	// Without a token, nothing.
	r := e.doWith("GET", "/v1/jobs/"+j.ID+"/log", "", nil)
	require.Equal(t, http.StatusUnauthorized, r.status)

	// A link planted at the log's path is not followed.
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("server secret"), 0o600))
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(secret, path))
	r = e.do("GET", "/v1/jobs/"+j.ID+"/log", "")
	require.NotContains(t, string(r.body), "server secret")
	require.Contains(t, r.apiError(t, http.StatusInternalServerError, httpapi.CodeInternal).Message, "not a regular file")

	// A server without a log directory keeps no logs.
	plain := newEnv(t, nil, nil)
	pj := plain.submit("work", "")
	require.Contains(t, plain.do("GET", "/v1/jobs/"+pj.ID+"/log", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound).Message, "keeps no job logs")
}

// TestLogRouteFollow: with follow=1 the answer streams what is appended
// until the job ends, then gives its final state in the trailer.
func TestLogRouteFollow(t *testing.T) {
	e, j, path := logEnv(t)
	ctx := t.Context()
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/jobs/"+j.ID+"/log?follow=1&raw=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rd := bufio.NewReader(resp.Body)
	for _, want := range []string{"one\n", "two\n"} {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, want, line)
	}

	// More output arrives while the job runs; it is sent at once.
	c, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(joblog.Note("job attempt 2", true) + "three\n")
	require.NoError(t, err)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "three\n", line)

	_, err = f.WriteString("four\n" + joblog.Note("attempt 2 exited with status 1", true))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = e.store.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "boom", Permanent: true})
	require.NoError(t, err)
	rest, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.Equal(t, "four\n", string(rest))
	require.Equal(t, "failed", resp.Trailer.Get(httpapi.StateHeader))
	require.Empty(t, resp.Trailer.Get(httpapi.ErrorTrailer))
}

// TestLogRouteFollowEndsAtShutdown: a followed log does not hold up the
// server's shutdown.
func TestLogRouteFollowEndsAtShutdown(t *testing.T) {
	logDir := t.TempDir()
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, LogDir: logDir}, nil)
	j := e.submit("work", "")
	hs, url := serve(t, e.api, nil)
	req, err := http.NewRequestWithContext(t.Context(), "GET", url+"/v1/jobs/"+j.ID+"/log?follow=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	done := make(chan error, 1)
	go func() { done <- hs.Shutdown(t.Context()) }()
	_, _ = io.ReadAll(resp.Body)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown waited for a followed log")
	}
	require.True(t, strings.Contains(resp.Trailer.Get(httpapi.ErrorTrailer), "context canceled"), "trailer %q", resp.Trailer)
}
