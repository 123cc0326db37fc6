package runner

import (
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Metrics receives the counts and durations of a runner's attempts: an
// httpapi.Server is one, and exports them with its other metrics. Its
// methods are called from the runner's goroutines, so an implementation is
// safe for concurrent use and does not block. FeedMetrics connects one to a
// runner.
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

// FeedMetrics returns a function for Options.OnEvent that reports every
// event to m, so that
//
//	runner.New(store, &runner.Options{OnEvent: runner.FeedMetrics(api)})
//
// exports a runner's attempts with the metrics of api, an httpapi.Server.
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
