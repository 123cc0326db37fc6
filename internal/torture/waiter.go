package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// waitDir holds, under the records, each waiter's log (<name>.log): a line
// "N\t<id>" for each Wait that found no job, and, written when it stops, a
// line "K\t<end>\t<return>" for each Wait that returned the job ended (the
// job's end and the Wait's return, on CLOCK_MONOTONIC), then the summary
// "W\t<started>\t<returned>".
const waitDir = "waits"

// waitGrace is how long a waiter, told to stop once every job has ended,
// gives its Waits to return before it counts the rest as stuck.
const waitGrace = 20 * time.Second

// runWaiter is the wait storm: it keeps spec.Waits Waits going at once on
// queued and running jobs, from as many goroutines, until ctx ends. Each
// Wait must return the job in a terminal state. The driver stops waiters
// only after the drain, when every job has ended: every Wait must then
// return within waitGrace, or it is a violation.
func runWaiter(ctx context.Context, st jobstore.Client, rec *recorder, spec childSpec) error {
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
		wakes    []pause // from a job's end to the return of a Wait on it
		started  int
		returned int
		wg       sync.WaitGroup
	)
	logPath := filepath.Join(rec.dir, waitDir, spec.Name+".log")
	// Waits outlive ctx: they end when their job does.
	wctx, cancelWaits := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWaits()
	wait := func(id string) {
		defer wg.Done()
		var j jobstore.Job
		err := rec.retry(wctx, "wait", func() (err error) {
			j, err = st.Wait(wctx, id)
			return err
		})
		now, mono := time.Now(), monoNow()
		mu.Lock()
		defer mu.Unlock()
		inFlight[id]--
		if wctx.Err() != nil {
			return // given up: counted as not returned
		}
		returned++
		switch {
		case errors.Is(err, jobstore.ErrNotFound):
			// Listed, then gone: the rollback of a failed Submit, unless
			// a Submit returned its ID (the driver checks).
			if err := appendLine(logPath, "N\t"+id); err != nil {
				rec.violation("job %s: Wait found no job, and the waiter could not record it: %v", id, err)
			}
		case err != nil:
			rec.violation("job %s: Wait: %v", id, err)
		case !j.State.Terminal():
			rec.violation("job %s: Wait returned it %s", id, j.State)
		case !j.FinishedAt.IsZero():
			// FinishedAt is on the wall clock of the process that
			// ended the job; the machine's, like CLOCK_MONOTONIC.
			wakes = append(wakes, pause{from: mono - int64(now.Sub(j.FinishedAt)), to: mono})
		}
	}
	for ctx.Err() == nil {
		var page jobstore.Page
		err := rec.retry(ctx, "list", func() (err error) {
			page, err = st.List(ctx, jobstore.ListOptions{
				States: []jobstore.State{jobstore.StateRunning, jobstore.StateQueued}, Limit: 200})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("list: %w", err)
		}
		mu.Lock()
		n := started - returned
		for _, j := range page.Jobs {
			if n >= spec.Waits {
				break
			}
			// Several Waits on one job, as many clients of one job do.
			for range min(4, spec.Waits-n) {
				inFlight[j.ID]++
				started++
				n++
				wg.Add(1)
				go wait(j.ID)
			}
		}
		mu.Unlock()
		sleep(ctx, 100*time.Millisecond)
	}
	// Every job has ended (the driver stops waiters after the drain).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var stuck []string
	select {
	case <-done:
	case <-time.After(waitGrace):
		// The jobs of the Waits still in flight, named before they are
		// given up (which takes them out of inFlight).
		mu.Lock()
		for id, n := range inFlight {
			if n > 0 {
				stuck = append(stuck, id)
			}
		}
		mu.Unlock()
		slices.Sort(stuck)
		cancelWaits()
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	if started > returned {
		rec.violation("%d of %d Waits did not return within %s of the end of every job, on %d jobs: %v",
			started-returned, started, waitGrace, len(stuck), stuck[:min(len(stuck), 5)])
	}
	var b strings.Builder
	for _, w := range wakes {
		fmt.Fprintf(&b, "K\t%d\t%d\n", w.from, w.to)
	}
	fmt.Fprintf(&b, "W\t%d\t%d", started, returned)
	return appendLine(logPath, b.String())
}

// waitRecords is what the waiters recorded.
type waitRecords struct {
	started, returned int
	// wakes runs from a job's end to the return of a Wait on it.
	wakes []pause
	// notFound lists the jobs a Wait found gone, each once.
	notFound []string
}

// readWaits reads the waiters' logs.
func readWaits(recDir string) (waitRecords, error) {
	var w waitRecords
	logs, err := filepath.Glob(filepath.Join(recDir, waitDir, "*.log"))
	if err != nil {
		return w, err
	}
	seen := map[string]bool{}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			return w, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := fields(line)
			if f[0] == "N" && len(f) == 2 {
				if !seen[f[1]] {
					seen[f[1]] = true
					w.notFound = append(w.notFound, f[1])
				}
				continue
			}
			if (f[0] != "W" && f[0] != "K") || len(f) != 3 {
				continue
			}
			a, err1 := strconv.ParseInt(f[1], 10, 64)
			b, err2 := strconv.ParseInt(f[2], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return w, fmt.Errorf("%s: %q: %w", p, line, err)
			}
			if f[0] == "K" {
				w.wakes = append(w.wakes, pause{from: a, to: b})
				continue
			}
			w.started += int(a)
			w.returned += int(b)
		}
	}
	slices.Sort(w.notFound)
	return w, nil
}

// checkWaits adds the wait storm's figures to r: a Wait that found no job
// is a violation if a Submit returned that job's ID (ids), and otherwise
// counts as a job that vanished with the rollback of a failed Submit. The
// time from a job's end to the return of a Wait on it is split by whether
// a process was stopped (stops) meanwhile.
func checkWaits(r *Report, w waitRecords, ids map[string]bool, stops map[string][]pause) {
	r.Waits, r.WaitsReturned = w.started, w.returned
	for _, id := range w.notFound {
		if ids[id] {
			r.violate("job %s: a Wait found it gone, though a Submit returned its ID", id)
			continue
		}
		r.VanishedJobs++
	}
	var all, during, outside []time.Duration
	for _, k := range w.wakes {
		d := time.Duration(k.to - k.from)
		all = append(all, d)
		stopped := false
		for _, ps := range stops {
			if slices.ContainsFunc(ps, func(p pause) bool { return p.from < k.to && (p.to == 0 || p.to > k.from) }) {
				stopped = true
				break
			}
		}
		if stopped {
			during = append(during, d)
		} else {
			outside = append(outside, d)
		}
	}
	r.WaitWake, r.WaitWakeDuringStops, r.WaitWakeOutsideStops = latencyOf(all), latencyOf(during), latencyOf(outside)
}
