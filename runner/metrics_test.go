package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// callLog is a runner.Metrics that writes each call as a line.
type callLog []string

func (c *callLog) ObserveClaim(kind string, queueWait time.Duration) {
	*c = append(*c, fmt.Sprintf("claim %s %s", kind, queueWait))
}

func (c *callLog) ObserveFinish(kind string, state jobstore.State, d time.Duration) {
	*c = append(*c, fmt.Sprintf("finish %s %s %s", kind, state, d))
}

func (c *callLog) ObserveDrop(kind string)  { *c = append(*c, "drop "+kind) }
func (c *callLog) ObservePanic(kind string) { *c = append(*c, "panic "+kind) }
func (c *callLog) ObserveStoreError()       { *c = append(*c, "store error") }

// TestFeedMetrics: FeedMetrics reports each type of event to the method of
// runner.Metrics that counts it, with the event's kind, state and
// durations, and ignores an event of a type it does not know.
func TestFeedMetrics(t *testing.T) {
	job := func(kind string, state jobstore.State) jobstore.Job { return jobstore.Job{Kind: kind, State: state} }
	var got callLog
	feed := runner.FeedMetrics(&got)
	for _, ev := range []runner.Event{
		{Type: runner.EventClaimed, Job: job("a", jobstore.StateRunning), QueueWait: 2 * time.Second},
		{Type: runner.EventFinished, Job: job("a", jobstore.StateSucceeded), RunDuration: 3 * time.Second},
		{Type: runner.EventFinished, Job: job("b", jobstore.StateQueued), RunDuration: time.Millisecond, Err: errors.New("retry")},
		{Type: runner.EventPanicked, Job: job("c", jobstore.StateRunning), Err: errors.New("boom")},
		{Type: runner.EventDropped, Job: job("c", jobstore.StateRunning), RunDuration: time.Second},
		{Type: runner.EventStoreError, Err: errors.New("disk full")},
		{Type: runner.EventType(99)},
	} {
		feed(ev)
	}
	require.Equal(t, callLog{
		"claim a 2s",
		"finish a succeeded 3s",
		"finish b queued 1ms",
		"panic c",
		"drop c",
		"store error",
	}, got)
}

// syncLog is a callLog safe for the runner's goroutines.
type syncLog struct {
	mu  sync.Mutex
	log callLog
}

func (c *syncLog) do(f func(*callLog)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.log)
}
func (c *syncLog) ObserveClaim(kind string, w time.Duration) {
	c.do(func(l *callLog) { l.ObserveClaim(kind, 0) })
}
func (c *syncLog) ObserveFinish(kind string, st jobstore.State, d time.Duration) {
	c.do(func(l *callLog) { l.ObserveFinish(kind, st, 0) })
}
func (c *syncLog) ObserveDrop(kind string)  { c.do(func(l *callLog) { l.ObserveDrop(kind) }) }
func (c *syncLog) ObservePanic(kind string) { c.do(func(l *callLog) { l.ObservePanic(kind) }) }
func (c *syncLog) ObserveStoreError()       { c.do(func(l *callLog) { l.ObserveStoreError() }) }

// TestMetricsThroughMiddleware: Options.Metrics reports a runner's
// attempts through MetricsMiddleware, outside Options.Middleware: each
// claim, the state the store recorded (a failure queued for a retry, then
// failed for good), a panic, and a dropped outcome; the middleware of the
// program sees the same ends through AfterAttempt.
func TestMetricsThroughMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t, nil)
		got := &syncLog{}
		var (
			endsMu sync.Mutex
			ends   []string
		)
		seeEnds := func(next runner.Handler) runner.Handler {
			return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
				require.True(t, runner.AfterAttempt(ctx, func(e runner.AttemptEnd) {
					endsMu.Lock()
					defer endsMu.Unlock()
					ends = append(ends, fmt.Sprintf("%s %s recorded=%v", job.Kind, e.Job.State, e.Recorded))
				}))
				return next.Work(ctx, job)
			})
		}
		r := runner.New(base, &runner.Options{Concurrency: 1, Metrics: got, Middleware: []runner.Middleware{seeEnds}})
		started := make(chan jobstore.Job, 1)
		proceed := make(chan struct{})
		r.Handle("ok", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil }))
		r.Handle("flaky", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
			return nil, runner.RetryAfter(errors.New("again"), time.Second)
		}))
		r.Handle("boom", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { panic("boom") }))
		r.Handle("lost", runner.HandlerFunc(func(_ context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job
			<-proceed
			return nil, nil
		}))
		start(t, r)
		// One at a time, so that the calls come in this order.
		for _, spec := range []jobstore.Spec{{Kind: "ok"}, {Kind: "flaky", MaxAttempts: 2}, {Kind: "boom", MaxAttempts: 1}} {
			wait(t, base, submit(t, base, spec).ID)
			synctest.Wait()
		}
		j := submit(t, base, jobstore.Spec{Kind: "lost", MaxAttempts: 1})
		c := <-started
		require.NoError(t, base.Release(t.Context(), c.Lease())) // as recovery would
		close(proceed)
		wait(t, base, j.ID)
		synctest.Wait()

		got.mu.Lock()
		defer got.mu.Unlock()
		require.Equal(t, callLog{
			"claim ok 0s", "finish ok succeeded 0s",
			"claim flaky 0s", "finish flaky queued 0s", "claim flaky 0s", "finish flaky failed 0s",
			"claim boom 0s", "panic boom", "finish boom failed 0s",
			"claim lost 0s", "drop lost",
		}, got.log)
		endsMu.Lock()
		defer endsMu.Unlock()
		require.Equal(t, []string{"ok succeeded recorded=true", "flaky queued recorded=true", "flaky failed recorded=true",
			"boom failed recorded=true", "lost running recorded=false"}, ends)
		require.False(t, runner.AfterAttempt(t.Context(), func(runner.AttemptEnd) {}), "a ctx that is not an attempt's")
	})
}
