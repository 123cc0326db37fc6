package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// The words --state takes beyond the store's states: a queued job that is
// not due yet is shown as scheduled (its first attempt) or retrying (a
// later one), and --state queued means the queued jobs that are due now,
// the ones the table shows as queued. (A store's Stats counts all three as
// queued.)
const (
	stateScheduled = "scheduled"
	stateRetrying  = "retrying"
)

// stateWords are the words --state takes, in the order of the help.
var stateWords = []string{"waiting", "queued", stateScheduled, stateRetrying, "running", "succeeded", "failed", "canceled"}

// stateFilter is what --state selects: the store states to list, and the
// words a job's state must be one of.
type stateFilter struct {
	words  []string
	states []jobstore.State
}

// parseStates reads --state's values (each may be comma-separated) and
// accepts only the words for states in allowed; done says what the command
// does to those ("canceled"), for the error about another state.
func parseStates(values []string, allowed []jobstore.State, done string) (stateFilter, error) {
	var f stateFilter
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			w := strings.ToLower(strings.TrimSpace(name))
			st := jobstore.State(w)
			if w == stateScheduled || w == stateRetrying {
				st = jobstore.StateQueued
			} else if _, err := jobstore.ParseState(w); err != nil {
				return stateFilter{}, fmt.Errorf("unknown state %q: want one of %s", name, strings.Join(stateWords, ", "))
			}
			if !slices.Contains(allowed, st) {
				names := make([]string, len(allowed))
				for i, a := range allowed {
					names[i] = string(a)
				}
				return stateFilter{}, fmt.Errorf("%s: only %s jobs can be %s", w, eitherOf(names), done)
			}
			if !slices.Contains(f.words, w) {
				f.words = append(f.words, w)
			}
			if !slices.Contains(f.states, st) {
				f.states = append(f.states, st)
			}
		}
	}
	return f, nil
}

// stateWord is the --state word for j at now.
func stateWord(j jobstore.Job, now time.Time) string {
	if j.State == jobstore.StateQueued && j.RunAt.After(now) {
		if j.Attempt > 0 {
			return stateRetrying
		}
		return stateScheduled
	}
	return string(j.State)
}

// keep returns the filter's test of a job at the time of the call, or nil
// when every job of its store states matches.
func (f stateFilter) keep() func(jobstore.Job) bool {
	// Only the queued jobs split into words; asked for whole, or not at
	// all, the store's own filter is the answer.
	split := slices.Contains(f.states, jobstore.StateQueued) &&
		!(slices.Contains(f.words, "queued") && slices.Contains(f.words, stateScheduled) && slices.Contains(f.words, stateRetrying))
	if !split {
		return nil
	}
	now := time.Now()
	return func(j jobstore.Job) bool { return slices.Contains(f.words, stateWord(j, now)) }
}
