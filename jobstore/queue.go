package jobstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jobdir/jobdir/internal/clip"
)

// DefaultQueue is the queue of a job whose Spec names none, and of every
// job a store kept before it had queues.
const DefaultQueue = "default"

// MaxQueueLen is the longest queue name accepted, in bytes.
const MaxQueueLen = 128

// ValidateQueue checks a queue name: 1 to MaxQueueLen bytes of letters,
// digits and ._:/- , the same rule as a kind's. Its error wraps
// ErrInvalidInput.
func ValidateQueue(queue string) error {
	if queue == "" {
		return fmt.Errorf("%w: queue name is empty", ErrInvalidInput)
	}
	if len(queue) > MaxQueueLen {
		return fmt.Errorf("%w: queue name is %d bytes, limit %d", ErrInvalidInput, len(queue), MaxQueueLen)
	}
	if !nameOf(queue) {
		return fmt.Errorf("%w: queue %q: only letters, digits and ._:/- are allowed", ErrInvalidInput, clip.String(queue, 64))
	}
	return nil
}

// nameByte reports whether c may appear in a kind or a queue name.
// nameOf reports whether s is made of the bytes a kind or a queue name may
// hold (nameByte).
func nameOf(s string) bool {
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '/' || c == '-'
}

// QueueOf returns the queue a job or spec names: queue itself, or
// DefaultQueue when it is empty.
func QueueOf(queue string) string {
	if queue == "" {
		return DefaultQueue
	}
	return queue
}

// QueueSettings are what a store keeps for one queue, apart from its jobs.
// The zero value is a queue that runs.
type QueueSettings struct {
	// Paused stops claims of the queue's jobs, by every process of the
	// store, until the queue is resumed. Running jobs go on, and submits
	// are accepted.
	Paused bool `json:"paused"`
	// Limit, when positive, is the most jobs of the queue that run at
	// once, in every process of the store together; 0 means no limit
	// (see QueueLimiter).
	Limit int `json:"limit"`
	// PerPartition, when positive, is the most jobs of each partition of
	// the queue (Job.Partition) that run at once, in every process
	// together; 0 means no such limit. A job without a partition is
	// bounded by Limit only.
	PerPartition int `json:"per_partition"`
	// Rate, when not zero, bounds how many of the queue's jobs start in
	// any window of time, in every process together (see Rate).
	Rate Rate `json:"rate,omitzero"`
}

// MaxQueueLimit is the largest concurrency limit a queue takes.
const MaxQueueLimit = 10000

// QueueInfo describes one queue: its settings and what it holds.
type QueueInfo struct {
	// Queue is the queue's name.
	Queue string `json:"queue"`
	QueueSettings
	// Queued and Running count the queue's jobs in those states.
	Queued  int `json:"queued"`
	Running int `json:"running"`
	// OldestDueAt is the RunAt of the queue's longest-waiting due queued
	// job; zero when none is due.
	OldestDueAt time.Time `json:"oldest_due_at,omitzero"`
}

// QueueController is implemented by stores that keep queue settings:
// memstore, filestore and pgstore. A queue exists once a job or a setting
// names it; every method accepts any valid name. A setting is durable when
// its method returns, and every process of the store sees it from then on.
// storetest.Run checks every store that implements it.
type QueueController interface {
	// Queues returns every queue that has jobs or settings, sorted by
	// name.
	Queues(ctx context.Context) ([]QueueInfo, error)

	// PauseQueue pauses queue: once it returns, no process claims a job
	// of queue until ResumeQueue. Jobs already running go on. Pausing a
	// paused queue changes nothing. Returns an error wrapping
	// ErrInvalidInput for an invalid name.
	PauseQueue(ctx context.Context, queue string) error

	// ResumeQueue lets the jobs of a paused queue be claimed again, and
	// wakes the workers that wait for work (AwaitWork), in every process.
	// Resuming a queue that runs changes nothing. Returns an error
	// wrapping ErrInvalidInput for an invalid name.
	ResumeQueue(ctx context.Context, queue string) error
}

// QueueLimiter is implemented by stores that bound how many jobs of a
// queue run at once across every process of the store: memstore,
// filestore and pgstore. storetest.Run checks every store that implements
// it.
type QueueLimiter interface {
	QueueController

	// SetQueueLimit makes limit the most jobs of queue that run at once,
	// in every process together; 0 removes the limit. Claims pass over the
	// jobs of a queue that has limit jobs running and go on to other
	// queues' jobs; a limit lowered below the running count lets the
	// running jobs finish and starts none until fewer run. A job counts
	// from its claim until its attempt ends: its Complete or Release, or
	// the end of every process that holds its lease (a worker that died,
	// and the processes of its attempt, such as execjob's supervisor).
	// Returns an error wrapping ErrInvalidInput for an invalid name or a
	// limit out of 0..MaxQueueLimit, and changes nothing then.
	SetQueueLimit(ctx context.Context, queue string, limit int) error

	// SetPartitionLimit makes limit the most jobs of each partition of
	// queue that run at once, in every process together; 0 removes it.
	// With a limit of 1 the jobs of a partition run one after another, in
	// claim order. It counts jobs as SetQueueLimit does, and holds beside
	// the queue's own limit: a job starts only when both have room. Jobs
	// without a partition are not bounded by it. Returns an error wrapping
	// ErrInvalidInput for an invalid name or a limit out of
	// 0..MaxQueueLimit, and changes nothing then.
	SetPartitionLimit(ctx context.Context, queue string, limit int) error

	// SetQueueRate makes rate the queue's rate limit: at most rate.N of
	// its jobs start in any window of rate.Per, in every process
	// together; the zero Rate removes it. A claim that finds the window
	// full passes over the queue's jobs, and its NoJobError's NextRunAt is
	// no later than when the next start is allowed. A start counts from
	// its claim, whatever the attempt's outcome. Returns an error wrapping
	// ErrInvalidInput for an invalid name or rate, and changes nothing
	// then.
	SetQueueRate(ctx context.Context, queue string, rate Rate) error
}

// ValidateQueueLimit checks a concurrency limit for SetQueueLimit and
// SetPartitionLimit: 0 (none) to MaxQueueLimit. Its error wraps
// ErrInvalidInput.
func ValidateQueueLimit(limit int) error {
	if limit < 0 || limit > MaxQueueLimit {
		return fmt.Errorf("%w: limit %d out of range 0..%d (0: no limit)", ErrInvalidInput, limit, MaxQueueLimit)
	}
	return nil
}

// QueueInfos builds the QueueInfo of every queue from a store's Stats and
// settings: the queues that have jobs (in any state) or settings, sorted
// by name. Stores use it to implement QueueController.Queues.
func QueueInfos(st Stats, settings map[string]QueueSettings) []QueueInfo {
	names := make(map[string]bool, len(st.Queues)+len(settings))
	for q := range st.Queues {
		names[q] = true
	}
	for q := range settings {
		names[q] = true
	}
	out := make([]QueueInfo, 0, len(names))
	for q := range names {
		counts := st.Queues[q]
		out = append(out, QueueInfo{
			Queue:         q,
			QueueSettings: settings[q],
			Queued:        counts[StateQueued],
			Running:       counts[StateRunning],
			OldestDueAt:   st.OldestQueuedByQueue[q],
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out
}

// PausedQueues returns the names of the paused queues of settings, sorted.
func PausedQueues(settings map[string]QueueSettings) []string {
	var out []string
	for q, st := range settings {
		if st.Paused {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out
}
