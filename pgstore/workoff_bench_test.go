package pgstore_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
	"github.com/jobdir/jobdir/runner"
)

func BenchmarkRunnerWorkoff(b *testing.B) {
	schema := pgtest.Schema(b)
	pool := pgtest.Pool(b, 20)
	s, err := pgstore.Open(context.Background(), pool, &pgstore.Options{Schema: schema})
	require.NoError(b, err)
	defer s.Close()
	const n = 2000
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "bench"}
	}
	_, err = s.SubmitBatch(context.Background(), specs)
	require.NoError(b, err)
	var done atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	ts := &timedStore{Store: s}
	r := runner.New(ts, &runner.Options{Concurrency: benchConc})
	r.Handle("bench", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		if done.Add(1) == n {
			cancel()
		}
		return nil, nil
	}))
	start := time.Now()
	_ = r.Run(ctx)
	b.Logf("%d jobs in %v: %.0f/s", n, time.Since(start), n/time.Since(start).Seconds())
	b.Logf("claim %d %v, await %d %v, watch %d %v, complete %d %v", ts.nc.Load(), time.Duration(ts.claim.Load()),
		ts.na.Load(), time.Duration(ts.await.Load()), ts.nw.Load(), time.Duration(ts.watch.Load()), ts.ncomp.Load(), time.Duration(ts.complete.Load()))
}

var benchConc = 10

func init() {
	if v := os.Getenv("BENCH_CONC"); v != "" {
		benchConc, _ = strconv.Atoi(v)
	}
}

type timedStore struct {
	*pgstore.Store
	claim, await, watch, complete atomic.Int64
	nc, na, nw, ncomp             atomic.Int64
}

func (t *timedStore) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	a := time.Now()
	defer func() { t.claim.Add(int64(time.Since(a))); t.nc.Add(1) }()
	return t.Store.Claim(ctx, req)
}
func (t *timedStore) AwaitWork(ctx context.Context) error {
	a := time.Now()
	defer func() { t.await.Add(int64(time.Since(a))); t.na.Add(1) }()
	return t.Store.AwaitWork(ctx)
}
func (t *timedStore) WatchCancel(ctx context.Context, l jobstore.Lease) error {
	a := time.Now()
	defer func() { t.watch.Add(int64(time.Since(a))); t.nw.Add(1) }()
	return t.Store.WatchCancel(ctx, l)
}
func (t *timedStore) Complete(ctx context.Context, l jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	a := time.Now()
	defer func() { t.complete.Add(int64(time.Since(a))); t.ncomp.Add(1) }()
	return t.Store.Complete(ctx, l, o)
}
