package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// claimOneChild is the second process of
// TestWaitSeesAnotherProcessFinishTheJob (started through
// internal/testproc): it claims one job from the store in args[0] and
// completes it.
func claimOneChild(args []string) int {
	if err := claimOne(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "claim one:", err)
		return 1
	}
	return 0
}

func claimOne(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := filestore.Open(ctx, dir, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		job, err := st.Claim(ctx, jobstore.ClaimRequest{Worker: "child-worker"})
		if errors.Is(err, jobstore.ErrNoJob) {
			if err := st.AwaitWork(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		_, err = st.Complete(ctx, job.Lease(), jobstore.Succeeded(json.RawMessage(`{"by":"child"}`)))
		return err
	}
}

// The production store shared by two processes: a wait served by this
// process returns when another process finishes the job.
func TestWaitSeesAnotherProcessFinishTheJob(t *testing.T) {
	dir := t.TempDir()
	st, err := filestore.Open(t.Context(), dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	api, err := httpapi.New(st, &httpapi.Options{Tokens: []string{testToken}, Registry: reg})
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := &env{t: t, api: api, srv: srv, client: srv.Client(), token: testToken}

	job := e.submit("report", "")
	got := make(chan response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/jobs/"+job.ID+"/wait?timeout=1m", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := e.client.Do(req)
		if err != nil {
			got <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- response{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	require.Eventually(t, func() bool {
		return gaugeValue(t, reg, "jobdir_http_requests_in_flight", "GET /v1/jobs/{id}/wait") > 0
	}, 30*time.Second, 5*time.Millisecond)

	out, err := testproc.Run(t.Context(), t, "claim-one", &testproc.Options{Args: []string{dir}})
	require.NoError(t, err, "child worker: %s", out)

	select {
	case r := <-got:
		done := r.job(t, http.StatusOK)
		require.Equal(t, "true", r.header.Get(httpapi.TerminalHeader))
		require.Equal(t, jobstore.StateSucceeded, done.State)
		require.Equal(t, "child-worker", done.Worker)
		require.JSONEq(t, `{"by":"child"}`, string(done.Result))
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not return after another process finished the job")
	}
	// Errors from the production store map like memstore's.
	e.do("POST", "/v1/jobs/"+job.ID+"/retry", "").apiError(t, http.StatusConflict, httpapi.CodeInvalidTransition)
	e.do("GET", "/v1/jobs/"+jobstore.NewID(time.Now()), "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

// The batch submit on the production store: order, created flags and keys
// as on memstore, and a refused batch leaves nothing on disk.
func TestSubmitBatchOnFilestore(t *testing.T) {
	st, err := filestore.Open(t.Context(), t.TempDir(), &filestore.Options{MaxPayload: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	api, err := httpapi.New(st, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := &env{t: t, api: api, srv: srv, client: srv.Client(), token: testToken}

	existing := e.submit("report", "nightly")
	res := e.batch(batchOf(
		`{"kind":"a","key":"k1"}`,
		`{"kind":"report","key":"nightly"}`,
		`{"kind":"b","payload":{"n":1}}`,
		`{"kind":"a","key":"k1"}`,
	))
	require.Len(t, res, 4)
	for i, want := range []bool{true, false, true, false} {
		require.Equal(t, want, res[i].Created, "results[%d]", i)
	}
	require.Equal(t, existing.ID, res[1].Job.ID)
	require.Equal(t, res[0].Job.ID, res[3].Job.ID)
	require.Less(t, res[0].Job.ID, res[2].Job.ID)
	got := e.do("GET", "/v1/jobs/"+res[2].Job.ID, "").job(t, http.StatusOK)
	require.JSONEq(t, `{"n":1}`, string(got.Payload))
	requireQueued(t, st, 3)

	ae := e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"c"}`, `{"kind":"c","max_attempts":-1}`)).
		apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
	require.Contains(t, ae.Message, "jobs[1]: ")
	e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"c"}`, `{"kind":"c","payload":"`+strings.Repeat("x", 2000)+`"}`)).
		apiError(t, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge)
	requireQueued(t, st, 3)
}
