package torture

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// checkRecords compares the jobs in the store at the end of a run (by ID)
// with what the processes recorded, and adds figures and violations to r.
// kills maps the name of every killed worker incarnation to the
// CLOCK_MONOTONIC time just before its SIGKILL was sent; stops lists the
// SIGSTOP pauses of each child; cuts the spans of CLOCK_MONOTONIC during
// which the connections of each worker incarnation were cut (Backend.Cut, or
// a restart of the server).
func checkRecords(r *Report, jobs map[string]jobstore.Job, rec records, kills map[string]int64, stops map[string][]pause, cuts map[string][]pause) {
	for _, v := range rec.violations {
		r.violate("seen by a child: %s", v)
	}
	r.TornLines = rec.torn

	// Every returned ID has a job, and it is terminal.
	ids := map[string]bool{}
	keyIDs := map[string]map[string]bool{}
	for _, s := range rec.submits {
		r.Submits++
		if !s.Created {
			r.KeyHits++
		}
		ids[s.ID] = true
		if s.Key != "" {
			if keyIDs[s.Key] == nil {
				keyIDs[s.Key] = map[string]bool{}
			}
			keyIDs[s.Key][s.ID] = true
		}
	}
	r.SubmittedIDs = len(ids)
	for _, id := range sortedKeys(ids) {
		j, ok := jobs[id]
		switch {
		case !ok:
			r.violate("job %s: Submit returned its ID, but the store has no such job", id)
		case !j.State.Terminal():
			r.violate("job %s: still %s after the drain", id, j.State)
		}
	}

	// One job per key, whichever process submitted it.
	for _, key := range sortedKeys(keyIDs) {
		if n := len(keyIDs[key]); n > 1 {
			r.violate("key %q: Submit returned %d different jobs: %v", key, n, sortedKeys(keyIDs[key]))
		}
	}
	storeKeys := map[string][]string{}
	r.States = map[jobstore.State]int{}
	for _, id := range sortedKeys(jobs) {
		j := jobs[id]
		r.Jobs++
		r.States[j.State]++
		if j.Key != "" {
			storeKeys[j.Key] = append(storeKeys[j.Key], id)
		}
		if !ids[id] {
			r.UnreturnedJobs++
			if !j.State.Terminal() {
				r.violate("job %s: still %s after the drain", id, j.State)
			}
		}
		as := rec.attempts[id]
		if j.State == jobstore.StateCanceled && len(as) > 0 && as[len(as)-1].Outcome == outcomeCanceled {
			r.CanceledRunning++ // its handler saw the cancel
		}
		// Attempts claimed whose worker died before writing the start
		// marker (or whose claim was cut off with its connection). The
		// record names the claimant of the last one: it must have been
		// killed or cut.
		if lost := j.Attempt - len(as); lost > 0 {
			r.LostClaims += lost
			_, killed := kills[j.Worker]
			if (len(as) == 0 || as[len(as)-1].Attempt < j.Attempt) && !killed && len(cuts[j.Worker]) == 0 {
				r.violate("job %s: attempt %d by %s never started, and that worker was not killed", id, j.Attempt, j.Worker)
			}
		}
	}
	r.Keys = len(storeKeys)
	for _, key := range sortedKeys(storeKeys) {
		if n := len(storeKeys[key]); n > 1 {
			r.violate("key %q: the store holds %d jobs: %v", key, n, storeKeys[key])
		}
	}

	// Canceled while queued: never started afterwards.
	for _, c := range rec.cancels {
		if c.State != jobstore.StateCanceled {
			continue
		}
		r.CanceledQueued++
		for _, a := range rec.attempts[c.ID] {
			if a.Attempt > c.Attempt {
				r.violate("job %s: canceled while queued after attempt %d, yet attempt %d started", c.ID, c.Attempt, a.Attempt)
			}
		}
		if j, ok := jobs[c.ID]; ok && j.State != jobstore.StateCanceled {
			r.violate("job %s: Cancel returned it canceled, but it ended %s", c.ID, j.State)
		}
	}

	for _, id := range sortedKeys(rec.attempts) {
		checkAttempts(r, id, jobs[id], rec.attempts[id], kills, stops, cuts)
	}
	if w := r.recoveryWaits; len(w) > 0 {
		slices.Sort(w)
		r.MedianRecoveryWait = w[len(w)/2]
		r.P99RecoveryWait = w[(len(w)*99)/100]
		r.MaxRecoveryWait = w[len(w)-1]
	}

	// A paused worker is alive: its attempt must simply finish later.
	for _, as := range rec.attempts {
		for _, a := range as {
			if !a.HasStart || !a.HasEnd {
				continue
			}
			for _, p := range stops[a.Worker] {
				if p.from < a.End && (p.to == 0 || p.to > a.Start) {
					r.PausedAttempts++
					break
				}
			}
		}
	}
}

// pause is one SIGSTOP of a child, from SIGSTOP to SIGCONT on
// CLOCK_MONOTONIC (to is zero if it was never continued).
type pause struct{ from, to int64 }

