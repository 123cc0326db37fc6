package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

func ExampleCheckTransition() {
	err := jobstore.CheckTransition("01ARZ3NDEKTSV4RRFFQ69G5FAV", jobstore.StateSucceeded, jobstore.StateQueued)
	fmt.Println(err)

	var te *jobstore.TransitionError
	if errors.As(err, &te) {
		fmt.Println("from", te.From, "to", te.To)
	}
	fmt.Println(errors.Is(err, jobstore.ErrInvalidTransition))
	fmt.Println(jobstore.CheckTransition("01ARZ3NDEKTSV4RRFFQ69G5FAV", jobstore.StateFailed, jobstore.StateQueued))
	// Output:
	// job 01ARZ3NDEKTSV4RRFFQ69G5FAV: cannot move from succeeded to queued
	// from succeeded to queued
	// true
	// <nil>
}

func ExampleState_Terminal() {
	for _, s := range jobstore.States() {
		fmt.Println(s, s.Terminal())
	}
	// Output:
	// waiting false
	// queued false
	// running false
	// succeeded true
	// failed true
	// canceled true
}

func ExampleParseState() {
	s, err := jobstore.ParseState("failed")
	fmt.Println(s, err)
	_, err = jobstore.ParseState("done")
	fmt.Println(errors.Is(err, jobstore.ErrInvalidInput))
	// Output:
	// failed <nil>
	// true
}

func ExampleTransitions() {
	for _, t := range jobstore.Transitions() {
		fmt.Printf("%s -> %s: %s\n", t.From, t.To, t.By)
	}
	// Output:
	// waiting -> queued: the last of its dependencies ended (succeeded, or any end with AfterAny)
	// waiting -> canceled: Cancel, or a dependency failed or was canceled (without AfterAny)
	// queued -> running: Claim
	// queued -> canceled: Cancel
	// running -> succeeded: Complete (success)
	// running -> queued: Complete (failure, attempts left) or dead-worker recovery or Release
	// running -> failed: Complete (failure, no attempts left) or dead-worker recovery or Release
	// running -> canceled: Complete after Cancel requested
	// failed -> queued: Retry
	// canceled -> queued: Retry
	// failed -> waiting: Retry of a job whose dependencies have not all ended
	// canceled -> waiting: Retry of a job whose dependencies have not all ended
}

// Backoff grows as attempt⁴ seconds with ±10% jitter, capped at an hour.
func ExampleBackoff() {
	for _, attempt := range []int{1, 2, 3, 10} {
		d := jobstore.Backoff(attempt)
		base := min(time.Duration(attempt*attempt*attempt*attempt)*time.Second, jobstore.MaxBackoff)
		fmt.Printf("attempt %d: %s ± 10%%: %v\n", attempt, base, d >= base*9/10 && d <= base*11/10)
	}
	// Output:
	// attempt 1: 1s ± 10%: true
	// attempt 2: 16s ± 10%: true
	// attempt 3: 1m21s ± 10%: true
	// attempt 10: 1h0m0s ± 10%: true
}

// resizeImage is the payload of the jobs of kind "image.resize".
type resizeImage struct {
	Path  string `json:"path"`
	Width int    `json:"width"`
}

func (resizeImage) Kind() string { return "image.resize" }

// Typed specs go in a batch like any others: NewSpec takes the kind and
// the payload from the args, the rest from the spec.
func ExampleNewSpec() {
	ctx := context.Background()
	store := memstore.New(nil)
	defer store.Close()

	var specs []jobstore.Spec
	for _, w := range []int{320, 640} {
		sp, err := jobstore.NewSpec(resizeImage{Path: "cat.png", Width: w}, jobstore.Spec{Key: fmt.Sprintf("cat-%d", w)})
		if err != nil {
			panic(err)
		}
		specs = append(specs, sp)
	}
	results, err := store.SubmitBatch(ctx, specs)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		args, err := jobstore.DecodeArgs[resizeImage](r.Job)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Job.Kind, r.Job.Key, args.Width)
	}
	// Output:
	// image.resize cat-320 320
	// image.resize cat-640 640
}

// A store whose submits go through middleware: here one that gives every
// job of a kind a priority, and one that logs what was created.
func ExampleWithSubmitMiddleware() {
	ctx := context.Background()
	store := memstore.New(nil)
	defer store.Close()
	urgent := func(next jobstore.SubmitFunc) jobstore.SubmitFunc {
		return func(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
			for i := range specs {
				if specs[i].Kind == "page.oncall" {
					specs[i].Priority = 100
				}
			}
			return next(ctx, specs)
		}
	}
	logged := func(next jobstore.SubmitFunc) jobstore.SubmitFunc {
		return func(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
			res, err := next(ctx, specs)
			for _, r := range res {
				fmt.Println("submitted", r.Job.Kind, "priority", r.Job.Priority, "created", r.Created)
			}
			return res, err
		}
	}
	client, err := jobstore.WithSubmitMiddleware(store, logged, urgent)
	if err != nil {
		panic(err)
	}
	_, _, _ = client.Submit(ctx, jobstore.Spec{Kind: "page.oncall"})
	_, _ = client.SubmitBatch(ctx, []jobstore.Spec{{Kind: "email.send", Key: "welcome-1"}, {Kind: "email.send", Key: "welcome-1"}})
	// Output:
	// submitted page.oncall priority 100 created true
	// submitted email.send priority 0 created true
	// submitted email.send priority 0 created false
}

// A program that would rather fail than queue a job nobody runs submits
// through RequireWorker.
func ExampleRequireWorker() {
	ctx := context.Background()
	store := memstore.New(nil)
	defer store.Close()
	client, err := jobstore.WithSubmitMiddleware(store, jobstore.RequireWorker(store))
	if err != nil {
		panic(err)
	}
	_, _, err = client.Submit(ctx, jobstore.Spec{Kind: "email.send"})
	fmt.Println(errors.Is(err, jobstore.ErrNoWorker))

	unregister, _ := store.RegisterWorker(ctx, jobstore.WorkerInfo{ID: "mailer-1", Kinds: []string{"email.send"}, Concurrency: 4})
	defer unregister()
	_, created, err := client.Submit(ctx, jobstore.Spec{Kind: "email.send"})
	fmt.Println(created, err)
	// Output:
	// true
	// true <nil>
}
