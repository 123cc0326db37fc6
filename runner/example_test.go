package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// A runner executes jobs as they are submitted, until its ctx ends.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	store := memstore.New(nil)
	defer store.Close()

	r := runner.New(store, &runner.Options{Concurrency: 4})
	r.Handle("greet", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		var p struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return nil, runner.Permanent(fmt.Errorf("bad payload: %w", err))
		}
		return json.Marshal("hello, " + p.Name)
	}))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	job, _, err := store.Submit(ctx, jobstore.Spec{Kind: "greet", Payload: json.RawMessage(`{"name":"world"}`)})
	if err != nil {
		panic(err)
	}
	job, err = store.Wait(ctx, job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(job.State, string(job.Result))

	stop() // graceful shutdown
	fmt.Println("run returned:", <-done)
	// Output:
	// succeeded "hello, world"
	// run returned: <nil>
}

// A handler error wrapped with Permanent fails the job at once, even though
// attempts remain; other errors are retried with the store's backoff.
func ExamplePermanent() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	store := memstore.New(nil)
	defer store.Close()

	r := runner.New(store, nil)
	r.Handle("charge", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		return nil, runner.Permanent(errors.New("card declined"))
	}))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	job, _, err := store.Submit(ctx, jobstore.Spec{Kind: "charge", MaxAttempts: 5})
	if err != nil {
		panic(err)
	}
	if job, err = store.Wait(ctx, job.ID); err != nil {
		panic(err)
	}
	fmt.Printf("%s after %d of %d attempts: %s\n", job.State, job.Attempt, job.MaxAttempts, job.LastError)
	stop()
	<-done
	// Output:
	// failed after 1 of 5 attempts: card declined
}

// Cancel reaches a running handler through its ctx; context.Cause says why.
func ExampleErrCanceled() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	store := memstore.New(nil)
	defer store.Close()

	started := make(chan string)
	r := runner.New(store, nil)
	r.Handle("export", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		started <- job.ID
		<-ctx.Done()
		fmt.Println("handler stopped, canceled:", errors.Is(context.Cause(ctx), runner.ErrCanceled))
		return nil, ctx.Err()
	}))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	if _, _, err := store.Submit(ctx, jobstore.Spec{Kind: "export"}); err != nil {
		panic(err)
	}
	id := <-started
	if _, err := store.Cancel(ctx, id); err != nil {
		panic(err)
	}
	job, err := store.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(job.State)
	stop()
	<-done
	// Output:
	// handler stopped, canceled: true
	// canceled
}

// greeting is the payload of the jobs of kind "greeting".
type greeting struct {
	Name string `json:"name"`
}

func (greeting) Kind() string { return "greeting" }

// A typed handler gets its job's payload decoded into the type that names
// the job's kind; jobstore.SubmitArgs submits a value of it.
func ExampleRegisterResult() {
	ctx, stop := context.WithCancel(context.Background())
	store := memstore.New(nil)
	defer store.Close()

	r := runner.New(store, nil)
	runner.RegisterResult(r, func(ctx context.Context, job jobstore.Job, g greeting) (string, error) {
		return "hello, " + g.Name, nil
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	job, _, err := jobstore.SubmitArgs(ctx, store, greeting{Name: "world"}, jobstore.Spec{Key: "greet-world"})
	if err != nil {
		panic(err)
	}
	if job, err = store.Wait(ctx, job.ID); err != nil {
		panic(err)
	}
	fmt.Println(job.Kind, job.State, string(job.Result))
	stop()
	<-done
	// Output:
	// greeting succeeded "hello, world"
}

// A middleware wraps every attempt, of every kind: here it logs each
// attempt's start and outcome.
func ExampleMiddleware() {
	ctx, stop := context.WithCancel(context.Background())
	store := memstore.New(nil)
	defer store.Close()

	logAttempts := func(next runner.Handler) runner.Handler {
		return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			fmt.Printf("%s attempt %d: start\n", job.Kind, job.Attempt)
			res, err := next.Work(ctx, job)
			fmt.Printf("%s attempt %d: error %v\n", job.Kind, job.Attempt, err)
			return res, err
		})
	}
	r := runner.New(store, &runner.Options{Middleware: []runner.Middleware{logAttempts}})
	runner.Register(r, func(ctx context.Context, job jobstore.Job, g greeting) error {
		if job.Attempt == 1 {
			return runner.RetryAfter(errors.New("not yet"), time.Millisecond)
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	job, _, err := jobstore.SubmitArgs(ctx, store, greeting{Name: "world"}, jobstore.Spec{})
	if err != nil {
		panic(err)
	}
	if job, err = store.Wait(ctx, job.ID); err != nil {
		panic(err)
	}
	fmt.Println(job.State)
	stop()
	<-done
	// Output:
	// greeting attempt 1: start
	// greeting attempt 1: error not yet
	// greeting attempt 2: start
	// greeting attempt 2: error <nil>
	// succeeded
}

// A middleware that learns what became of each attempt once the store
// recorded it: here, whether a failure is retried.
func ExampleAfterAttempt() {
	ctx, stop := context.WithCancel(context.Background())
	store := memstore.New(nil)
	defer store.Close()

	ended := make(chan string, 2)
	logEnds := func(next runner.Handler) runner.Handler {
		return runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			runner.AfterAttempt(ctx, func(e runner.AttemptEnd) {
				ended <- fmt.Sprintf("attempt %d of %s: %s", job.Attempt, job.Kind, e.Job.State)
			})
			return next.Work(ctx, job)
		})
	}
	r := runner.New(store, &runner.Options{Middleware: []runner.Middleware{logEnds}})
	r.Handle("sync", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		if job.Attempt == 1 {
			return nil, runner.RetryAfter(errors.New("busy"), time.Millisecond)
		}
		return nil, nil
	}))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	if _, _, err := store.Submit(ctx, jobstore.Spec{Kind: "sync"}); err != nil {
		panic(err)
	}
	fmt.Println(<-ended)
	fmt.Println(<-ended)
	stop()
	<-done
	// Output:
	// attempt 1 of sync: queued
	// attempt 2 of sync: succeeded
}
