package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
)

func TestWaitReturnsWhenAnotherGoroutineCompletesTheJob(t *testing.T) {
	e := newEnv(t, nil, nil)
	job := e.submit("k", "")

	done := make(chan response, 1)
	go func() {
		// Not e.do: require must not be called off the test goroutine.
		req, _ := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+"/v1/jobs/"+job.ID+"/wait?timeout=1m", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := e.client.Do(req)
		if err != nil {
			done <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- response{status: resp.StatusCode, header: resp.Header, body: b}
	}()

	claimed, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w1"})
	require.NoError(t, err)
	select {
	case r := <-done:
		t.Fatalf("wait returned before the job finished: %d %s", r.status, r.body)
	case <-time.After(50 * time.Millisecond):
	}
	_, err = e.store.Complete(t.Context(), claimed.Lease(), jobstore.Succeeded(json.RawMessage(`{"ok":true}`)))
	require.NoError(t, err)

	select {
	case r := <-done:
		got := r.job(t, http.StatusOK)
		require.Equal(t, jobstore.StateSucceeded, got.State)
		require.JSONEq(t, `{"ok":true}`, string(got.Result))
		require.Equal(t, "true", r.header.Get(httpapi.TerminalHeader))
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return after the job succeeded")
	}
}

func TestWaitTimeoutReturnsTheCurrentJob(t *testing.T) {
	e := newEnv(t, nil, nil)
	job := e.submit("k", "")
	for _, q := range []string{"?timeout=20ms", "?timeout=0s"} {
		r := e.do("GET", "/v1/jobs/"+job.ID+"/wait"+q, "")
		got := r.job(t, http.StatusOK)
		require.Equal(t, job.ID, got.ID)
		require.Equal(t, jobstore.StateQueued, got.State)
		require.Equal(t, "false", r.header.Get(httpapi.TerminalHeader))
	}

	_, err := e.store.Cancel(t.Context(), job.ID)
	require.NoError(t, err)
	r := e.do("GET", "/v1/jobs/"+job.ID+"/wait", "")
	require.Equal(t, jobstore.StateCanceled, r.job(t, http.StatusOK).State)
	require.Equal(t, "true", r.header.Get(httpapi.TerminalHeader))
}

func TestWaitErrors(t *testing.T) {
	e := newEnv(t, nil, nil)
	job := e.submit("k", "")
	for _, q := range []string{"?timeout=soon", "?timeout=-1s", "?timeout=1s&timeout=2s", "?wait=1s", "?timeout=%zz"} {
		e.do("GET", "/v1/jobs/"+job.ID+"/wait"+q, "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	}
	e.do("GET", "/v1/jobs/"+jobstore.NewID(time.Now())+"/wait?timeout=5s", "").
		apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("GET", "/v1/jobs/nope/wait", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
}

func TestWaitIsCappedByMaxWait(t *testing.T) {
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, MaxWait: 50 * time.Millisecond}, nil)
	job := e.submit("k", "")
	start := time.Now()
	r := e.do("GET", "/v1/jobs/"+job.ID+"/wait?timeout=1h", "")
	require.Equal(t, jobstore.StateQueued, r.job(t, http.StatusOK).State)
	require.Equal(t, "false", r.header.Get(httpapi.TerminalHeader))
	require.Less(t, time.Since(start), 30*time.Second)
}

// serve runs NewHTTPServer(h) on a loopback listener until the test ends.
func serve(t *testing.T, h http.Handler, tweak func(*http.Server)) (*http.Server, string) {
	t.Helper()
	srv := httpapi.NewHTTPServer("127.0.0.1:0", h)
	if tweak != nil {
		tweak(srv)
	}
	ln, err := net.Listen("tcp", srv.Addr)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	return srv, "http://" + ln.Addr().String()
}

func TestNewHTTPServerTimeouts(t *testing.T) {
	srv := httpapi.NewHTTPServer(":0", http.NotFoundHandler())
	require.Positive(t, srv.ReadHeaderTimeout)
	require.Positive(t, srv.ReadTimeout)
	require.Positive(t, srv.WriteTimeout)
	require.Positive(t, srv.IdleTimeout)
	require.Positive(t, srv.MaxHeaderBytes)
}

func TestWaitOutlivesTheServerTimeouts(t *testing.T) {
	e := newEnv(t, nil, nil)
	job := e.submit("k", "")
	_, url := serve(t, e.api, func(s *http.Server) {
		s.ReadTimeout = 100 * time.Millisecond
		s.WriteTimeout = 100 * time.Millisecond
	})
	req, err := http.NewRequestWithContext(t.Context(), "GET", url+"/v1/jobs/"+job.ID+"/wait?timeout=700ms", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "the connection's deadlines cut the long-poll short")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "false", resp.Header.Get(httpapi.TerminalHeader))
	http.DefaultClient.CloseIdleConnections()
}

func TestShutdownEndsWaits(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, Registry: reg}, nil)
	job := e.submit("k", "")
	srv, url := serve(t, e.api, nil)

	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	got := make(chan response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url+"/v1/jobs/"+job.ID+"/wait?timeout=1m", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client.Do(req)
		if err != nil {
			got <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- response{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	// Let the request reach the handler: the job is queued, so the wait
	// blocks until Shutdown.
	require.Eventually(t, func() bool {
		return gaugeValue(t, reg, "jobdir_http_requests_in_flight", "GET /v1/jobs/{id}/wait") > 0
	}, 30*time.Second, 5*time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, srv.Shutdown(ctx))
	require.Less(t, time.Since(start), 20*time.Second, "Shutdown waited for the long-poll")
	r := <-got
	require.Equal(t, jobstore.StateQueued, r.job(t, http.StatusOK).State)
	require.Equal(t, "false", r.header.Get(httpapi.TerminalHeader))
}

// gaugeValue returns the value of the gauge name with the label route in
// reg, or 0 if there is none.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, route string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}
