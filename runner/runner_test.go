package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// start runs r in the background and returns a function that ends Run's
// ctx and returns Run's error. The runner is also stopped at cleanup.
func start(t *testing.T, r *runner.Runner) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-errc
	})
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newStore(t *testing.T, opts *memstore.Options) *memstore.Store {
	t.Helper()
	s := memstore.New(opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func submit(t *testing.T, s jobstore.Store, spec jobstore.Spec) jobstore.Job {
	t.Helper()
	j, created, err := s.Submit(t.Context(), spec)
	require.NoError(t, err)
	require.True(t, created)
	return j
}

func wait(t *testing.T, s jobstore.Store, id string) jobstore.Job {
	t.Helper()
	j, err := s.Wait(t.Context(), id)
	require.NoError(t, err)
	return j
}

// events records the events a runner reports.
type events struct {
	mu  sync.Mutex
	all []runner.Event
}

func (e *events) add(ev runner.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) of(t runner.EventType) []runner.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []runner.Event
	for _, ev := range e.all {
		if ev.Type == t {
			out = append(out, ev)
		}
	}
	return out
}

// blockUntilCanceled is a handler that reports each job it starts on
// started, then waits for ctx and reports its cause on causes.
func blockUntilCanceled(started chan<- string, causes chan<- error) runner.Handler {
	return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		started <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
}

func TestConcurrencyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, jobs = 3, 20
		s := newStore(t, nil)
		var inFlight, maxInFlight atomic.Int32
		var mu sync.Mutex
		runs := map[string]int{}
		r := runner.New(s, &runner.Options{Concurrency: limit})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := maxInFlight.Load()
				if n <= m || maxInFlight.CompareAndSwap(m, n) {
					break
				}
			}
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			time.Sleep(time.Second)
			return nil, nil
		}))
		var ids []string
		for range jobs {
			ids = append(ids, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		}
		begin := time.Now()
		start(t, r)
		for _, id := range ids {
			require.Equal(t, jobstore.StateSucceeded, wait(t, s, id).State)
		}
		require.EqualValues(t, limit, maxInFlight.Load(), "max handlers in flight")
		// 20 one-second jobs, 3 at a time: 7 rounds, each claim of which
		// may wait the claim gather while jobs are queued beyond the slots.
		requireRounds(t, 7, time.Since(begin))
		for _, id := range ids {
			require.Equal(t, 1, runs[id], "runs of job %s", id)
		}
	})
}

// Two runners on one store, with real goroutine scheduling, run every job
// exactly once.
func TestEachJobRunsOnce(t *testing.T) {
	const jobs = 300
	s := newStore(t, nil)
	var mu sync.Mutex
	runs := map[string]int{}
	workers := map[string]bool{}
	h := runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		mu.Lock()
		runs[job.ID]++
		workers[job.Worker] = true
		mu.Unlock()
		runtime.Gosched()
		return json.RawMessage(`"ok"`), nil
	})
	for range 2 {
		r := runner.New(s, &runner.Options{Concurrency: 4})
		r.Handle("work", h)
		start(t, r)
	}
	var ids []string
	for range jobs {
		ids = append(ids, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, id := range ids {
		j, err := s.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.Equal(t, 1, j.Attempt)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "runs of job %s", id)
	}
}

// A job submitted while the runner is idle starts without any (fake) time
// passing: the runner waits on the store's signal, not on a poll.
func TestNoPollingDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{PollInterval: time.Hour})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		start(t, r)
		time.Sleep(time.Minute) // idle long enough to be waiting in AwaitWork
		synctest.Wait()
		submitted := time.Now()
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.Equal(t, submitted, j.StartedAt.Local().Round(0))
		require.Zero(t, time.Since(submitted))
	})
}

// A delayed job starts exactly when it is due, even when that is long
// before the next poll.
func TestDelayedJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{PollInterval: time.Hour})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		start(t, r)
		synctest.Wait()
		due := time.Now().Add(5 * time.Second)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work", RunAt: due}).ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.True(t, j.StartedAt.Equal(due), "started at %s, due at %s", j.StartedAt, due)
	})
}

func TestCancelRunningJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		started, causes := make(chan string, 1), make(chan error, 1)
		r := runner.New(s, nil)
		r.Handle("work", blockUntilCanceled(started, causes))
		start(t, r)
		j := submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 5})
		require.Equal(t, j.ID, <-started)
		_, err := s.Cancel(t.Context(), j.ID)
		require.NoError(t, err)
		require.ErrorIs(t, <-causes, runner.ErrCanceled)
		j = wait(t, s, j.ID)
		require.Equal(t, jobstore.StateCanceled, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Contains(t, j.LastError, runner.ErrCanceled.Error())
	})
}

func TestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		jobTimeout time.Duration // Spec.Timeout
		runTimeout time.Duration // Options.JobTimeout
		want       time.Duration
	}{
		{"job", 2 * time.Second, 0, 2 * time.Second},
		{"runner", 0, 3 * time.Second, 3 * time.Second},
		{"job overrides runner", 2 * time.Second, time.Minute, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newStore(t, nil)
				started, causes := make(chan string, 1), make(chan error, 1)
				r := runner.New(s, &runner.Options{JobTimeout: tc.runTimeout})
				r.Handle("work", blockUntilCanceled(started, causes))
				start(t, r)
				j := submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1, Timeout: tc.jobTimeout})
				<-started
				began := time.Now()
				require.ErrorIs(t, <-causes, runner.ErrTimeout)
				require.Equal(t, tc.want, time.Since(began))
				j = wait(t, s, j.ID)
				require.Equal(t, jobstore.StateFailed, j.State)
				require.Contains(t, j.LastError, "context deadline exceeded")
				require.Contains(t, j.LastError, runner.ErrTimeout.Error())
				require.Equal(t, jobstore.EndTimedOut, j.History[0].End, "the history says it timed out")
			})
		})
	}
}

func TestPanicFailsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ev := &events{}
		r := runner.New(s, &runner.Options{Concurrency: 1, OnEvent: ev.add})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			if string(job.Payload) == `"boom"` {
				panicInHandler()
			}
			return json.RawMessage(`"fine"`), nil
		}))
		start(t, r)
		bad := submit(t, s, jobstore.Spec{Kind: "work", Payload: json.RawMessage(`"boom"`), MaxAttempts: 1})
		bad = wait(t, s, bad.ID)
		require.Equal(t, jobstore.StateFailed, bad.State)
		require.True(t, strings.HasPrefix(bad.LastError, "panic: kaboom"), bad.LastError)
		require.Contains(t, bad.LastError, "panicInHandler", "the stack is in LastError")

		good := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		require.Equal(t, jobstore.StateSucceeded, good.State)
		require.JSONEq(t, `"fine"`, string(good.Result))

		panics := ev.of(runner.EventPanicked)
		require.Len(t, panics, 1)
		require.Equal(t, bad.ID, panics[0].Job.ID)
		var pe *runner.PanicError
		require.ErrorAs(t, panics[0].Err, &pe)
		require.Equal(t, "kaboom", pe.Value)
	})
}

//go:noinline
func panicInHandler() { panic("kaboom") }

func TestPanicWithError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ev := &events{}
		sentinel := errors.New("sentinel")
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			panic(fmt.Errorf("wrapped: %w", sentinel))
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1}).ID)
		require.Contains(t, j.LastError, "panic: wrapped: sentinel")
		panics := ev.of(runner.EventPanicked)
		require.Len(t, panics, 1)
		require.ErrorIs(t, panics[0].Err, sentinel)
	})
}

func TestGoexitFailsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, nil)
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			runtime.Goexit()
			return nil, nil
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Contains(t, j.LastError, "Goexit")
	})
}

// A handler runs on its worker's goroutine, which a runtime.Goexit in it
// ends: another goroutine records the attempt's outcome and takes the
// worker's place, so the runner goes on with all its slots, and Run
// returns once every goroutine it started has ended (synctest fails a
// test that leaves one blocked).
func TestGoexitWorkerIsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{Concurrency: 2})
		r.Handle("exit", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			runtime.Goexit()
			return nil, nil
		}))
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			time.Sleep(time.Second)
			return nil, nil
		}))
		stop := start(t, r)
		for range 2 {
			j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "exit", MaxAttempts: 1}).ID)
			require.Equal(t, jobstore.StateFailed, j.State)
			require.Contains(t, j.LastError, "Goexit")
		}
		var ids []string
		for range 4 {
			ids = append(ids, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		}
		begin := time.Now()
		for _, id := range ids {
			require.Equal(t, jobstore.StateSucceeded, wait(t, s, id).State)
		}
		requireRounds(t, 2, time.Since(begin)) // 4 one-second jobs, 2 at a time
		require.NoError(t, stop())
	})
}

func TestRetryUntilMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Attempt n waits n seconds before attempt n+1.
		s := newStore(t, &memstore.Options{Backoff: func(n int) time.Duration { return time.Duration(n) * time.Second }})
		var mu sync.Mutex
		var starts []time.Time
		r := runner.New(s, nil)
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return nil, fmt.Errorf("boom %d", job.Attempt)
		}))
		start(t, r)
		begin := time.Now()
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 3}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, 3, j.Attempt)
		require.Equal(t, "boom 3", j.LastError)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []time.Time{begin, begin.Add(time.Second), begin.Add(3 * time.Second)}, starts)
	})
}

func TestRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, &memstore.Options{Backoff: func(int) time.Duration { return time.Hour }})
		r := runner.New(s, nil)
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			if job.Attempt == 1 {
				return nil, runner.RetryAfter(errors.New("rate limited"), 7*time.Second)
			}
			return nil, nil
		}))
		start(t, r)
		begin := time.Now()
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 7*time.Second, time.Since(begin))
	})
}

func TestPermanentFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		var calls atomic.Int32
		r := runner.New(s, nil)
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			calls.Add(1)
			return nil, fmt.Errorf("context: %w", runner.Permanent(errors.New("bad input")))
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 5}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "context: bad input", j.LastError)
		require.EqualValues(t, 1, calls.Load())
	})
}

