package filestore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/waitstorm"
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
// Store (get-max-ms over 20 Gets across a poll interval), the Complete of
// the worker, another process or a Store of its own in this process
// (complete-ms), and the time until every
// Wait has returned (wake-all-ms). Run it with
// -benchtime=1x: one iteration is a whole storm. With no waiters
// (waiters=0) it measures the same calls on a quiet store: the baseline
// that the storm's figures are compared with.
func BenchmarkWaitStorm(b *testing.B) {
	for _, worker := range []string{"process", "inproc"} {
		b.Run("worker="+worker, func(b *testing.B) {
			for _, n := range []int{0, waitStormWaiters} {
				b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
					for b.Loop() {
						waitStorm(b, n, worker == "inproc")
					}
				})
			}
		})
	}
}

func waitStorm(b *testing.B, n int, inProcess bool) {
	ctx := b.Context()
	dir := b.TempDir()
	readers, err := filestore.Open(ctx, dir, nil)
	require.NoError(b, err)
	defer readers.Close()
	es := &enteredStore{Store: readers}
	worker := waitstorm.StartWorker(b, dir, inProcess)
	j := jobstore.Job{ID: worker.ID}

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
	completed := worker.Complete(b)
	wg.Wait()
	woke := time.Since(t0)
	require.Zero(b, failed.Load(), "waits that did not see the job succeed")

	waitstorm.Report(b, completed, gets, woke)
}
