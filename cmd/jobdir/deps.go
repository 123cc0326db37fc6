package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// This file holds what the commands show of dependencies and batches:
// how many dependencies a waiting job still waits for, and a job's
// dependencies and dependents for jobdir get.

// depBudget is the most dependencies jobdir list reads to say how many of
// its waiting jobs' dependencies have not ended; past it, a job's STATE
// says only how many it waits for.
const depBudget = 5000

// maxLinksShown is the most dependencies, and dependents, jobdir get
// lists; --json has every dependency.
const maxLinksShown = 50

// depStates reads the states of dependencies, each once, at most budget
// of them. It is not safe for concurrent use.
type depStates struct {
	st jobstore.Client
	// states holds the states read; "" for a job that no longer exists.
	states map[string]jobstore.State
	left   int
}

func newDepStates(st jobstore.Client, budget int) *depStates {
	return &depStates{st: st, states: make(map[string]jobstore.State), left: budget}
}

// count says how many of the waiting job j's dependencies have not
// ended, of all; ok is false when the budget ran out first.
func (d *depStates) count(ctx context.Context, j jobstore.Job) (pending, total int, ok bool, err error) {
	known := make(map[string]jobstore.State, len(j.After))
	for _, id := range j.After {
		st, seen := d.states[id]
		if !seen {
			if d.left == 0 {
				return 0, len(j.After), false, nil
			}
			d.left--
			dep, err := d.st.Get(ctx, id)
			switch {
			case errors.Is(err, jobstore.ErrNotFound):
			case err != nil:
				return 0, 0, false, err
			default:
				st = dep.State
			}
			d.states[id] = st
		}
		if st != "" {
			known[id] = st
		}
	}
	pending, total = jobstore.DependencyCounts(j, known)
	return pending, total, true, nil
}

// waitCounts returns, for each waiting job of jobs, its dependencies that
// have not ended over all of them, "3/5", as list's STATE column shows
// it; "?/5" once depBudget dependencies were read.
func waitCounts(ctx context.Context, st jobstore.Client, jobs []jobstore.Job) (map[string]string, error) {
	out := make(map[string]string)
	d := newDepStates(st, depBudget)
	for _, j := range jobs {
		if j.State != jobstore.StateWaiting {
			continue
		}
		pending, total, ok, err := d.count(ctx, j)
		if err != nil {
			return nil, err
		}
		if ok {
			out[j.ID] = fmt.Sprintf("%d/%d", pending, total)
		} else {
			out[j.ID] = fmt.Sprintf("?/%d", total)
		}
	}
	return out, nil
}

// waitingText is "waiting for 3 of 5 jobs": pending of the job's total
// dependencies have not ended.
func waitingText(pending, total int) string {
	if total == 1 && pending == 1 {
		return "waiting for 1 job"
	}
	return fmt.Sprintf("waiting for %d of %s", pending, plural(int64(total), "job"))
}

// jobLinks is what jobdir get shows of a job's place among other jobs.
type jobLinks struct {
	// after are the job's dependencies as they are now, in its order, the
	// first maxLinksShown of them; one that no longer exists has only its
	// ID.
	after     []jobstore.Job
	moreAfter int
	// waiting is "waiting for 3 of 5 jobs" for a waiting job.
	waiting string
	// dependents are the jobs that wait for it, the first maxLinksShown;
	// nil when the store keeps none.
	dependents     []jobstore.Job
	moreDependents int
	// batch and callbackOf are what is known of the job's batch, and of
	// the batch whose callback it is.
	batch, callbackOf *jobstore.BatchInfo
}

