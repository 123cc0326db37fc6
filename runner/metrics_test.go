package runner_test

import (
	"errors"
	"fmt"
	"testing"
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
