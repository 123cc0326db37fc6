package jobstore

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

// Store keeps jobs and hands them to workers. It is the two roles a store
// plays, Client (what submits and follows jobs) and Worker (what runs them),
// plus Close. Every method takes a context first and returns ErrClosed after
// Close. Errors are wrapped; test them with errors.Is. Implementations are
// safe for concurrent use by goroutines; whether they are safe across
// processes is documented by each one.
//
// The behaviour documented here and on Client and Worker is specified once,
// executably, by storetest.Run.
type Store interface {
	Client
	Worker

	// Close releases the store's resources. Methods called after Close
	// return ErrClosed; blocked calls return ErrClosed promptly. Close is
	// idempotent.
	Close() error
}

// Client is the side of a Store that submits jobs and follows them: what an
// HTTP API or a command line needs, and no more. A consumer that only
// submits, reads, cancels or retries jobs takes a Client, so that it can be
// given any Store (or anything else that plays the role). Every method
// returns ErrClosed once the Store is closed.
type Client interface {
	// Submit creates a queued job from spec and reports created=true. If
	// spec.Key is set and a job with that key exists, in whatever state, it
	// returns that job and created=false instead, until that job is pruned.
	// Returns an error wrapping ErrInvalidInput (or ErrPayloadTooLarge) if
	// spec is invalid.
	Submit(ctx context.Context, spec Spec) (job Job, created bool, err error)

	// SubmitBatch submits every spec as Submit would and returns one result
	// per spec, in the order of specs; specs that share a key get one job,
	// created by the first of them. Jobs of one batch are claimed in the
	// order of specs, other things equal. If any spec is invalid, or there
	// are more than MaxBatch, it submits none and returns an error wrapping
	// ErrInvalidInput (or ErrPayloadTooLarge) that names the first bad
	// index. A durable store makes the whole batch durable at once, which
	// is much cheaper than a Submit per spec. On any other error none of
	// the batch's jobs is acknowledged; a store takes back what it created
	// where it can, and a crash may leave some of them queued, each whole:
	// use keys to submit again safely.
	SubmitBatch(ctx context.Context, specs []Spec) ([]Submitted, error)

	// Get returns the job with the given ID, or ErrNotFound. Returns
	// ErrInvalidID for a string that is not an ID.
	Get(ctx context.Context, id string) (Job, error)

	// GetByKey returns the job whose Key is key, as Get would return it,
	// or ErrNotFound if there is none (it never existed, or was pruned).
	// It reads that one job, whatever the size of the store. Returns an
	// error wrapping ErrInvalidInput for an empty or invalid key.
	GetByKey(ctx context.Context, key string) (Job, error)

	// List returns one page of jobs matching opts, ordered by ID (that is,
	// by creation time) as opts.Order says, and a cursor for the next page.
	List(ctx context.Context, opts ListOptions) (Page, error)

	// Cancel cancels a job: a queued job becomes canceled at once and is
	// never claimed; a running job gets CancelRequested, which its worker
	// sees through WatchCancel. Canceling a canceled job returns it
	// unchanged. Returns a *TransitionError for a succeeded or failed job.
	Cancel(ctx context.Context, id string) (Job, error)

	// Retry queues a failed or canceled job again, due now. If its attempts
	// are used up, MaxAttempts is raised to allow one more. Returns a
	// *TransitionError for a job in any other state.
	Retry(ctx context.Context, id string) (Job, error)

	// Wait blocks until the job is in a terminal state and returns it.
	// Returns ctx.Err() when ctx ends first, and ErrNotFound if the job does
	// not exist (or is pruned while waiting).
	Wait(ctx context.Context, id string) (Job, error)

	// Prune deletes terminal jobs that finished more than olderThan ago and
	// returns how many it deleted. Their keys become free again.
	Prune(ctx context.Context, olderThan time.Duration) (int, error)

	// Stats counts jobs by state.
	Stats(ctx context.Context) (Stats, error)
}