// checkAttempts checks one job's attempts against each other, the job's
// final record, the kills, the SIGSTOPs and the cuts.
func checkAttempts(r *Report, id string, j jobstore.Job, as []*attemptRec, kills map[string]int64, stops, cuts map[string][]pause) {
	// cutBetween reports whether worker w's connections were cut at some
	// moment between from and to.
	cutBetween := func(w string, from, to int64) bool {
		return slices.ContainsFunc(cuts[w], func(c pause) bool { return c.to >= from && c.from <= to })
	}
	// stoppedAfterCut reports whether worker w's connections were cut
	// between from and to and w was stopped (SIGSTOP) at some moment
	// between that cut and to: it could not stop its handler in time.
	stoppedAfterCut := func(w string, from, to int64) bool {
		return slices.ContainsFunc(cuts[w], func(c pause) bool {
			return c.to >= from && c.from <= to && slices.ContainsFunc(stops[w], func(s pause) bool {
				return s.from <= to && (s.to == 0 || s.to >= c.from)
			})
		})
	}
	if j.ID == "" {
		r.violate("job %s: attempts ran, but the store has no such job", id)
		return
	}
	for i, a := range as {
		if a.HasStart {
			r.Attempts++
		}
		if r.Outcomes == nil {
			r.Outcomes = map[string]int{}
		}
		if a.HasEnd {
			r.Outcomes[a.Outcome]++
		} else {
			r.Outcomes["killed"]++
		}
		if a.Attempt > j.Attempt {
			r.violate("job %s: attempt %d started, but the record ends at attempt %d (%s)", id, a.Attempt, j.Attempt, j.State)
		}
		if !a.HasStart {
			r.violate("job %s: attempt %d has an end marker but no start marker", id, a.Attempt)
			continue
		}
		if a.HasEnd && a.End < a.Start {
			r.violate("job %s: attempt %d ended before it started", id, a.Attempt)
		}
		// A lease is lost to a cut that ends after the claim (the claim
		// binds the job to a live lease session) and begins before the
		// worker saw the loss.
		if a.HasEnd && a.Outcome == outcomeLost {
			r.LeaseLosses++
			if !cutBetween(a.Worker, a.Claimed, a.End) {
				r.violate("job %s: attempt %d by %s lost its lease, yet that worker's connections were not cut", id, a.Attempt, a.Worker)
			}
		}
		if a.HasLost {
			r.LostOutcomes++
			if !cutBetween(a.Worker, a.Claimed, a.LostAt) {
				r.violate("job %s: attempt %d by %s lost its outcome with its lease, yet that worker's connections were not cut", id, a.Attempt, a.Worker)
			}
		}
		_, killed := kills[a.Worker]
		if !a.HasEnd && !killed {
			r.violate("job %s: attempt %d by %s never ended, and that worker was not killed", id, a.Attempt, a.Worker)
		}
		if i == 0 {
			continue
		}
		p := as[i-1]
		if !p.HasStart {
			continue
		}
		pKilledAt, pKilled := kills[p.Worker]
		switch {
		case p.HasEnd && a.Start <= p.End && (p.HasLost || p.Outcome == outcomeLost) &&
			stoppedAfterCut(p.Worker, p.Claimed, a.Start):
			// Its worker's lease went with a cut while the worker was
			// stopped: it could act only once continued, and its outcome
			// was refused. Not avoidable by any store.
			r.StoppedCutOverlaps++
		case p.HasEnd && a.Start <= p.End:
			r.violate("job %s: attempt %d started at %s, before attempt %d ended (%s later)",
				id, a.Attempt, mono(a.Start), p.Attempt, time.Duration(p.End-a.Start))
		case p.HasEnd && p.Outcome != outcomeOK:
			r.Retries++
		case cutBetween(p.Worker, p.Claimed, a.Start):
			// Its worker's connections were cut while it ran or before
			// it recorded the outcome: the lease went with them.
			r.CutReruns++
		case !pKilled:
			what := "never ended"
			if p.HasEnd {
				what = "succeeded"
			}
			r.violate("job %s: attempt %d %s and its worker %s was not killed, yet attempt %d ran", id, p.Attempt, what, p.Worker, a.Attempt)
		case a.Start <= pKilledAt:
			r.violate("job %s: attempt %d started %s before the worker of attempt %d was killed",
				id, a.Attempt, time.Duration(pKilledAt-a.Start), p.Attempt)
		default:
			r.Reruns++
			r.recoveryWaits = append(r.recoveryWaits, time.Duration(a.Start-pKilledAt))
		}
	}
	last := as[len(as)-1]
	if j.State == jobstore.StateSucceeded {
		if last.Attempt != j.Attempt || !last.HasEnd || last.Outcome != outcomeOK {
			r.violate("job %s: succeeded at attempt %d, but the markers of that attempt do not show a success", id, j.Attempt)
		}
	}
}

func mono(ns int64) string { return fmt.Sprintf("mono %.3fs", float64(ns)/1e9) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