func TestErrorWrappers(t *testing.T) {
	require.NoError(t, runner.Permanent(nil))
	require.NoError(t, runner.RetryAfter(nil, time.Second))
	base := errors.New("base")
	require.ErrorIs(t, runner.Permanent(base), base)
	require.ErrorIs(t, runner.RetryAfter(base, time.Second), base)
	require.True(t, runner.IsPermanent(fmt.Errorf("x: %w", runner.Permanent(base))))
	require.False(t, runner.IsPermanent(base))
	require.Equal(t, "base", runner.Permanent(base).Error())
}

// Shutdown stops claiming at once and waits for a running handler that
// finishes within the grace period; its outcome is recorded although Run's
// ctx has ended.
func TestShutdownWaitsForRunningHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		started := make(chan string, 1)
		r := runner.New(s, &runner.Options{Concurrency: 1, ShutdownGrace: 10 * time.Second})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job.ID
			time.Sleep(3 * time.Second) // ignores ctx, but ends within the grace
			return json.RawMessage(`"done"`), ctx.Err()
		}))
		stop := start(t, r)
		running := submit(t, s, jobstore.Spec{Kind: "work"})
		<-started
		waiting := submit(t, s, jobstore.Spec{Kind: "work"})

		time.Sleep(time.Second)
		begin := time.Now()
		require.NoError(t, stop())
		require.Equal(t, 2*time.Second, time.Since(begin), "Run returns when the handler does")

		j, err := s.Get(t.Context(), running.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.JSONEq(t, `"done"`, string(j.Result))
		j, err = s.Get(t.Context(), waiting.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State, "no claim after shutdown began")
		require.Zero(t, j.Attempt)
	})
}

// A handler still running when the grace period ends has its ctx canceled
// with ErrShutdown; Run waits for it to return, and the interrupted attempt
// is given back: queued again at once for another worker, and not counted,
// so even a job allowed one attempt is not lost to a routine restart.
func TestShutdownCancelsAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, &memstore.Options{Backoff: func(int) time.Duration { return time.Hour }})
		started, causes := make(chan string, 1), make(chan error, 1)
		r := runner.New(s, &runner.Options{ShutdownGrace: 5 * time.Second})
		r.Handle("work", blockUntilCanceled(started, causes))
		stop := start(t, r)
		j := submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1})
		<-started
		begin := time.Now()
		require.NoError(t, stop())
		require.Equal(t, 5*time.Second, time.Since(begin))
		require.ErrorIs(t, <-causes, runner.ErrShutdown)

		j, err := s.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State, "the only attempt allowed is not spent by a shutdown")
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, 2, j.MaxAttempts, "the attempt is given back")
		require.WithinDuration(t, time.Now(), j.RunAt, time.Millisecond, "due again at once, not after the hour of backoff")
		require.Empty(t, j.LastError, "an interruption is not a failure")
		require.Len(t, j.History, 1)
		require.Equal(t, jobstore.EndInterrupted, j.History[0].End)
		require.Contains(t, j.History[0].Error, runner.ErrShutdown.Error())
	})
}

// A handler that fails, or fails permanently, while the runner shuts down
// but before the grace ends is not interrupted: its attempt counts.
func TestShutdownDoesNotExcuseFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		started := make(chan string, 2)
		r := runner.New(s, &runner.Options{Concurrency: 2, ShutdownGrace: 5 * time.Second})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job.ID
			time.Sleep(time.Second) // within the grace
			return nil, errors.New("broken")
		}))
		r.Handle("permanent", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job.ID
			<-ctx.Done() // stopped by the shutdown, but says the job is bad
			return nil, runner.Permanent(errors.New("bad input"))
		}))
		stop := start(t, r)
		failing := submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1})
		permanent := submit(t, s, jobstore.Spec{Kind: "permanent", MaxAttempts: 3})
		<-started
		<-started
		require.NoError(t, stop())
		for _, id := range []string{failing.ID, permanent.ID} {
			j, err := s.Get(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateFailed, j.State, j.Kind)
			require.Equal(t, jobstore.EndFailed, j.History[0].End, j.Kind)
		}
	})
}

func TestShutdownGraceNegativeCancelsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		started, causes := make(chan string, 1), make(chan error, 1)
		r := runner.New(s, &runner.Options{ShutdownGrace: -1})
		r.Handle("work", blockUntilCanceled(started, causes))
		stop := start(t, r)
		submit(t, s, jobstore.Spec{Kind: "work"})
		<-started
		begin := time.Now()
		require.NoError(t, stop())
		require.Zero(t, time.Since(begin))
		require.ErrorIs(t, <-causes, runner.ErrShutdown)
	})
}

func TestUnknownKindsNeverClaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{PollInterval: 10 * time.Millisecond})
		r.Handle("known", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		require.Equal(t, []string{"known"}, r.Kinds())
		other := submit(t, s, jobstore.Spec{Kind: "other", Priority: 100})
		start(t, r)
		known := submit(t, s, jobstore.Spec{Kind: "known"})
		require.Equal(t, jobstore.StateSucceeded, wait(t, s, known.ID).State)
		time.Sleep(time.Minute) // many poll intervals
		j, err := s.Get(t.Context(), other.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State)
		require.Zero(t, j.Attempt)
	})
}

func TestEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ev := &events{}
		r := runner.New(s, &runner.Options{Worker: "w-1", Concurrency: 1, OnEvent: ev.add})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			time.Sleep(2 * time.Second)
			if string(job.Payload) == `"fail"` {
				return nil, runner.Permanent(errors.New("nope"))
			}
			return json.RawMessage(`1`), nil
		}))
		// Submitted before Run: each waits for the runner, then for the
		// job ahead of it.
		ok := submit(t, s, jobstore.Spec{Kind: "work"})
		bad := submit(t, s, jobstore.Spec{Kind: "work", Payload: json.RawMessage(`"fail"`)})
		time.Sleep(time.Second)
		start(t, r)
		wait(t, s, ok.ID)
		wait(t, s, bad.ID)
		// The runner emits EventFinished once Complete has returned, which
		// may be after the wait above saw the job end: let it.
		synctest.Wait()

		claimed := ev.of(runner.EventClaimed)
		require.Len(t, claimed, 2)
		require.Equal(t, ok.ID, claimed[0].Job.ID)
		require.Equal(t, "w-1", claimed[0].Worker)
		require.Equal(t, jobstore.StateRunning, claimed[0].Job.State)
		require.Equal(t, time.Second, claimed[0].QueueWait)
		require.Equal(t, bad.ID, claimed[1].Job.ID)
		require.Equal(t, 3*time.Second, claimed[1].QueueWait)

		finished := ev.of(runner.EventFinished)
		require.Len(t, finished, 2)
		require.Equal(t, jobstore.StateSucceeded, finished[0].Job.State)
		require.Equal(t, 2*time.Second, finished[0].RunDuration)
		require.JSONEq(t, `1`, string(finished[0].Outcome.Result))
		require.NoError(t, finished[0].Err)
		require.Equal(t, jobstore.StateFailed, finished[1].Job.State)
		require.True(t, finished[1].Outcome.Permanent)
		require.EqualError(t, finished[1].Err, "nope")
		require.Empty(t, ev.of(runner.EventDropped))
		require.Empty(t, ev.of(runner.EventStoreError))
		require.Equal(t, "finished", runner.EventFinished.String())
	})
}

// A result the store refuses (here: too large) fails the attempt with an
// error that says so, instead of leaving the job running.
func TestRejectedResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, &memstore.Options{MaxPayload: 16})
		r := runner.New(s, nil)
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("x", 100) + `"`), nil
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Contains(t, j.LastError, "result rejected")
	})
}

func TestStoreClosedEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil)
		started, causes := make(chan string, 1), make(chan error, 1)
		ev := &events{}
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		r.Handle("work", blockUntilCanceled(started, causes))
		errc := make(chan error, 1)
		go func() { errc <- r.Run(t.Context()) }()
		submit(t, s, jobstore.Spec{Kind: "work"})
		<-started
		require.NoError(t, s.Close())
		err := <-errc
		require.ErrorIs(t, err, jobstore.ErrClosed)
		cause := <-causes
		require.ErrorIs(t, cause, runner.ErrShutdown)
		require.ErrorIs(t, cause, jobstore.ErrClosed)
		require.Len(t, ev.of(runner.EventDropped), 1)
	})
}

// untrustedStore refuses every claim as a store others can write does.
type untrustedStore struct {
	jobstore.Store
	claims atomic.Int32
}

func (u *untrustedStore) Claim(context.Context, jobstore.ClaimRequest) (jobstore.Job, error) {
	u.claims.Add(1)
	return jobstore.Job{}, fmt.Errorf("store: claim: %w: /srv/jobs is writable by every user", jobstore.ErrUntrusted)
}

// TestUntrustedStoreEndsRun: a store that refuses to hand out jobs
// because other users can write it ends Run at once with that error,
// instead of being retried as a transient failure; nothing runs.
func TestUntrustedStoreEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &untrustedStore{Store: newStore(t, nil)}
		ev := &events{}
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		ran := false
		r.Handle("work", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
			ran = true
			return nil, nil
		}))
		submit(t, s, jobstore.Spec{Kind: "work"})
		err := r.Run(t.Context())
		require.ErrorIs(t, err, jobstore.ErrUntrusted)
		require.Contains(t, err.Error(), "/srv/jobs is writable by every user")
		require.Equal(t, int32(1), s.claims.Load(), "an untrusted store is not retried")
		require.False(t, ran)
		require.Empty(t, ev.of(runner.EventStoreError))
	})
}

// flakyStore fails some calls with a transient error.
type flakyStore struct {
	jobstore.Store
	claimFailures    atomic.Int32
	completeFailures atomic.Int32
	awaitFailures    atomic.Int32
	watchFailures    atomic.Int32
	watchNotHeld     bool
	// completeDown makes every Complete fail while it is set, as on a
	// full disk.
	completeDown atomic.Bool
	releases     atomic.Int32
}

func (f *flakyStore) AwaitWork(ctx context.Context) error {
	if f.awaitFailures.Add(-1) >= 0 {
		return errFlaky
	}
	return f.Store.AwaitWork(ctx)
}

var errFlaky = errors.New("disk hiccup")

func (f *flakyStore) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	if f.claimFailures.Add(-1) >= 0 {
		return jobstore.Job{}, errFlaky
	}
	return f.Store.Claim(ctx, req)
}

