package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// runRunnerWorker is the worker role played by runner.Runner, as production
// workers run: the runner claims, watches for cancels, enforces timeouts and
// completes; the handler records the attempt's start and end around the
// same work as the harness's own loop.
func runRunnerWorker(ctx context.Context, st jobstore.Worker, rec *recorder, spec childSpec) error {
	// excused holds the attempts ("id.attempt") whose outcome the runner
	// may drop: their lease was lost, or a Complete failed transiently
	// (it may have taken effect though its answer was cut off).
	var excused sync.Map
	attemptKey := func(j jobstore.Job) string { return fmt.Sprintf("%s.%d", j.ID, j.Attempt) }
	r := runner.New(st, &runner.Options{
		Concurrency:   max(spec.Concurrency, 1),
		Worker:        spec.Name,
		PollInterval:  250 * time.Millisecond,
		ShutdownGrace: time.Minute, // a SIGTERM lets attempts finish
		OnEvent: func(e runner.Event) {
			switch e.Type {
			case runner.EventDropped:
				_, lost := excused.Load(attemptKey(e.Job))
				_, cutOff := excused.Load(e.Job.ID)
				if (lost || cutOff) && errors.Is(e.Err, jobstore.ErrNotHeld) {
					return
				}
				if rec.lostOutcome(e.Job.ID, e.Job.Attempt, e.Err) {
					return // the checks require a cut of this worker's connections
				}
				rec.violation("job %s attempt %d: runner %s dropped the outcome of a live worker: %v",
					e.Job.ID, e.Job.Attempt, spec.Name, e.Err)
			case runner.EventStoreError:
				if !rec.isTransient(e.Err) {
					fmt.Fprintf(os.Stderr, "store error: %v\n", e.Err)
					return
				}
				rec.transientError("runner", e.Err)
				// The runner names the job of a failed Complete.
				if rest, ok := strings.CutPrefix(e.Err.Error(), "runner: complete "); ok {
					id, _, _ := strings.Cut(rest, ":")
					excused.Store(id, true)
				}
			}
		},
	})
	h := runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		existed, err := rec.marker(markerName(j.ID, j.Attempt, "start"), startLine(spec.Name, j))
		if err != nil {
			return nil, fmt.Errorf("start marker: %w", err)
		}
		if existed {
			rec.violation("job %s attempt %d was handed out twice: its start marker exists", j.ID, j.Attempt)
		}
		var o jobstore.Outcome
		var label string
		if j.Kind == kindTree {
			o, label = handleTree(ctx, rec, spec, j)
		} else {
			o, label = handle(ctx, j)
		}
		if label == outcomeLost {
			excused.Store(attemptKey(j), true)
		}
		existed, err = rec.marker(markerName(j.ID, j.Attempt, "end"),
			fmt.Sprintf("%s\t%d\t%d\t%s\n", spec.Name, os.Getpid(), monoNow(), label))
		if err != nil {
			return nil, fmt.Errorf("end marker: %w", err)
		}
		if existed {
			rec.violation("job %s attempt %d ended twice: its end marker exists", j.ID, j.Attempt)
		}
		if o.Error == "" {
			return o.Result, nil
		}
		herr := errors.New(o.Error)
		if o.Permanent {
			return nil, runner.Permanent(herr)
		}
		return nil, runner.RetryAfter(herr, o.RetryAfter)
	})
	r.Handle(kindTorture, h)
	r.Handle(kindTree, h)
	return r.Run(ctx)
}
