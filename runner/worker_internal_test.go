package runner

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// workerGoroutines counts the goroutines of this process that are a
// runner's worker.
func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "runner.(*loop).worker(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestWorkerGoroutinesReused runs 50 jobs one after another on a runner
// of concurrency 1: the jobs share one or two worker goroutines (one may
// still be giving back its slot when the next job is claimed), which wait
// for the next job, and none is left once Run returns.
func TestWorkerGoroutinesReused(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(nil)
	defer s.Close()
	r := New(s, &Options{Concurrency: 1})
	r.Handle("k", HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil }))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	for range 50 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		j, err = s.Wait(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State)
	}
	require.Eventually(t, func() bool { return workerGoroutines() >= 1 }, 5*time.Second, time.Millisecond, "a worker waits for the next job")
	assert.LessOrEqual(t, workerGoroutines(), 2, "workers after 50 jobs")
	stop()
	require.NoError(t, <-done)
	assert.Zero(t, workerGoroutines(), "workers after Run returned")
}
