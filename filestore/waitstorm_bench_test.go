package filestore_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// waitStormWaiters is how many Waits BenchmarkWaitStorm runs on one job
// (issue: "5,000 concurrent Waits on a running job").
const waitStormWaiters = 5000

// enteredStore counts the Waits that have begun.
type enteredStore struct {
	*filestore.Store
	entered atomic.Int64
}

func (e *enteredStore) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	e.entered.Add(1)
	return e.Store.Wait(ctx, id)
}

// BenchmarkWaitStorm runs 5,000 concurrent Waits on one running job of a
// durable store, lets them settle for two poll intervals, then measures
// what readers must not delay: a Get of that job through the waiters'
// Store (get-max-ms over 20 Gets across a poll interval), the worker's
// Complete through a second Store of the same process (complete-ms),
// and the time until every Wait has returned (wake-all-ms). Run it with
// -benchtime=1x: one iteration is a whole storm.
func BenchmarkWaitStorm(b *testing.B) {
	for b.Loop() {
		waitStorm(b, waitStormWaiters)
	}
}

func waitStorm(b *testing.B, n int) {
	ctx := b.Context()
	dir := b.TempDir()
	readers, err := filestore.Open(ctx, dir, nil)
	require.NoError(b, err)
	defer readers.Close()
	worker, err := filestore.Open(ctx, dir, nil)
	require.NoError(b, err)
	defer worker.Close()
	es := &enteredStore{Store: readers}

	j, _, err := worker.Submit(ctx, jobstore.Spec{Kind: "k", Payload: []byte(`{"n":1}`)})
	require.NoError(b, err)
	c, err := worker.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(b, err)

	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range n {
		wg.Go(func() {
			got, err := es.Wait(wctx, j.ID)
			if err != nil || got.State != jobstore.StateSucceeded {
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
		_, err := readers.Get(ctx, j.ID)
		gets = append(gets, time.Since(t0))
		require.NoError(b, err)
		time.Sleep(filestore.DefaultPollInterval / 20)
	}
	t0 := time.Now()
	_, err = worker.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	completed := time.Since(t0)
	require.NoError(b, err)
	wg.Wait()
	woke := time.Since(t0)
	require.Zero(b, failed.Load(), "waits that did not see the job succeed")

	b.ReportMetric(ms(completed), "complete-ms")
	b.ReportMetric(ms(slices.Max(gets)), "get-max-ms")
	slices.Sort(gets)
	b.ReportMetric(ms(gets[len(gets)/2]), "get-p50-ms")
	b.ReportMetric(ms(woke), "wake-all-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
