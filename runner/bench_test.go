package runner_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// BenchmarkThroughput measures how many no-op jobs per second one runner
// drains from a memstore: the runner's own overhead per job.
func BenchmarkThroughput(b *testing.B) {
	s := memstore.New(nil)
	defer s.Close()
	ctx := b.Context()
	r := runner.New(s, nil)
	r.Handle("noop", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		return nil, nil
	}))
	ids := make([]string, b.N)
	for i := range ids {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "noop"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = j.ID
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	begin := time.Now()
	go func() { done <- r.Run(runCtx) }()
	for _, id := range ids {
		if _, err := s.Wait(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(begin).Seconds(), "jobs/s")
	b.StopTimer()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLatency measures the time from Submit to the handler starting
// when the runner is idle: with a store that signals, no poll interval is
// involved.
func BenchmarkLatency(b *testing.B) {
	s := memstore.New(nil)
	defer s.Close()
	ctx := b.Context()
	started := make(chan time.Time, 1)
	r := runner.New(s, &runner.Options{PollInterval: time.Hour})
	r.Handle("ping", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		started <- time.Now()
		return nil, nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	var total time.Duration
	for b.Loop() {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "ping"})
		if err != nil {
			b.Fatal(err)
		}
		total += (<-started).Sub(j.CreatedAt)
		if _, err := s.Wait(ctx, j.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/start")
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