func (f *flakyStore) Release(ctx context.Context, l jobstore.Lease) error {
	f.releases.Add(1)
	return f.Store.Release(ctx, l)
}

func (f *flakyStore) Complete(ctx context.Context, l jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	if f.completeDown.Load() {
		return jobstore.Job{}, fmt.Errorf("write record: %w", errFlaky)
	}
	if f.completeFailures.Add(-1) >= 0 {
		return jobstore.Job{}, errFlaky
	}
	return f.Store.Complete(ctx, l, o)
}

func (f *flakyStore) WatchCancel(ctx context.Context, l jobstore.Lease) error {
	if f.watchNotHeld {
		return fmt.Errorf("flaky: %w", jobstore.ErrNotHeld)
	}
	if f.watchFailures.Add(-1) >= 0 {
		return errFlaky
	}
	return f.Store.WatchCancel(ctx, l)
}

func TestTransientStoreErrorsAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Store: newStore(t, nil)}
		s.claimFailures.Store(5)
		s.completeFailures.Store(3)
		ev := &events{}
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		j := submit(t, s, jobstore.Spec{Kind: "work"})
		start(t, r)
		j = wait(t, s, j.ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.Equal(t, 1, j.Attempt)
		errs := ev.of(runner.EventStoreError)
		require.Len(t, errs, 8)
		for _, e := range errs {
			require.ErrorIs(t, e.Err, errFlaky)
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent use, for logs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDroppedOutcomeReleasesJob: when Complete keeps failing past
// CompleteTimeout, the runner drops the outcome, says so in its log, and
// gives the attempt back with Release: the job does not stay running while
// the worker lives, the attempt counts, the job runs again, and Wait
// returns.
func TestDroppedOutcomeReleasesJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Store: newStore(t, nil)}
		s.completeDown.Store(true)
		ev := &events{}
		logs := &lockedBuffer{}
		r := runner.New(s, &runner.Options{
			OnEvent: ev.add, CompleteTimeout: time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			if job.Attempt == 2 {
				s.completeDown.Store(false) // the disk has room again
			}
			return json.RawMessage(`"done"`), nil
		}))
		j := submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 2})
		start(t, r)
		j = wait(t, s, j.ID)
		// The first attempt's goroutine logs its release after the store
		// took the job back, which may be after the second attempt ended.
		synctest.Wait()
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.Equal(t, 2, j.Attempt)
		require.Len(t, j.History, 2)
		require.Equal(t, jobstore.EndWorkerLost, j.History[0].End, "the given-back attempt counts as a lost worker's")
		require.Contains(t, j.History[0].Error, "could not be recorded")
		require.Equal(t, int32(1), s.releases.Load())

		dropped := ev.of(runner.EventDropped)
		require.Len(t, dropped, 1)
		require.ErrorIs(t, dropped[0].Err, context.DeadlineExceeded)
		require.ErrorIs(t, dropped[0].Err, errFlaky)
		require.Contains(t, logs.String(), "outcome dropped: complete failed")
		require.Contains(t, logs.String(), "gave the job back to the store")
	})
}

// A worker whose lease is already gone does not try to give it back.
func TestDroppedOutcomeOfLostLeaseNotReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t, nil)
		s := &flakyStore{Store: base}
		ev := &events{}
		started := make(chan jobstore.Job, 1)
		proceed := make(chan struct{})
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job
			<-proceed
			return nil, nil
		}))
		j := submit(t, s, jobstore.Spec{Kind: "work", MaxAttempts: 1})
		start(t, r)
		c := <-started
		// Another party ends the attempt first (as recovery would).
		require.NoError(t, base.Release(t.Context(), c.Lease()))
		close(proceed)
		synctest.Wait()
		require.Len(t, ev.of(runner.EventDropped), 1)
		require.ErrorIs(t, ev.of(runner.EventDropped)[0].Err, jobstore.ErrNotHeld)
		require.Zero(t, s.releases.Load())
		require.Equal(t, jobstore.StateFailed, wait(t, s, j.ID).State)
	})
}

// When the store says the lease is gone, the handler's ctx ends with
// ErrLeaseLost and its outcome is dropped.
func TestLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Store: newStore(t, nil), watchNotHeld: true}
		started, causes := make(chan string, 1), make(chan error, 1)
		ev := &events{}
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		r.Handle("work", blockUntilCanceled(started, causes))
		start(t, r)
		j := submit(t, s, jobstore.Spec{Kind: "work"})
		<-started
		cause := <-causes
		require.ErrorIs(t, cause, runner.ErrLeaseLost)
		require.ErrorIs(t, cause, jobstore.ErrNotHeld)
		synctest.Wait()
		// memstore still holds the lease, so here the outcome is recorded;
		// the cause is what the handler sees.
		j, err := s.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Contains(t, j.LastError, runner.ErrLeaseLost.Error())
	})
}

