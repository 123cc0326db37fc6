package torture

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// holderSample is one sighting of a running job by the driver: at is on
// CLOCK_MONOTONIC.
type holderSample struct {
	at      int64
	id      string
	attempt int
	worker  string
}

// sampleRunning lists the running jobs every interval until ctx ends, and
// returns what it saw. It runs beside the chaos loop, not in it: a List
// that waits on a stopped process must not delay that process's SIGCONT.
func sampleRunning(ctx context.Context, st jobstore.Client, interval time.Duration) func() []holderSample {
	var (
		mu   sync.Mutex
		seen []holderSample
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			opts := jobstore.ListOptions{States: []jobstore.State{jobstore.StateRunning}, Limit: jobstore.MaxListLimit}
			at := monoNow()
			page, err := st.List(ctx, opts)
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, context.Canceled) {
					return
				}
				continue // a transient error; the next sample will do
			}
			mu.Lock()
			for _, j := range page.Jobs {
				seen = append(seen, holderSample{at: at, id: j.ID, attempt: j.Attempt, worker: j.Worker})
			}
			mu.Unlock()
		}
	}()
	return func() []holderSample {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// checkHolders checks the invariant "no job is running while no live
// process holds its lease" on the driver's samples: a job seen running
// longer than bound after its worker was killed, or after its live worker
// ended the attempt (its end marker) without being stopped since, is a
// violation. A worker stopped or cut off (exempt: its SIGSTOPs, and the
// cuts of its connections) meanwhile is exempt: its lease is alive, or
// lives until the store's server notices. It also sets the figures of the
// longest such lags, allowed or not.
func checkHolders(r *Report, samples []holderSample, attempts map[string][]*attemptRec, kills map[string]int64, exempt map[string][]pause, bound time.Duration) {
	stoppedDuring := func(w string, from, to int64) bool {
		return slices.ContainsFunc(exempt[w], func(p pause) bool { return p.from < to && (p.to == 0 || p.to > from) })
	}
	reported := map[string]bool{}
	for _, s := range samples {
		r.HolderSamples++
		key := markerName(s.id, s.attempt, "")
		if killedAt, killed := kills[s.worker]; killed && killedAt < s.at {
			if stoppedDuring(s.worker, killedAt, s.at) {
				continue
			}
			lag := time.Duration(s.at - killedAt)
			r.MaxRunningAfterKill = max(r.MaxRunningAfterKill, lag)
			if lag > bound && !reported[key] {
				reported[key] = true
				r.violate("job %s: attempt %d still running %s after its worker %s was killed: no live process holds its lease",
					s.id, s.attempt, lag.Round(time.Millisecond), s.worker)
			}
			continue
		}
		i := slices.IndexFunc(attempts[s.id], func(a *attemptRec) bool { return a.Attempt == s.attempt })
		if i < 0 {
			continue
		}
		a := attempts[s.id][i]
		if !a.HasEnd || a.End >= s.at || stoppedDuring(s.worker, a.End, s.at) {
			continue
		}
		lag := time.Duration(s.at - a.End)
		r.MaxRunningAfterEnd = max(r.MaxRunningAfterEnd, lag)
		if lag > bound && !reported[key] {
			reported[key] = true
			r.violate("job %s: attempt %d still running %s after its live worker %s ended it: no live process holds its lease",
				s.id, s.attempt, lag.Round(time.Millisecond), s.worker)
		}
	}
}
