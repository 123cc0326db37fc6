package runner

import (
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// EventType says what an Event reports.
type EventType int

// The events a Runner reports through Options.OnEvent.
const (
	// EventClaimed: the runner claimed Job (as returned by Claim) and is
	// about to run its handler. QueueWait is set.
	EventClaimed EventType = iota + 1
	// EventPanicked: the handler panicked. Err is the *PanicError. An
	// EventFinished or EventDropped follows.
	EventPanicked
	// EventFinished: the attempt ended and the store recorded Outcome. Job
	// is the job as Complete returned it (succeeded, queued for a retry,
	// failed or canceled); RunDuration is how long the handler ran; Err is
	// the handler's error, nil on success.
	EventFinished
	// EventDropped: the attempt ended but its outcome was not recorded
	// because the lease was lost or Complete kept failing. Job is the job
	// as claimed; Err says why. When Complete kept failing, the runner has
	// given the attempt back with Worker.Release before this event.
	EventDropped
	// EventStoreError: a store call the runner retries (Claim, AwaitWork,
	// WatchCancel, Complete, the reads and submits of schedules) failed,
	// or a Release after a dropped outcome did. Err is the error.
	EventStoreError
	// EventTickFired: the runner made the job of a schedule's tick
	// (Options.Schedules). Job is the job, Schedule and Tick name the
	// tick, and QueueWait is how long after the tick the job was made.
	// Only the process whose Submit created the job reports it.
	EventTickFired
	// EventTicksSkipped: a schedule's catch-up or overlap policy dropped
	// Skipped ticks; Tick is the latest tick due then.
	EventTicksSkipped
	// EventPruned: a runner that fires schedules pruned Pruned finished
	// jobs as the store's retention policy says
	// (jobstore.RetentionKeeper).
	EventPruned
)

var eventNames = map[EventType]string{
	EventClaimed:      "claimed",
	EventPanicked:     "panicked",
	EventFinished:     "finished",
	EventDropped:      "dropped",
	EventStoreError:   "store_error",
	EventTickFired:    "tick_fired",
	EventTicksSkipped: "ticks_skipped",
	EventPruned:       "pruned",
}

// String returns the event's lower-case name, such as "claimed".
func (t EventType) String() string {
	if s, ok := eventNames[t]; ok {
		return s
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is something that happened in a Runner, passed to Options.OnEvent
// for metrics and tests. Fields that do not apply to Type are zero.
type Event struct {
	// Type says what happened.
	Type EventType
	// Time is when it happened.
	Time time.Time
	// Worker is the runner's worker name.
	Worker string
	// Job is the job concerned (zero for a Claim or AwaitWork error).
	Job jobstore.Job
	// QueueWait, for EventClaimed, is how long the job was due before it
	// was claimed: its StartedAt minus its RunAt.
	QueueWait time.Duration
	// RunDuration, for EventFinished and EventDropped, is how long the
	// handler ran.
	RunDuration time.Duration
	// Outcome, for EventFinished and EventDropped, is the outcome passed to
	// Complete.
	Outcome jobstore.Outcome
	// Err is the handler's error, the panic, or the store error.
	Err error
	// Schedule and Tick, for EventTickFired and EventTicksSkipped, name
	// the schedule and the tick.
	Schedule string
	Tick     time.Time
	// Skipped, for EventTicksSkipped, is how many ticks were dropped.
	Skipped int
	// Pruned, for EventPruned, is how many jobs were pruned.
	Pruned int
}
