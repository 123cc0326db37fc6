package memstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// A job's life in a memstore: submit it, claim it as a worker, complete the
// attempt, and read the result.
func ExampleStore() {
	ctx := context.Background()
	s := memstore.New(nil)
	defer s.Close()

	job, created, err := s.Submit(ctx, jobstore.Spec{
		Kind:    "email.send",
		Key:     "welcome:alice",
		Payload: json.RawMessage(`{"to":"alice@example.com"}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("submitted:", job.State, created)

	// Submitting the same key again returns the same job.
	again, created, _ := s.Submit(ctx, jobstore.Spec{Kind: "email.send", Key: "welcome:alice"})
	fmt.Println("resubmitted:", again.ID == job.ID, created)

	claimed, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "worker-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed:", claimed.State, "attempt", claimed.Attempt)

	done, err := s.Complete(ctx, claimed.Lease(), jobstore.Succeeded(json.RawMessage(`{"sent":true}`)))
	if err != nil {
		panic(err)
	}
	fmt.Println("completed:", done.State, string(done.Result))

	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "worker-1"})
	fmt.Println("nothing left:", errors.Is(err, jobstore.ErrNoJob))
	// Output:
	// submitted: queued true
	// resubmitted: true false
	// claimed: running attempt 1
	// completed: succeeded {"sent":true}
	// nothing left: true
}

// Wait blocks until another goroutine finishes the job.
func ExampleStore_Wait() {
	ctx := context.Background()
	s := memstore.New(nil)
	defer s.Close()

	job, _, _ := s.Submit(ctx, jobstore.Spec{Kind: "resize"})
	go func() {
		j, _ := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		_, _ = s.Complete(ctx, j.Lease(), jobstore.Outcome{Error: "image corrupt", Permanent: true})
	}()
	final, err := s.Wait(ctx, job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(final.State, final.LastError)
	// Output:
	// failed image corrupt
}

// A graph submitted in one call: a build, then a test and a lint that wait
// for it, then a release that waits for both. Each runs only once what it
// waits for has succeeded.
func ExampleStore_SubmitBatch_dependencies() {
	ctx := context.Background()
	s := memstore.New(nil)
	defer s.Close()

	out, err := s.SubmitBatch(ctx, []jobstore.Spec{
		{Kind: "build"},
		{Kind: "test", AfterSpecs: []int{0}},
		{Kind: "lint", AfterSpecs: []int{0}},
		{Kind: "release", AfterSpecs: []int{1, 2}},
	})
	if err != nil {
		panic(err)
	}
	for _, r := range out {
		fmt.Println(r.Job.Kind, r.Job.State)
	}
	// Run whatever is claimable until nothing is.
	for {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		if errors.Is(err, jobstore.ErrNoJob) {
			break
		}
		fmt.Println("ran", j.Kind)
		if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			panic(err)
		}
	}
	// Output:
	// build queued
	// test waiting
	// lint waiting
	// release waiting
	// ran build
	// ran test
	// ran lint
	// ran release
}
