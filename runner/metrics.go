package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Metrics receives the counts and durations of a runner's attempts: an
// httpapi.Server is one, and exports them with its other metrics. Its
// methods are called from the runner's goroutines, so an implementation is
// safe for concurrent use and does not block. Options.Metrics connects one
// to a runner.
type Metrics interface {
	// ObserveClaim reports an attempt of kind claimed queueWait after its
	// job was due.
	ObserveClaim(kind string, queueWait time.Duration)
	// ObserveFinish reports an attempt of kind whose handler ran for
	// runDuration and whose outcome left the job in state: succeeded,
	// queued for a retry, failed or canceled.
	ObserveFinish(kind string, state jobstore.State, runDuration time.Duration)
	// ObserveDrop reports an attempt of kind whose outcome could not be
	// recorded (see EventDropped).
	ObserveDrop(kind string)
	// ObservePanic reports a handler of kind that panicked.
	ObservePanic(kind string)
	// ObserveStoreError reports a store call that failed and that the
	// runner retries (see EventStoreError).
	ObserveStoreError()
}

// ScheduleMetrics receives the ticks of the schedules a runner fires
// (Options.Schedules, FireSchedules): an Options.Metrics that is one gets
// them too. An httpapi.Server is one.
type ScheduleMetrics interface {
	// ObserveTick reports a tick of schedule whose job this process made
	// (of the processes that fire a tick, only the one whose submit
	// created the job), lag after the tick.
	ObserveTick(schedule string, lag time.Duration)
	// ObserveTicksSkipped reports n ticks of schedule dropped by its
	// catch-up or overlap policy.
	ObserveTicksSkipped(schedule string, n int)
}

// MetricsMiddleware returns a Middleware that reports each attempt to m
// through the middleware mechanism alone, as any middleware can: the claim
// and its queue wait (the job's StartedAt minus its RunAt) as the attempt
// starts, a panic (or runtime.Goexit) of what it wraps, and, through
// AfterAttempt, the state the store recorded, or the outcome's drop.
// Options.Metrics puts it outermost, around Options.Middleware; a store
// error outside an attempt (a failed Claim, say) is not an attempt's, and
// the runner reports it to Options.Metrics itself.
func MetricsMiddleware(m Metrics) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			m.ObserveClaim(job.Kind, max(job.StartedAt.Sub(job.RunAt), 0))
			AfterAttempt(ctx, func(e AttemptEnd) {
				if e.Recorded {
					m.ObserveFinish(job.Kind, e.Job.State, e.RunDuration)
				} else {
					m.ObserveDrop(job.Kind)
				}
			})
			returned := false
			defer func() {
				if !returned {
					m.ObservePanic(job.Kind)
				}
			}()
			result, err := next.Work(ctx, job)
			returned = true
			return result, err
		})
	}
}

// FeedMetrics returns a function for Options.OnEvent that reports every
// event to m, as Options.Metrics does through middleware.
//
// Deprecated: set Options.Metrics, whose attempts' metrics go through the
// same middleware as every other observer's (MetricsMiddleware).
func FeedMetrics(m Metrics) func(Event) {
	return func(ev Event) {
		switch ev.Type {
		case EventClaimed:
			m.ObserveClaim(ev.Job.Kind, ev.QueueWait)
		case EventFinished:
			m.ObserveFinish(ev.Job.Kind, ev.Job.State, ev.RunDuration)
		case EventDropped:
			m.ObserveDrop(ev.Job.Kind)
		case EventPanicked:
			m.ObservePanic(ev.Job.Kind)
		case EventStoreError:
			m.ObserveStoreError()
		}
	}
}
