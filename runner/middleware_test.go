package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// trace is a middleware that records name before and after the handler.
func trace(name string, mu *sync.Mutex, log *[]string) runner.Middleware {
	return func(next runner.Handler) runner.Handler {
		return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			mu.Lock()
			*log = append(*log, name+" before "+job.Kind)
			mu.Unlock()
			res, err := next.Work(ctx, job)
			mu.Lock()
			*log = append(*log, name+" after")
			mu.Unlock()
			return res, err
		})
	}
}

// TestMiddlewareOrder: every attempt of every kind goes through the
// middleware, the first outermost; what the outermost returns is the
// attempt's outcome.
func TestMiddlewareOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		var (
			mu  sync.Mutex
			log []string
		)
		tag := func(next runner.Handler) runner.Handler {
			return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
				res, err := next.Work(ctx, job)
				if err != nil {
					return nil, runner.Permanent(errors.New("tagged: " + err.Error()))
				}
				return res, nil
			})
		}
		r := runner.New(s, &runner.Options{Concurrency: 1, Middleware: []runner.Middleware{trace("a", &mu, &log), trace("b", &mu, &log), tag}})
		r.Handle("ok", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
			mu.Lock()
			log = append(log, "handler")
			mu.Unlock()
			return json.RawMessage(`1`), nil
		}))
		r.Handle("fail", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
			return nil, errors.New("broken")
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "ok"}).ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.JSONEq(t, `1`, string(j.Result))
		mu.Lock()
		require.Equal(t, []string{"a before ok", "b before ok", "handler", "b after", "a after"}, log)
		log = nil
		mu.Unlock()

		j = wait(t, s, submit(t, s, jobstore.Spec{Kind: "fail", MaxAttempts: 3}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, 1, j.Attempt, "the middleware made the error permanent")
		require.Equal(t, "tagged: broken", j.LastError)
		mu.Lock()
		require.Equal(t, []string{"a before fail", "b before fail", "b after", "a after"}, log)
		mu.Unlock()
	})
}

// TestMiddlewareMayRefuse: a middleware that does not call next fails the
// attempt without running the handler, and one that panics fails it as a
// handler's panic does.
func TestMiddlewareMayRefuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ran := false
		guard := func(next runner.Handler) runner.Handler {
			return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
				switch string(job.Payload) {
				case `"deny"`:
					return nil, runner.Permanent(errors.New("denied by policy"))
				case `"panic"`:
					panic("middleware broke")
				}
				return next.Work(ctx, job)
			})
		}
		r := runner.New(s, &runner.Options{Middleware: []runner.Middleware{guard}})
		r.Handle("k", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
			ran = true
			return nil, nil
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`"deny"`)}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, "denied by policy", j.LastError)
		j = wait(t, s, submit(t, s, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`"panic"`), MaxAttempts: 1}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.True(t, strings.HasPrefix(j.LastError, "panic: middleware broke"), j.LastError)
		require.False(t, ran)
	})
}

// TestNilMiddleware: Run refuses a nil middleware, or one that returns no
// handler, before it claims anything.
func TestNilMiddleware(t *testing.T) {
	for _, mw := range [][]runner.Middleware{
		{nil},
		{func(runner.Handler) runner.Handler { return nil }},
	} {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{Middleware: mw})
		r.Handle("k", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil }))
		j := submit(t, s, jobstore.Spec{Kind: "k"})
		err := r.Run(t.Context())
		require.ErrorContains(t, err, "runner: Options.Middleware[0]")
		got, err := s.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State, "nothing was claimed")
	}
}
