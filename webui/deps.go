package webui

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// depBudget is the most dependencies one page reads to say how many of
// its waiting jobs' dependencies have not ended: a page of the table
// whose jobs each wait for thousands reads no more than this.
const depBudget = 2000

// maxDependentsShown is the most dependents a job's page lists.
const maxDependentsShown = 100

// depStates reads the states of waiting jobs' dependencies, each once,
// at most depBudget of them per page. It is not safe for concurrent use.
type depStates struct {
	store Store
	// states holds the states read; "" for a job that no longer exists.
	states map[string]jobstore.State
	left   int
}

func newDepStates(store Store) *depStates {
	return &depStates{store: store, states: make(map[string]jobstore.State), left: depBudget}
}

// state returns the state of job id, "" if it no longer exists; ok is
// false when the budget is spent.
func (d *depStates) state(ctx context.Context, id string) (st jobstore.State, ok bool, err error) {
	if st, ok := d.states[id]; ok {
		return st, true, nil
	}
	if d.left == 0 {
		return "", false, nil
	}
	d.left--
	j, err := d.store.Get(ctx, id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
	case err != nil:
		return "", false, err
	default:
		st = j.State
	}
	d.states[id] = st
	return st, true, nil
}

// words says where the waiting job j is, "waiting for 3 of 5 jobs" (those
// of its dependencies that have not ended, of all), or, once the budget
// is spent, how many it waits for at most.
func (d *depStates) words(ctx context.Context, j jobstore.Job) (string, error) {
	known := make(map[string]jobstore.State, len(j.After))
	for _, id := range j.After {
		st, ok, err := d.state(ctx, id)
		if err != nil {
			return "", err
		}
		if !ok {
			return fmt.Sprintf("waiting for its %s", plural(len(j.After), "dependency", "dependencies")), nil
		}
		if st != "" {
			known[id] = st
		}
	}
	pending, total := jobstore.DependencyCounts(j, known)
	return waitingWords(pending, total), nil
}

// waitingWords is "waiting for 3 of 5 jobs": pending of the job's total
// dependencies have not ended.
func waitingWords(pending, total int) string {
	if total == 1 && pending == 1 {
		return "waiting for 1 job"
	}
	return fmt.Sprintf("waiting for %d of %s", pending, plural(total, "job", "jobs"))
}

// plural is n and the noun's singular or plural form.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// depRow is a dependency or a dependent on a job's page.
type depRow struct {
	ID, Kind, State, Words string
	// Gone says the job no longer exists (it was pruned or deleted).
	Gone bool
}

// jobLinks is what a job's page shows of its place among other jobs.
type jobLinks struct {
	// After are the job's dependencies, in its order, the first
	// maxDependentsShown of them.
	After []depRow
	// MoreAfter counts the dependencies not listed.
	MoreAfter int
	// Waiting is "waiting for 3 of 5 jobs", for a waiting job.
	Waiting string
	// Dependents are the jobs that wait for it, the first
	// maxDependentsShown of them; nil when the store keeps none.
	Dependents []depRow
	// MoreDependents counts the dependents not listed.
	MoreDependents int
	// Batch and CallbackOf say what is known of the job's batch, and of
	// the batch whose callback it is.
	Batch, CallbackOf string
}

// links reads the dependencies and dependents of j, and its batch, for
// its page at now: at most maxDependentsShown of each listed, and at most
// depBudget dependencies read to count those that have not ended.
func (h *Handler) links(ctx context.Context, j jobstore.Job, now time.Time) (jobLinks, error) {
	var l jobLinks
	deps := newDepStates(h.store)
	for i, id := range j.After {
		if i == maxDependentsShown {
			l.MoreAfter = len(j.After) - i
			break
		}
		d, err := h.store.Get(ctx, id)
		if errors.Is(err, jobstore.ErrNotFound) {
			deps.states[id] = ""
			l.After = append(l.After, depRow{ID: id, Gone: true, Words: "no longer exists: it was pruned or deleted"})
			continue
		}
		if err != nil {
			return l, err
		}
		deps.states[id] = d.State
		l.After = append(l.After, depRow{ID: d.ID, Kind: d.Kind, State: string(d.State), Words: stateWords(d, now)})
	}
	dr, isReader := h.store.(jobstore.DependencyReader)
	if j.State == jobstore.StateWaiting {
		var err error
		if l.Waiting, err = deps.words(ctx, j); err != nil {
			return l, err
		}
		if j.AfterBatch != "" && isReader && len(j.After) > depBudget {
			// A batch's callback waits for every job of the batch,
			// which the batch's counts say at once.
			if b, err := dr.Batch(ctx, j.AfterBatch); err == nil {
				l.Waiting = waitingWords(b.Total-ended(b), len(j.After))
			}
		}
	}
	if !isReader {
		return l, nil
	}
	dependents, err := dr.Dependents(ctx, j.ID)
	if err != nil {
		return l, err
	}
	l.Dependents = []depRow{}
	for i, d := range dependents {
		if i == maxDependentsShown {
			l.MoreDependents = len(dependents) - i
			break
		}
		l.Dependents = append(l.Dependents, depRow{ID: d.ID, Kind: d.Kind, State: string(d.State), Words: stateWords(d, now)})
	}
	if l.Batch, err = batchWords(ctx, dr, j.Batch); err != nil {
		return l, err
	}
	if l.CallbackOf, err = batchWords(ctx, dr, j.AfterBatch); err != nil {
		return l, err
	}
	return l, nil
}

// ended counts the jobs of batch b that ended.
func ended(b jobstore.BatchInfo) int {
	n := 0
	for st, c := range b.States {
		if st.Terminal() {
			n += c
		}
	}
	return n
}

// batchWords says what is known of the batch name: "exports: 5 jobs, 3
// ended; closed". Empty for no batch.
func batchWords(ctx context.Context, dr jobstore.DependencyReader, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	b, err := dr.Batch(ctx, name)
	if errors.Is(err, jobstore.ErrNotFound) {
		return name, nil
	}
	if err != nil {
		return "", err
	}
	s := fmt.Sprintf("%s: %s, %d ended", name, plural(b.Total, "job", "jobs"), ended(b))
	if b.Closed {
		s += "; closed by its callback, no job may join"
	} else {
		s += "; open, jobs may still join"
	}
	return s, nil
}