// A completion the store refuses with ErrNotHeld is dropped, and the runner
// goes on.
func TestCompleteNotHeldIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t, nil)
		ev := &events{}
		started := make(chan string, 1)
		release := make(chan struct{})
		r := runner.New(base, &runner.Options{OnEvent: ev.add, Concurrency: 1})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job.ID
			<-release
			return nil, nil
		}))
		start(t, r)
		j := submit(t, base, jobstore.Spec{Kind: "work"})
		<-started
		// Another worker's lease replaces ours: cancel, then retry and
		// claim the job as someone else.
		_, err := base.Cancel(t.Context(), j.ID)
		require.NoError(t, err)
		close(release) // the handler succeeds despite the cancel
		synctest.Wait()
		j, err = base.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State, "success after cancel is success")

		// Now the real case: the lease is gone before Complete.
		release2 := make(chan struct{})
		r2 := runner.New(base, &runner.Options{OnEvent: ev.add})
		r2.Handle("other", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started <- job.ID
			<-release2
			return nil, nil
		}))
		start(t, r2)
		j2 := submit(t, base, jobstore.Spec{Kind: "other"})
		<-started
		claimed, err := base.Get(t.Context(), j2.ID)
		require.NoError(t, err)
		// Finish the attempt behind the runner's back, as a recovery
		// would.
		_, err = base.Complete(t.Context(), claimed.Lease(), jobstore.Outcome{Error: "worker presumed dead", Permanent: true})
		require.NoError(t, err)
		close(release2)
		synctest.Wait()
		dropped := ev.of(runner.EventDropped)
		require.Len(t, dropped, 1)
		require.ErrorIs(t, dropped[0].Err, jobstore.ErrNotHeld)
		j2, err = base.Get(t.Context(), j2.ID)
		require.NoError(t, err)
		require.Equal(t, "worker presumed dead", j2.LastError, "the newer outcome stands")
	})
}

func TestHandlePanics(t *testing.T) {
	noop := runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil })
	r := runner.New(memstore.New(nil), nil)
	r.Handle("a", noop)
	require.Panics(t, func() { r.Handle("a", noop) }, "duplicate kind")
	require.Panics(t, func() { r.Handle("", noop) }, "empty kind")
	require.Panics(t, func() { r.Handle("has space", noop) }, "invalid kind")
	require.Panics(t, func() { r.Handle("b", nil) }, "nil handler")
	require.Panics(t, func() { runner.New(nil, nil) }, "nil store")
}

func TestRunErrors(t *testing.T) {
	noop := runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil })
	s := newStore(t, nil)

	require.ErrorIs(t, runner.New(s, nil).Run(t.Context()), runner.ErrNoHandlers)

	bad := runner.New(s, &runner.Options{Worker: "has space"})
	bad.Handle("a", noop)
	require.ErrorIs(t, bad.Run(t.Context()), jobstore.ErrInvalidInput)

	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, nil)
		r.Handle("a", noop)
		stop := start(t, r)
		synctest.Wait()
		require.ErrorIs(t, r.Run(t.Context()), runner.ErrRunning)
		require.Panics(t, func() { r.Handle("b", noop) }, "Handle while running")
		require.NoError(t, stop())
		// It may run again.
		stop = start(t, r)
		require.Equal(t, jobstore.StateSucceeded, wait(t, s, submit(t, s, jobstore.Spec{Kind: "a"}).ID).State)
		require.NoError(t, stop())
	})
}

func TestDefaultWorkerName(t *testing.T) {
	a, b := runner.DefaultWorkerName(), runner.DefaultWorkerName()
	require.NotEqual(t, a, b)
	require.NoError(t, jobstore.ValidateWorker(a))
	require.Contains(t, a, fmt.Sprintf("-%d-", os.Getpid()))
	r := runner.New(memstore.New(nil), nil)
	require.NoError(t, jobstore.ValidateWorker(r.Worker()))
	require.Equal(t, runtime.GOMAXPROCS(0), r.Concurrency())
}

// spuriousStore wakes AwaitWork at once, every time, and counts claims.
type spuriousStore struct {
	jobstore.Store
	claims atomic.Int64
}

func (s *spuriousStore) AwaitWork(ctx context.Context) error { return ctx.Err() }

func (s *spuriousStore) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, req)
}

// A store whose AwaitWork returns at once does not make the runner spin:
// after a run of empty wake-ups it paces its claims.
func TestSpuriousWakeupsDoNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &spuriousStore{Store: newStore(t, nil)}
		r := runner.New(s, &runner.Options{PollInterval: time.Hour})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		start(t, r)
		time.Sleep(time.Minute)
		// At most one claim per 10ms pause, plus the run before pacing.
		require.Less(t, s.claims.Load(), int64(6100))
		// Work is still picked up.
		begin := time.Now()
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.LessOrEqual(t, time.Since(begin), 10*time.Millisecond)
	})
}

// Transient failures of AwaitWork and WatchCancel are retried: the runner
// still picks up new work, and a cancel still reaches the handler.
func TestTransientWaitErrorsAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Store: newStore(t, nil)}
		s.awaitFailures.Store(3)
		s.watchFailures.Store(3)
		ev := &events{}
		started, causes := make(chan string, 1), make(chan error, 1)
		r := runner.New(s, &runner.Options{OnEvent: ev.add})
		r.Handle("work", blockUntilCanceled(started, causes))
		start(t, r)
		time.Sleep(time.Second)
		j := submit(t, s, jobstore.Spec{Kind: "work"})
		<-started
		synctest.Wait() // the watcher has used up its failures
		_, err := s.Cancel(t.Context(), j.ID)
		require.NoError(t, err)
		require.ErrorIs(t, <-causes, runner.ErrCanceled)
		require.Equal(t, jobstore.StateCanceled, wait(t, s, j.ID).State)
		require.Len(t, ev.of(runner.EventStoreError), 6)
	})
}

