// Package runnertest helps test handlers: Work runs one on a job without a
// store and returns the outcome the runner would record, and a Harness
// runs handlers on an in-memory store until every job is finished, so that
// a test can look at what each job ended as and at the jobs its handlers
// submitted.
//
//	func TestShip(t *testing.T) {
//		o := runnertest.Work(t.Context(), runner.Typed(ship), runnertest.Job(t, Ship{Order: "o-1"}))
//		require.Empty(t, o.Error)
//	}
//
// Inside a testing/synctest bubble a Harness runs on the bubble's clock:
// the backoff between attempts, a RetryAfter and a job's RunAt pass at
// once, and the test takes no longer than its handlers' work.
package runnertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// Worker is the worker name of the jobs Job makes and of a Harness's
// runner.
const Worker = "runnertest"

// NewJob returns a job of the kind args names, with args as its payload,
// as a runner hands it to a handler: running, in its first attempt, by
// Worker. Its error, if args does not encode, wraps
// jobstore.ErrInvalidInput.
func NewJob(args jobstore.Args) (jobstore.Job, error) {
	sp, err := jobstore.NewSpec(args, jobstore.Spec{})
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("runnertest: %w", err)
	}
	now := time.Now()
	j, err := storekit.ApplyClaim(jobstore.NewJob(sp, now), Worker, now)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("runnertest: %w", err)
	}
	return j, nil
}

// Job is NewJob that fails t on an error.
func Job(t testing.TB, args jobstore.Args) jobstore.Job {
	t.Helper()
	j, err := NewJob(args)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Work runs h on job under ctx as a runner runs one attempt
// (runner.Attempt) and returns the outcome it would record.
func Work(ctx context.Context, h runner.Handler, job jobstore.Job) jobstore.Outcome {
	return runner.Attempt(ctx, h, job)
}

// Harness is a runner working from an in-memory store, for one test.
// Register handlers on Runner (runner.Register, Handle), Start it, submit
// to Store, and Finish waits until every job has finished.
type Harness struct {
	// Store holds the jobs: submit to it, read from it.
	Store *memstore.Store
	// Runner runs the handlers. Register them before Start.
	Runner *runner.Runner

	t    testing.TB
	stop context.CancelFunc
	done chan error
}

// New returns a Harness whose runner has opts (nil for the defaults, with
// Worker as its name), closed when t ends.
func New(t testing.TB, opts *runner.Options) *Harness {
	t.Helper()
	o := runner.Options{Worker: Worker}
	if opts != nil {
		o = *opts
		if o.Worker == "" {
			o.Worker = Worker
		}
	}
	s := memstore.New(nil)
	h := &Harness{Store: s, Runner: runner.New(s, &o), t: t}
	t.Cleanup(func() {
		h.Stop()
		_ = s.Close()
	})
	return h
}

// Start runs the runner until Stop or the end of the test.
func (h *Harness) Start() {
	h.t.Helper()
	if h.done != nil {
		h.t.Fatal("runnertest: Start called twice")
	}
	ctx, stop := context.WithCancel(context.WithoutCancel(h.t.Context()))
	h.stop, h.done = stop, make(chan error, 1)
	go func() { h.done <- h.Runner.Run(ctx) }()
}

// Stop stops the runner, letting running handlers finish, and fails the
// test if Run returned an error.
func (h *Harness) Stop() {
	h.t.Helper()
	if h.done == nil {
		return
	}
	h.stop()
	if err := <-h.done; err != nil {
		h.t.Errorf("runnertest: the runner stopped with: %v", err)
	}
	h.done = nil
}

// Submit submits a job of args' kind with args as its payload and spec's
// other fields (jobstore.SubmitArgs), and fails the test on an error.
func (h *Harness) Submit(args jobstore.Args, spec jobstore.Spec) jobstore.Job {
	h.t.Helper()
	j, _, err := jobstore.SubmitArgs(h.t.Context(), h.Store, args, spec)
	if err != nil {
		h.t.Fatalf("runnertest: submit: %v", err)
	}
	return j
}

// Finish waits until every job in the store has finished (succeeded,
// failed or canceled), the jobs that handlers submitted meanwhile
// included, retries and delays included, and returns every job, oldest
// first. It fails the test if the test's context ends first.
func (h *Harness) Finish() []jobstore.Job {
	h.t.Helper()
	ctx := h.t.Context()
	for {
		all := h.Jobs("")
		waited := false
		for _, j := range all {
			if j.State.Terminal() {
				continue
			}
			if _, err := h.Store.Wait(ctx, j.ID); err != nil {
				h.t.Fatalf("runnertest: wait for job %s: %v", j.ID, err)
			}
			waited = true
		}
		if !waited {
			return all
		}
	}
}

// Jobs returns the jobs of kind ("" for every kind) in the store, oldest
// first.
func (h *Harness) Jobs(kind string) []jobstore.Job {
	h.t.Helper()
	var out []jobstore.Job
	opts := jobstore.ListOptions{Kind: kind, Order: jobstore.OldestFirst, Limit: jobstore.MaxListLimit}
	for {
		p, err := h.Store.List(h.t.Context(), opts)
		if err != nil {
			h.t.Fatalf("runnertest: list: %v", err)
		}
		out = append(out, p.Jobs...)
		if p.Next == "" {
			return out
		}
		opts.Cursor = p.Next
	}
}