// Worker is the side of a Store that runs jobs: claim a due job, wait for
// work, record the outcome of an attempt or give the attempt back, and learn
// that Cancel was requested. A runner takes a Worker. Every method returns
// ErrClosed once the Store is closed.
type Worker interface {
	// Claim moves the most urgent due queued job whose kind req accepts to
	// running for req.Worker and returns it with Attempt incremented:
	// highest Priority first, then earliest RunAt, then oldest ID. Each
	// attempt is handed to exactly one caller. Returns an error wrapping
	// ErrNoJob (possibly a *NoJobError) when no job is due; it never blocks
	// waiting for one (see AwaitWork).
	Claim(ctx context.Context, req ClaimRequest) (Job, error)

	// AwaitWork blocks until a queued job may have become due (submitted,
	// requeued, or its RunAt reached), then returns nil. It may return nil
	// spuriously, so callers Claim in a loop. Returns ctx.Err() when ctx
	// ends. A Store keeps one account of the wake-ups since a Claim found
	// nothing, not one per caller: of several goroutines that claim from
	// one Store and wait here, one may take the wake-up that another
	// needed, which then waits for the next one or for its ctx. A store
	// that is a WorkAwaiter tells them apart (memstore, filestore and
	// pgstore are), and runner.Runner uses it.
	AwaitWork(ctx context.Context) error

	// Complete ends the attempt that lease holds with outcome o and returns
	// the updated job: succeeded; queued again with a backoff RunAt if it
	// failed with attempts left; failed if not, or if o.Permanent; canceled
	// if it failed after Cancel was requested; queued again due now, the
	// attempt not counted, if o.Interrupted. The attempt is added to the
	// job's History (see storekit.ApplyOutcome). Returns ErrNotHeld if lease no
	// longer holds the job.
	Complete(ctx context.Context, lease Lease, o Outcome) (Job, error)

	// Release gives back the attempt that lease holds, without an
	// outcome, as a dead worker's would be given back: the attempt counts
	// (its history says EndWorkerLost) and the job is queued again due now,
	// or failed if its attempts are used up (canceled if Cancel was
	// requested), exactly as recovery would do (see storekit.ApplyRelease). A worker
	// calls it when it cannot record an outcome, so that the job does not
	// stay running for as long as the worker lives. It is fenced by the
	// lease like Complete. Returns ErrNotHeld if lease no longer holds the
	// job. Whatever it returns, the store stops holding the lease in this
	// process, so that if the release could not be recorded, recovery
	// takes the job over within its usual time.
	Release(ctx context.Context, lease Lease) error

	// WatchCancel blocks until Cancel is requested for the attempt that
	// lease holds and returns nil. Returns ErrNotHeld as soon as the lease
	// no longer holds the job, and ctx.Err() when ctx ends.
	WatchCancel(ctx context.Context, lease Lease) error
}

// Pinger is implemented by stores that can say cheaply whether they can
// serve requests, without reading any job: a health check calls it. Ping
// returns nil if the store is open and usable (for a file store: its
// directory is there and writable), and an error saying what is wrong
// otherwise. Its cost does not grow with the number of jobs.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Submitted is SubmitBatch's result for one spec.
type Submitted struct {
	// Job is the new job, or the job that already had the spec's key.
	Job Job
	// Created is false when the spec's key already had a job (or an
	// earlier spec of the batch has the same key).
	Created bool
}

// MaxBatch is the most specs one SubmitBatch takes.
const MaxBatch = 10000

// ClaimRequest says who claims and what it can run.
type ClaimRequest struct {
	// Worker names the claimant; it is recorded on the job and in its Lease.
	// Use a name unique to the process (see runner.DefaultWorkerName).
	Worker string
	// Kinds limits the claim to jobs of these kinds; empty means any kind.
	Kinds []string
	// Queues limits the claim to jobs of these queues; empty means every
	// queue. Kinds filter within them. A paused queue's jobs are never
	// claimed, whatever the request.
	Queues []string
}

// Validate checks the fields of a claim request a caller passes to a
// store: a valid worker name (see ValidateWorker) and valid kinds (see
// ValidateKind). Every store calls it first in Claim (and ClaimBatch), so a
// malformed request fails the same way in each. Its error wraps
// ErrInvalidInput.
func (req ClaimRequest) Validate() error {
	if err := ValidateWorker(req.Worker); err != nil {
		return err
	}
	for _, k := range req.Kinds {
		if err := ValidateKind(k); err != nil {
			return err
		}
	}
	for _, q := range req.Queues {
		if err := ValidateQueue(q); err != nil {
			return err
		}
	}
	return nil
}

// Accepts reports whether req may claim a job of the given queue and kind
// (pauses aside: the store knows those).
func (req ClaimRequest) Accepts(queue, kind string) bool {
	return (len(req.Kinds) == 0 || slices.Contains(req.Kinds, kind)) &&
		(len(req.Queues) == 0 || slices.Contains(req.Queues, QueueOf(queue)))
}

