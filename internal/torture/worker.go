package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// task is a torture job's payload: what the worker's handler does with it.
type task struct {
	// Class names the scenario the submitter meant (see newSpec).
	Class string `json:"class"`
	// SleepMS is how long the handler works.
	SleepMS int `json:"sleep_ms"`
	// FailAttempts makes attempts 1..FailAttempts fail.
	FailAttempts int `json:"fail_attempts,omitempty"`
	// Permanent makes those failures permanent.
	Permanent bool `json:"permanent,omitempty"`
}

// Job kinds: tree jobs run programs through execjob (see tree.go).
const (
	kindTorture = "torture"
	kindTree    = "torture-tree"
)

// Outcome labels written in end markers.
const (
	outcomeOK       = "ok"
	outcomeFailed   = "failed"
	outcomeCanceled = "canceled"
	outcomeTimeout  = "timeout"
	// outcomeLost ends an attempt whose lease the worker lost while it
	// lived (its connections to the store's server were cut).
	outcomeLost = "lost"
)

// retryAfter is the pause before a failed torture job's next attempt: short,
// so that retries happen within a run.
const retryAfter = 50 * time.Millisecond

var (
	errCanceled  = errors.New("cancel requested")
	errTimeout   = errors.New("attempt timed out")
	errLeaseLost = errors.New("lease lost")
)

// startLine is the content of the start marker of the attempt j that
// worker name claimed: the worker, its PID, now on CLOCK_MONOTONIC, and the
// moment of the claim on that clock, from j.StartedAt (which the store sets
// before its claim takes effect). A lease can only be lost to a cut after
// the claim, which may come before the start marker.
func startLine(name string, j jobstore.Job) string {
	now := monoNow()
	claimed := now
	if !j.StartedAt.IsZero() {
		claimed = now - max(int64(time.Since(j.StartedAt)), 0)
	}
	return fmt.Sprintf("%s\t%d\t%d\t%d\n", name, os.Getpid(), now, claimed)
}

func markerName(id string, attempt int, kind string) string {
	return fmt.Sprintf("%s.%d.%s", id, attempt, kind)
}

// runWorker claims and runs jobs with spec.Concurrency goroutines until ctx
// ends. An attempt in progress when ctx ends runs to its end: a SIGTERM is a
// graceful stop, only SIGKILL abandons an attempt.
func runWorker(ctx context.Context, st jobstore.Worker, rec *recorder, spec childSpec) error {
	n := max(spec.Concurrency, 1)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = workLoop(ctx, st, rec, spec.Name) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func workLoop(ctx context.Context, st jobstore.Worker, rec *recorder, name string) error {
	for ctx.Err() == nil {
		// Tree jobs need execjob, which only runner workers run.
		j, err := st.Claim(ctx, jobstore.ClaimRequest{Worker: name, Kinds: []string{kindTorture}})
		if rec.isTransient(err) {
			rec.transientError("claim", err)
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		if errors.Is(err, jobstore.ErrNoJob) {
			wait := 250 * time.Millisecond
			var nj *jobstore.NoJobError
			if errors.As(err, &nj) && !nj.NextRunAt.IsZero() {
				wait = min(wait, max(time.Until(nj.NextRunAt), time.Millisecond))
			}
			actx, cancel := context.WithTimeout(ctx, wait)
			err = st.AwaitWork(actx)
			cancel()
			if rec.isTransient(err) {
				rec.transientError("await work", err)
				continue
			}
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("await work: %w", err)
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("claim: %w", err)
		}
		if err := runAttempt(context.WithoutCancel(ctx), st, rec, name, j); err != nil {
			return err
		}
	}
	return nil
}

// runAttempt runs one claimed attempt: start marker, handler (canceled by
// WatchCancel or the job's timeout), end marker, Complete.
func runAttempt(ctx context.Context, st jobstore.Worker, rec *recorder, name string, j jobstore.Job) error {
	lease := j.Lease()
	existed, err := rec.marker(markerName(j.ID, j.Attempt, "start"), startLine(name, j))
	if err != nil {
		return fmt.Errorf("start marker: %w", err)
	}
	if existed {
		rec.violation("job %s attempt %d was handed out twice: its start marker exists", j.ID, j.Attempt)
	}

	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if j.Timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, j.Timeout, errTimeout)
		defer stop()
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		err := rec.retry(wctx, "watch cancel", func() error { return st.WatchCancel(wctx, lease) })
		switch {
		case err == nil:
			cancel(errCanceled)
		case errors.Is(err, jobstore.ErrNotHeld):
			// The checks decide whether that was allowed: only after a
			// cut of this worker's connections.
			cancel(fmt.Errorf("%w: %w", errLeaseLost, err))
			err = nil
		}
		watched <- err
	}()

	o, label := handle(hctx, j)
	stopWatch()
	if err := <-watched; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("watch cancel %s: %w", j.ID, err)
	}

	existed, err = rec.marker(markerName(j.ID, j.Attempt, "end"),
		fmt.Sprintf("%s\t%d\t%d\t%s\n", name, os.Getpid(), monoNow(), label))
	if err != nil {
		return fmt.Errorf("end marker: %w", err)
	}
	if existed {
		rec.violation("job %s attempt %d ended twice: its end marker exists", j.ID, j.Attempt)
	}
	retried := false
	err = rec.retry(ctx, "complete", func() error {
		_, err := st.Complete(ctx, lease, o)
		retried = retried || rec.isTransient(err)
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, jobstore.ErrNotHeld) && (label == outcomeLost || retried):
		// The lease was lost, or an earlier try took effect though its
		// answer was cut off: the markers and the final record tell.
	case errors.Is(err, jobstore.ErrNotHeld) && rec.lostOutcome(j.ID, j.Attempt, err):
		// The checks require a cut of this worker's connections.
	case errors.Is(err, jobstore.ErrNotHeld):
		rec.violation("job %s attempt %d: Complete by live worker %s: %v", j.ID, j.Attempt, name, err)
	default:
		return fmt.Errorf("complete %s: %w", j.ID, err)
	}
	return nil
}

// handle is the torture handler: it works for the task's time unless ctx
// ends first, then fails or succeeds as the task says.
func handle(ctx context.Context, j jobstore.Job) (jobstore.Outcome, string) {
	var t task
	if err := json.Unmarshal(j.Payload, &t); err != nil {
		return jobstore.Outcome{Error: "bad payload: " + err.Error(), Permanent: true}, outcomeFailed
	}
	timer := time.NewTimer(time.Duration(t.SleepMS) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		cause := context.Cause(ctx)
		label := outcomeCanceled
		switch {
		case errors.Is(cause, errTimeout) || errors.Is(cause, runner.ErrTimeout):
			label = outcomeTimeout
		case errors.Is(cause, errLeaseLost) || errors.Is(cause, runner.ErrLeaseLost):
			label = outcomeLost
		}
		return jobstore.Outcome{Error: cause.Error(), RetryAfter: retryAfter}, label
	case <-timer.C:
	}
	if j.Attempt <= t.FailAttempts {
		return jobstore.Outcome{
			Error:      fmt.Sprintf("planned failure of attempt %d", j.Attempt),
			Permanent:  t.Permanent,
			RetryAfter: retryAfter,
		}, outcomeFailed
	}
	return jobstore.Succeeded(json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, j.Attempt))), outcomeOK
}
