package runnertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
	"github.com/jobdir/jobdir/runnertest"
)

type ship struct {
	Order string `json:"order"`
}

func (ship) Kind() string { return "order.ship" }

type notify struct {
	Order string `json:"order"`
}

func (notify) Kind() string { return "order.notify" }

// TestWork: a handler's outcome, as the runner would record it, without a
// store: success and result, a failure, Permanent, RetryAfter, a panic and
// a payload that does not decode.
func TestWork(t *testing.T) {
	j := runnertest.Job(t, ship{Order: "o-1"})
	require.Equal(t, "order.ship", j.Kind)
	require.Equal(t, jobstore.StateRunning, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, runnertest.Worker, j.Worker)

	o := runnertest.Work(t.Context(), runner.TypedResult(func(ctx context.Context, job jobstore.Job, s ship) (string, error) {
		return "shipped " + s.Order, nil
	}), j)
	require.Empty(t, o.Error)
	require.JSONEq(t, `"shipped o-1"`, string(o.Result))

	o = runnertest.Work(t.Context(), runner.Typed(func(context.Context, jobstore.Job, ship) error {
		return runner.RetryAfter(errors.New("carrier busy"), time.Minute)
	}), j)
	require.Equal(t, "carrier busy", o.Error)
	require.False(t, o.Permanent)
	require.Equal(t, time.Minute, o.RetryAfter)

	o = runnertest.Work(t.Context(), runner.Typed(func(context.Context, jobstore.Job, ship) error {
		return runner.Permanent(errors.New("no such order"))
	}), j)
	require.True(t, o.Permanent)

	o = runnertest.Work(t.Context(), runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		panic("kaboom")
	}), j)
	require.Contains(t, o.Error, "panic: kaboom")

	bad := j
	bad.Payload = json.RawMessage(`{"order":1}`)
	o = runnertest.Work(t.Context(), runner.Typed(func(context.Context, jobstore.Job, ship) error { return nil }), bad)
	require.True(t, o.Permanent)
	require.Contains(t, o.Error, "does not decode as runnertest_test.ship")

	_, err := runnertest.NewJob(unencodable{C: make(chan int)})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

type unencodable struct{ C chan int }

func (unencodable) Kind() string { return "never" }

// TestWorkSaysWhyCtxEnded: an attempt whose ctx ended says why, as the
// runner's outcome does.
func TestWorkSaysWhyCtxEnded(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(runner.ErrTimeout)
	o := runner.Attempt(ctx, runner.HandlerFunc(func(ctx context.Context, _ jobstore.Job) (json.RawMessage, error) {
		return nil, ctx.Err()
	}), runnertest.Job(t, ship{}))
	require.True(t, o.TimedOut)
	require.Contains(t, o.Error, "attempt timed out")
}

// TestHarness: the jobs run to completion on the bubble's clock, a retry
// after the store's backoff included, and the job a handler submitted is
// there to see.
func TestHarness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := runnertest.New(t, nil)
		tries := 0
		runner.Register(h.Runner, func(ctx context.Context, job jobstore.Job, s ship) error {
			tries++
			if tries == 1 {
				return errors.New("carrier busy")
			}
			_, _, err := jobstore.SubmitArgs(ctx, h.Store, notify(s), jobstore.Spec{Key: "notify-" + s.Order})
			return err
		})
		var notified []string
		runner.Register(h.Runner, func(ctx context.Context, job jobstore.Job, n notify) error {
			notified = append(notified, n.Order)
			return nil
		})
		h.Start()
		began := time.Now()
		h.Submit(ship{Order: "o-1"}, jobstore.Spec{MaxAttempts: 3})
		all := h.Finish()
		require.Len(t, all, 2)
		for _, j := range all {
			require.Equal(t, jobstore.StateSucceeded, j.State, j.Kind)
		}
		require.Equal(t, 2, all[0].Attempt, "the first attempt failed and was retried")
		require.GreaterOrEqual(t, time.Since(began), jobstore.Backoff(1)/2, "the bubble's clock passed the backoff")
		follow := h.Jobs("order.notify")
		require.Len(t, follow, 1)
		require.Equal(t, "notify-o-1", follow[0].Key)
		require.Equal(t, []string{"o-1"}, notified)
	})
}