// kindBlindStore ignores ClaimRequest.Kinds, as a buggy store might.
type kindBlindStore struct{ jobstore.Store }

func (s kindBlindStore) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	req.Kinds = nil
	return s.Store.Claim(ctx, req)
}

// A job of a kind without a handler, handed out by a store that ignores the
// kind filter, fails its attempt with an error that says so; the runner
// does not crash.
func TestClaimedJobWithoutHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := kindBlindStore{newStore(t, nil)}
		r := runner.New(s, nil)
		r.Handle("known", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		start(t, r)
		j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "other", MaxAttempts: 1}).ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Contains(t, j.LastError, `no handler for kind "other"`)
		require.Equal(t, jobstore.StateSucceeded, wait(t, s, submit(t, s, jobstore.Spec{Kind: "known"}).ID).State)
	})
}

func TestRunWithEndedContext(t *testing.T) {
	s := newStore(t, nil)
	r := runner.New(s, nil)
	r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		return nil, nil
	}))
	j := submit(t, s, jobstore.Spec{Kind: "work"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, r.Run(ctx))
	j, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State, "nothing claimed once ctx has ended")
}

// batchCounter is a memstore that records the batches asked of
// ClaimBatch.
type batchCounter struct {
	*memstore.Store
	mu    sync.Mutex
	sizes []int
}

func (s *batchCounter) ClaimBatch(ctx context.Context, req jobstore.ClaimRequest, max int) ([]jobstore.Job, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, max)
	s.mu.Unlock()
	return s.Store.ClaimBatch(ctx, req, max)
}

// A runner on a store that claims in batches fills all its free slots with
// one ClaimBatch, never asks for more than it has free, and runs each job
// once.
func TestBatchClaimsFillFreeSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, jobs = 8, 40
		s := &batchCounter{Store: newStore(t, nil)}
		var inFlight, maxInFlight atomic.Int32
		var mu sync.Mutex
		runs := map[string]int{}
		r := runner.New(s, &runner.Options{Concurrency: limit})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
			}
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			time.Sleep(time.Second)
			return nil, nil
		}))
		var ids []string
		for range jobs {
			ids = append(ids, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		}
		begin := time.Now()
		start(t, r)
		for _, id := range ids {
			require.Equal(t, jobstore.StateSucceeded, wait(t, s, id).State)
		}
		requireRounds(t, 5, time.Since(begin)) // 40 one-second jobs, 8 at a time
		require.EqualValues(t, limit, maxInFlight.Load())
		for _, id := range ids {
			require.Equal(t, 1, runs[id], "runs of job %s", id)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		require.NotEmpty(t, s.sizes)
		require.Equal(t, limit, s.sizes[0], "the first claim fills every slot")
		for _, n := range s.sizes {
			require.LessOrEqual(t, n, limit)
			require.Greater(t, n, 1, "a single free slot is claimed with Claim")
		}
	})
}

// requireRounds checks that one-second jobs took rounds rounds: rounds
// seconds and the claim gathers of the rounds after the first (a
// millisecond each at most), never another round.
func requireRounds(t *testing.T, rounds int, took time.Duration) {
	t.Helper()
	least := time.Duration(rounds) * time.Second
	require.GreaterOrEqual(t, took, least)
	require.LessOrEqual(t, took, least+time.Duration(rounds)*time.Millisecond, "%d rounds of one-second jobs", rounds)
}

// gatedStore holds every Complete until gate is closed, and counts those
// waiting.
type gatedStore struct {
	*memstore.Store
	gate    chan struct{}
	waiting atomic.Int32
}

func (s *gatedStore) Complete(ctx context.Context, l jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	s.waiting.Add(1)
	select {
	case <-s.gate:
	case <-ctx.Done():
		return jobstore.Job{}, ctx.Err()
	}
	return s.Store.Complete(ctx, l, o)
}

// A handler's slot is free again once it returns: the next job starts
// while the outcome is being recorded. At most twice Concurrency outcomes
// are recorded at once; past that, a handler that returned keeps its
// slot, and no other job starts until an outcome is recorded.
func TestSlotFreeWhileOutcomeIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &gatedStore{Store: newStore(t, nil), gate: make(chan struct{})}
		var started atomic.Int32
		r := runner.New(s, &runner.Options{Concurrency: 1})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			started.Add(1)
			return nil, nil
		}))
		var ids []string
		for range 4 {
			ids = append(ids, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		}
		start(t, r)
		synctest.Wait()
		// The first two jobs' outcomes wait at the gate; the third job
		// ran meanwhile, and keeps the one slot, as two outcomes are
		// being recorded already; the fourth waits for that slot.
		require.EqualValues(t, 3, started.Load(), "handlers started while the first outcomes wait")
		require.EqualValues(t, 2, s.waiting.Load(), "outcomes being recorded")
		for _, id := range ids {
			j, err := s.Get(t.Context(), id)
			require.NoError(t, err)
			require.NotEqual(t, jobstore.StateSucceeded, j.State, "job %s", id)
		}
		close(s.gate)
		for _, id := range ids {
			require.Equal(t, jobstore.StateSucceeded, wait(t, s, id).State)
		}
		require.EqualValues(t, 4, started.Load())
	})
}

