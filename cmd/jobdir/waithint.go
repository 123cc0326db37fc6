package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

// waitHintAfter is how long jobdir wait waits for a due job to be taken
// before it says, once, that no worker has taken it; waitHintOverride, if
// set, replaces it (tests).
const waitHintAfter = 10 * time.Second

var waitHintOverride atomic.Int64

func waitHintDelay() time.Duration {
	if d := waitHintOverride.Load(); d > 0 {
		return time.Duration(d)
	}
	return waitHintAfter
}

// hintUnclaimed watches job id while wait waits for it, and tells the
// person waiting, once each, on stderr: that the job waits for its time
// (scheduled, or a retry), and that a due job has stayed queued for
// waitHintAfter, which means no worker is taking it (none runs on this
// store, none takes its kind, or every one is busy), and that a job waits
// for its dependencies. A job a worker has taken ends the watch.
// The returned function stops the watch and returns once it has stopped.
func (a *app) hintUnclaimed(ctx context.Context, st *cliStore, id string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		delay := waitHintDelay()
		toldScheduled, toldWaiting := false, false
		for {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			j, err := st.Get(ctx, id)
			if err == nil && j.State == jobstore.StateWaiting {
				if !toldWaiting {
					toldWaiting = true
					if pending, total, ok, err := newDepStates(st, len(j.After)).count(ctx, j); err == nil && ok {
						fmt.Fprintf(a.stderr, "jobdir: job %s is %s (its dependencies: jobdir get %s); waiting\n", id, waitingText(pending, total), id)
					}
				}
				delay = waitHintDelay()
				continue
			}
			if err != nil || j.State != jobstore.StateQueued {
				return // taken, finished, or gone: wait says the rest
			}
			now := time.Now()
			if j.RunAt.After(now) {
				if !toldScheduled {
					toldScheduled = true
					fmt.Fprintf(a.stderr, "jobdir: job %s is %s; waiting\n", id, stateAt(j, now))
				}
				// Look again once it has been due for as long.
				delay = j.RunAt.Sub(now) + waitHintDelay()
				continue
			}
			fmt.Fprintf(a.stderr, "jobdir: job %s has been due for %s and no worker has taken it yet. Is a worker running on %s (start one with jobdir work, with the same --dir or --store), does it take kind %q, and has it a free slot? Still waiting.\n",
				id, humantime.Duration(now.Sub(j.RunAt).Round(time.Second)), st.name, j.Kind)
			return
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
