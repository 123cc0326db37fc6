package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/waitstorm"
	"github.com/jobdir/jobdir/jobstore"
)

// stormWaiters is how many wait long-polls BenchmarkWaitStorm holds open
// on one job (issue: "5,000 concurrent Waits through the HTTP API").
const stormWaiters = 5000

// enteredStore counts the Waits that have begun.
type enteredStore struct {
	jobstore.Store
	entered atomic.Int64
}

func (e *enteredStore) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	e.entered.Add(1)
	return e.Store.Wait(ctx, id)
}

// BenchmarkWaitStorm holds 5,000 wait long-polls open over real HTTP
// connections on one running job of a durable file store (MaxWaits raised
// to allow them), lets them settle for two poll intervals, then measures
// what they must not delay: GET /v1/jobs/{id} of that job
// (get-max-ms over 20 requests across a poll interval), the Complete of
// the worker, another process or a Store of its own in this process
// (complete-ms), and the time until every
// long-poll has answered (wake-all-ms). Run it
// with -benchtime=1x: one iteration is a whole storm. With no waiters
// (waiters=0) it measures the same calls on a quiet store: the baseline
// that the storm's figures are compared with.
func BenchmarkWaitStorm(b *testing.B) {
	for _, worker := range []string{"process", "inproc"} {
		b.Run("worker="+worker, func(b *testing.B) {
			for _, n := range []int{0, stormWaiters} {
				b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
					for b.Loop() {
						httpWaitStorm(b, n, worker == "inproc")
					}
				})
			}
		})
	}
}

func httpWaitStorm(b *testing.B, n int, inProcess bool) {
	ctx := b.Context()
	dir := b.TempDir()
	st, err := filestore.Open(ctx, dir, nil)
	require.NoError(b, err)
	defer st.Close()
	es := &enteredStore{Store: st}
	api, err := httpapi.New(es, &httpapi.Options{
		Tokens: []string{testToken}, Registry: prometheus.NewRegistry(),
		MaxWaits: n + 10, MaxWait: 5 * time.Minute,
	})
	require.NoError(b, err)
	srv := httptest.NewServer(api)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n + 10}}
	defer client.CloseIdleConnections()

	worker := waitstorm.StartWorker(b, dir, inProcess)
	j := jobstore.Job{ID: worker.ID}

	do := func(ctx context.Context, path string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get(httpapi.TerminalHeader), err
	}

	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range n {
		wg.Go(func() {
			code, terminal, err := do(wctx, "/v1/jobs/"+j.ID+"/wait?timeout=4m")
			if err != nil || code != http.StatusOK || terminal != "true" {
				failed.Add(1)
			}
		})
	}
	for es.entered.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	// The load of waiters that poll is periodic: let every waiter go
	// through a poll or two before measuring.
	time.Sleep(2 * filestore.DefaultPollInterval)

	var gets []time.Duration
	for range 20 {
		t0 := time.Now()
		code, _, err := do(ctx, "/v1/jobs/"+j.ID)
		gets = append(gets, time.Since(t0))
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, code)
		time.Sleep(filestore.DefaultPollInterval / 20)
	}
	t0 := time.Now()
	completed := worker.Complete(b)
	wg.Wait()
	woke := time.Since(t0)
	require.Zero(b, failed.Load(), "long-polls that did not see the job succeed")

	waitstorm.Report(b, completed, gets, woke)
}
