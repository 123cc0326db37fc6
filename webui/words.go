package webui

import (
	"fmt"
	"time"

	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

// ago says how long d is, the way a person reads it at a glance, as the
// command line does (humantime.Duration): "45s", "5m 3s", "2h 5m".
func ago(d time.Duration) string { return humantime.Duration(d) }

// stateWords says where a job is, in words, at time now: "scheduled in
// 5m", "retrying in 30s", "running for 12s", "succeeded 2m ago", with the
// attempt where it matters ("attempt 2/3"); "waiting for 5 jobs" for a
// job that waits for its dependencies.
func stateWords(j jobstore.Job, now time.Time) string {
	used, limit, _ := j.CountedAttempts()
	attempt := func(n int) string { return fmt.Sprintf("attempt %d/%d", n, limit) }
	switch j.State {
	case jobstore.StateWaiting:
		// The pages that read the dependencies say how many are left
		// (depStates.words).
		return "waiting for " + plural(len(j.After), "job", "jobs")
	case jobstore.StateQueued:
		if wait := j.RunAt.Sub(now); wait > 0 {
			if j.Attempt > 0 {
				return fmt.Sprintf("retrying in %s, %s", ago(wait), attempt(used+1))
			}
			return "scheduled in " + ago(wait)
		}
		if j.Attempt > 0 {
			return "queued to retry now, " + attempt(used+1)
		}
		return "queued, due for " + ago(now.Sub(j.RunAt))
	case jobstore.StateRunning:
		s := fmt.Sprintf("running for %s, %s", ago(now.Sub(j.StartedAt)), attempt(used))
		if j.CancelRequested {
			s = "canceling: " + s
		}
		return s
	case jobstore.StateSucceeded:
		return fmt.Sprintf("succeeded %s ago, %s", ago(now.Sub(j.FinishedAt)), attempt(used))
	case jobstore.StateFailed:
		return fmt.Sprintf("failed %s ago, after %s", ago(now.Sub(j.FinishedAt)), attempt(used))
	case jobstore.StateCanceled:
		return fmt.Sprintf("canceled %s ago", ago(now.Sub(j.FinishedAt)))
	}
	return string(j.State)
}