// readLinks reads what jobdir get shows of j's dependencies, dependents
// and batch from st.
func readLinks(ctx context.Context, st jobstore.Client, j jobstore.Job) (jobLinks, error) {
	var l jobLinks
	d := newDepStates(st, len(j.After))
	for i, id := range j.After {
		if i == maxLinksShown {
			l.moreAfter = len(j.After) - i
			break
		}
		dep, err := st.Get(ctx, id)
		switch {
		case errors.Is(err, jobstore.ErrNotFound):
			dep = jobstore.Job{ID: id}
		case err != nil:
			return l, err
		}
		d.states[id] = dep.State
		l.after = append(l.after, dep)
	}
	if j.State == jobstore.StateWaiting {
		pending, total, _, err := d.count(ctx, j)
		if err != nil {
			return l, err
		}
		l.waiting = waitingText(pending, total)
	}
	dr, ok := st.(jobstore.DependencyReader)
	if !ok {
		return l, nil
	}
	deps, err := dr.Dependents(ctx, j.ID)
	if err != nil {
		return l, err
	}
	l.dependents = []jobstore.Job{}
	if len(deps) > maxLinksShown {
		l.moreDependents = len(deps) - maxLinksShown
		deps = deps[:maxLinksShown]
	}
	l.dependents = append(l.dependents, deps...)
	if l.batch, err = batchOf(ctx, dr, j.Batch); err != nil {
		return l, err
	}
	if l.callbackOf, err = batchOf(ctx, dr, j.AfterBatch); err != nil {
		return l, err
	}
	return l, nil
}

// batchOf returns the batch name, nil for none or one that is gone.
func batchOf(ctx context.Context, dr jobstore.DependencyReader, name string) (*jobstore.BatchInfo, error) {
	if name == "" {
		return nil, nil
	}
	b, err := dr.Batch(ctx, name)
	if errors.Is(err, jobstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// endedJobs counts the jobs of b that ended.
func endedJobs(b jobstore.BatchInfo) int {
	n := 0
	for st, c := range b.States {
		if st.Terminal() {
			n += c
		}
	}
	return n
}

// batchLine says what is known of batch name: "exports (5 jobs, 3
// ended; closed)".
func batchLine(name string, b *jobstore.BatchInfo) string {
	if b == nil {
		return name
	}
	s := fmt.Sprintf("%s (%s, %d ended", name, plural(int64(b.Total), "job"), endedJobs(*b))
	if b.Closed {
		return s + "; closed: its callback was submitted)"
	}
	return s + "; open)"
}

// printLinks writes a job's dependencies and dependents, each a line
// with its ID, state and work, after the fields printJob wrote.
func printLinks(w io.Writer, l jobLinks, now time.Time) error {
	list := func(title string, jobs []jobstore.Job, more int) error {
		fmt.Fprintln(w, title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, j := range jobs {
			state := "gone (pruned or deleted)"
			if j.State != "" {
				state = stateAt(j, now)
			}
			if work := oneLine(describeWork(j), 50); work != "" {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", j.ID, state, work)
			} else {
				fmt.Fprintf(tw, "  %s\t%s\n", j.ID, state)
			}
		}
		if more > 0 {
			fmt.Fprintf(tw, "  … and %d more\n", more)
		}
		return tw.Flush()
	}
	if len(l.after) > 0 {
		if err := list("Dependencies:", l.after, l.moreAfter); err != nil {
			return err
		}
	}
	if len(l.dependents) > 0 {
		return list("Dependents:", l.dependents, l.moreDependents)
	}
	return nil
}

// storeMessage is a store's error for people: without the package and
// operation it begins with, nor the words of the sentinel errors, which
// the rest of the message says better ("filestore: submit: invalid
// input: after X: no such job" reads "after X: no such job").
func storeMessage(err error) string {
	msg := err.Error()
	for {
		rest, ok := "", false
		for _, p := range packagePrefixes {
			if rest, ok = strings.CutPrefix(msg, p); ok {
				break
			}
		}
		if !ok {
			break
		}
		// An operation ("submit: ", "submit batch: ") may follow.
		if op, after, found := strings.Cut(rest, ": "); found && isOpName(op) {
			rest = after
		}
		msg = rest
	}
	for _, s := range []error{jobstore.ErrDependencyFailed, jobstore.ErrDependedOn, jobstore.ErrBatchClosed, jobstore.ErrInvalidInput} {
		msg = strings.ReplaceAll(msg, s.Error()+": ", "")
	}
	return msg
}

// isOpName reports whether s is the name of a store operation, as an
// error names it after the package: lower-case words.
func isOpName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != ' ' {
			return false
		}
	}
	return true
}