// staggered is a handler that runs job i of a batch for one second and i
// times 300 µs more, so that their slots free one by one.
func staggered(order *atomic.Int32) runner.Handler {
	return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		i := order.Add(1) - 1
		time.Sleep(time.Second + time.Duration(i%4)*300*time.Microsecond)
		return nil, nil
	})
}

// While jobs are queued beyond its free slots, the runner waits the claim
// gather (a millisecond) before it claims, so that the slots that free
// meanwhile are claimed for in one ClaimBatch, rather than one Claim per
// slot as each handler ends.
func TestClaimGathersFreedSlotsUnderBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, jobs = 4, 20
		s := &batchCounter{Store: newStore(t, nil)}
		var order atomic.Int32
		r := runner.New(s, &runner.Options{Concurrency: limit})
		r.Handle("work", staggered(&order))
		var ids []string
		for range jobs {
			ids = append(ids, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
		}
		start(t, r)
		for _, id := range ids {
			require.Equal(t, jobstore.StateSucceeded, wait(t, s, id).State)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		// Each round's four handlers end within 0.9 ms of each other: one
		// claim for the four of them, every round.
		require.Equal(t, []int{limit, limit, limit, limit, limit}, s.sizes)
	})
}

// An idle runner claims at once: the claim gather applies only while the
// last claim filled every slot it had.
func TestNoClaimGatherWhenSlotsWereLeftEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{Concurrency: 4, PollInterval: time.Hour})
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return nil, nil
		}))
		start(t, r)
		for range 3 {
			// One job at a time: each claim finds one job for four
			// slots, and the next job, submitted when the runner waits
			// for work again, starts the moment it is submitted.
			submitted := time.Now()
			j := wait(t, s, submit(t, s, jobstore.Spec{Kind: "work"}).ID)
			require.Equal(t, submitted, j.StartedAt.Local().Round(0))
			time.Sleep(time.Second)
			synctest.Wait()
		}
	})
}

// workerOnly hides every method of a store but the worker role's.
type workerOnly struct{ jobstore.Worker }

// TestWorkerRoleSuffices: New takes a jobstore.Worker, and a value with
// only that role's methods runs jobs to their recorded outcome, both a
// success and a retried failure.
func TestWorkerRoleSuffices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(workerOnly{s}, nil)
		r.Handle("ok", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			return json.RawMessage(`"done"`), nil
		}))
		r.Handle("flaky", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			if job.Attempt == 1 {
				return nil, errors.New("first attempt fails")
			}
			return nil, nil
		}))
		start(t, r)
		ok := wait(t, s, submit(t, s, jobstore.Spec{Kind: "ok"}).ID)
		require.Equal(t, jobstore.StateSucceeded, ok.State, ok.LastError)
		require.JSONEq(t, `"done"`, string(ok.Result))
		flaky := wait(t, s, submit(t, s, jobstore.Spec{Kind: "flaky", MaxAttempts: 2}).ID)
		require.Equal(t, jobstore.StateSucceeded, flaky.State, flaky.LastError)
		require.Equal(t, 2, flaky.Attempt)
	})
}

// claimOrder records the order of ClaimBatch calls and handler starts.
type claimOrder struct {
	*memstore.Store
	mu     sync.Mutex
	events []string
}

func (s *claimOrder) note(e string) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *claimOrder) ClaimBatch(ctx context.Context, req jobstore.ClaimRequest, max int) ([]jobstore.Job, error) {
	s.note("claim")
	return s.Store.ClaimBatch(ctx, req, max)
}

// The worker handed a claimed job runs before the claim loop claims again:
// otherwise the next claim, and what it wakes (a store's claim goroutines,
// its flush), could take the processor first, and an idle runner's one job
// would start only once another processor woke. On one processor the
// order shows: the handler starts before the second ClaimBatch, in nearly
// every trial (the scheduler takes the global queue first once in 61
// rounds), where without the yield it never does.
func TestHandlerStartsBeforeNextClaim(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const trials = 20
	first := 0
	for range trials {
		s := &claimOrder{Store: newStore(t, nil)}
		started := make(chan struct{})
		r := runner.New(s, &runner.Options{Concurrency: 4})
		r.Handle("work", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
			s.note("handler")
			close(started)
			return nil, nil
		}))
		submit(t, s, jobstore.Spec{Kind: "work"})
		stop := start(t, r)
		<-started
		require.NoError(t, stop())
		s.mu.Lock()
		require.GreaterOrEqual(t, len(s.events), 2)
		require.Equal(t, "claim", s.events[0])
		if s.events[1] == "handler" {
			first++
		}
		s.mu.Unlock()
	}
	require.GreaterOrEqual(t, first, trials*3/4, "the handler started before the next claim in %d of %d trials", first, trials)
}