// AcceptsQueue reports whether req may claim jobs of queue, whatever
// their kind.
func (req ClaimRequest) AcceptsQueue(queue string) bool {
	return len(req.Queues) == 0 || slices.Contains(req.Queues, QueueOf(queue))
}

// Order is the order in which List returns jobs.
type Order int

const (
	// NewestFirst lists the most recently created jobs first (the default).
	NewestFirst Order = iota
	// OldestFirst lists the oldest jobs first.
	OldestFirst
)

// Limits on List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListOptions selects and pages jobs for List. The zero value lists the
// newest DefaultListLimit jobs in any state.
type ListOptions struct {
	// States keeps only jobs in one of these states; empty means all.
	States []State
	// Kind keeps only jobs of this kind; empty means all.
	Kind string
	// Queue keeps only jobs of this queue; empty means all.
	Queue string
	// Tag keeps only jobs with this tag (Job.Tags); empty means all.
	Tag string
	// Limit is the page size: zero means DefaultListLimit; at most
	// MaxListLimit.
	Limit int
	// Cursor continues from a previous Page.Next; empty starts at the
	// beginning.
	Cursor string
	// Order is NewestFirst (zero) or OldestFirst.
	Order Order
	// MaxBytes, when positive, bounds the page by size as well as by
	// Limit: the store stops before a job whose Size would bring the
	// page's total over MaxBytes, sets Page.Next to continue after the
	// last job it kept, and sets Page.ByteLimited. The first matching job
	// is always returned, whatever its size, so a page is never empty
	// while jobs remain. Zero means no bound but Limit. A server sets it
	// so that one request cannot make it hold Limit times the largest
	// payload in memory.
	MaxBytes int
}

// Page is one page of List results.
type Page struct {
	// Jobs holds at most Limit jobs.
	Jobs []Job `json:"jobs"`
	// Next is the cursor for the following page, or empty at the end.
	Next string `json:"next,omitempty"`
	// ByteLimited reports that the page holds fewer than Limit jobs
	// because ListOptions.MaxBytes was reached; Next continues it.
	ByteLimited bool `json:"byte_limited,omitempty"`
	// Errors reports records the store could not read and skipped; each
	// wraps ErrCorrupt and names the record.
	Errors []error `json:"-"`
}

// Outcome is how an attempt ended, passed to Complete.
type Outcome struct {
	// Result is the output of a successful attempt (a JSON value).
	Result json.RawMessage
	// Error, when non-empty, marks the attempt failed with this message.
	Error string
	// Permanent makes a failure final even if attempts remain.
	Permanent bool
	// RetryAfter, when positive, replaces the store's backoff before the
	// next attempt of a failed job.
	RetryAfter time.Duration
	// Interrupted says the attempt was cut short by its worker's graceful
	// shutdown, not by anything the job did: a failure (Error set) so
	// marked queues the job again due at once and does not count the
	// attempt (MaxAttempts grows by one; Attempt keeps counting, since it
	// fences leases). Permanent and RetryAfter are ignored. A job whose
	// Cancel was requested is canceled all the same.
	Interrupted bool
	// TimedOut says the attempt was stopped because it ran past its
	// timeout. It is a failure like any other (it counts, and retries
	// with backoff); the job's History records it as EndTimedOut.
	TimedOut bool
}

// Succeeded returns the outcome of a successful attempt with result.
func Succeeded(result json.RawMessage) Outcome { return Outcome{Result: result} }

// Failed returns the outcome of an attempt that failed with err.
func Failed(err error) Outcome {
	msg := "failed"
	if err != nil && err.Error() != "" {
		msg = err.Error()
	}
	return Outcome{Error: msg}
}

// Interrupted returns the outcome of an attempt cut short by its worker's
// graceful shutdown, with why as its error.
func Interrupted(why error) Outcome {
	o := Failed(why)
	o.Interrupted = true
	return o
}

// Stats summarizes a store.
type Stats struct {
	// Counts holds the number of jobs in each state; every state is present.
	Counts map[State]int `json:"counts"`
	// Kinds holds, for each kind that has jobs, its number of jobs in each
	// state that has some of them (a state without jobs of the kind is
	// absent). It is never nil.
	Kinds map[string]map[State]int `json:"kinds"`
	// OldestQueuedAt is the RunAt of the longest-waiting due queued job, or
	// zero if none is due.
	OldestQueuedAt time.Time `json:"oldest_queued_at,omitzero"`
	// OldestQueuedByKind holds, for each kind that has a due queued job,
	// the RunAt of its longest-waiting one; nil when no job is due.
	OldestQueuedByKind map[string]time.Time `json:"oldest_queued_by_kind,omitempty"`
	// Queues holds, for each queue that has jobs, its number of jobs in
	// each state that has some of them, as Kinds does for kinds. It is
	// never nil.
	Queues map[string]map[State]int `json:"queues"`
	// OldestQueuedByQueue holds, for each queue that has a due queued
	// job, the RunAt of its longest-waiting one; nil when no job is due.
	OldestQueuedByQueue map[string]time.Time `json:"oldest_queued_by_queue,omitempty"`
}

// AddDue records a due queued job of queue and kind whose RunAt is runAt
// in OldestQueuedAt, OldestQueuedByKind and OldestQueuedByQueue, if it
// waited longer than those recorded so far. Stores use it to fill Stats.
func (s *Stats) AddDue(queue, kind string, runAt time.Time) {
	if s.OldestQueuedAt.IsZero() || runAt.Before(s.OldestQueuedAt) {
		s.OldestQueuedAt = runAt
	}
	if s.OldestQueuedByKind == nil {
		s.OldestQueuedByKind = make(map[string]time.Time)
	}
	if old, ok := s.OldestQueuedByKind[kind]; !ok || runAt.Before(old) {
		s.OldestQueuedByKind[kind] = runAt
	}
	queue = QueueOf(queue)
	if s.OldestQueuedByQueue == nil {
		s.OldestQueuedByQueue = make(map[string]time.Time)
	}
	if old, ok := s.OldestQueuedByQueue[queue]; !ok || runAt.Before(old) {
		s.OldestQueuedByQueue[queue] = runAt
	}
}

// StatePruner is a Store that prunes only the terminal jobs in some
// states; memstore, filestore and pgstore implement it.
type StatePruner interface {
	// PruneStates is Prune limited to jobs in one of states, each a
	// terminal state; no states means every terminal state, as Prune.
	// Returns an error wrapping ErrInvalidInput for a state that is not
	// terminal, or a negative olderThan.
	PruneStates(ctx context.Context, olderThan time.Duration, states []State) (int, error)
}

// Deleter is a Store that deletes one finished job by its ID, as Prune
// would delete it, whatever its age: memstore, filestore and pgstore
// implement it.
type Deleter interface {
	// Delete deletes the succeeded, failed or canceled job id; its key
	// becomes free. Returns ErrNotFound if there is no such job,
	// ErrInvalidID for a string that is not an ID, and an error wrapping
	// ErrNotFinished for a queued or running job, which stays.
	Delete(ctx context.Context, id string) error
}

// Matching returns how many of the jobs s counts are in one of states (any
// state if none) and of kind (any kind if empty): the total of a List with
// those filters, as of the Stats call.
func (s Stats) Matching(kind string, states []State) int {
	counts := s.Counts
	if kind != "" {
		counts = s.Kinds[kind]
	}
	n := 0
	for state, c := range counts {
		if len(states) == 0 || slices.Contains(states, state) {
			n += c
		}
	}
	return n
}

// AddQueue adds n jobs of queue in state to s.Queues, which it makes if
// nil, and drops the entries that n (negative) brings to zero. Stores use
// it to fill Stats.
func (s *Stats) AddQueue(queue string, state State, n int) {
	addCount(&s.Queues, QueueOf(queue), state, n)
}

func addCount(m *map[string]map[State]int, name string, state State, n int) {
	if *m == nil {
		*m = make(map[string]map[State]int)
	}
	if (*m)[name] == nil {
		(*m)[name] = make(map[State]int)
	}
	(*m)[name][state] += n
	if (*m)[name][state] == 0 {
		delete((*m)[name], state)
		if len((*m)[name]) == 0 {
			delete(*m, name)
		}
	}
}

// AddKind adds n jobs of kind in state to s.Kinds, which it makes if nil.
// Stores use it to fill Stats.
func (s *Stats) AddKind(kind string, state State, n int) {
	if s.Kinds == nil {
		s.Kinds = make(map[string]map[State]int)
	}
	if s.Kinds[kind] == nil {
		s.Kinds[kind] = make(map[State]int)
	}
	s.Kinds[kind][state] += n
}
