package jobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrNoWorker is returned by the submits of RequireWorker for a kind that
// no live worker runs.
var ErrNoWorker = errors.New("no live or recent worker runs this kind")

// ErrWorkerExists is returned by WorkerRegistry.RegisterWorker when a live
// worker is already registered under the same ID.
var ErrWorkerExists = errors.New("a live worker already has this name")

// WorkerInfo describes one live worker: a process (or a runner within one)
// that claims jobs, what it serves and since when. A runner registers one
// while it runs (see WorkerRegistry); the workers view, `jobdir workers`
// and GET /v1/workers show them.
type WorkerInfo struct {
	// ID is the worker's name, the one it claims with: the Worker of the
	// jobs it runs. See ValidateWorker.
	ID string `json:"id"`
	// Host is the name of the machine (or pod) it runs on.
	Host string `json:"host,omitempty"`
	// PID is its process ID, as its own PID namespace sees it.
	PID int `json:"pid,omitempty"`
	// StartedAt is when it started serving.
	StartedAt time.Time `json:"started_at"`
	// Kinds lists the kinds it claims, sorted; empty means every kind.
	Kinds []string `json:"kinds"`
	// Queues lists the queues it takes, sorted; empty means every queue.
	Queues []string `json:"queues"`
	// Concurrency is how many jobs it runs at once at most.
	Concurrency int `json:"concurrency"`
	// Version is the version of the program, if it says.
	Version string `json:"version,omitempty"`
	// Running holds the IDs of the jobs it runs now, oldest first. A
	// registry does not store it; ListWorkers fills it from the jobs.
	Running []string `json:"running"`
	// EndedAt is, for a worker that ended (see WorkerHistory), when its
	// store learned it: at its unregister or its store's Close, or the
	// first look after its process died. Zero for a live worker.
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// MaxWorkerKinds is the most kinds one WorkerInfo lists.
const MaxWorkerKinds = 1000

// Validate checks the fields of info that a registry stores: a valid ID
// (see ValidateWorker), valid kinds, a concurrency of at least 1, and host
// and version of at most 256 bytes. Its error wraps ErrInvalidInput.
func (info WorkerInfo) Validate() error {
	if err := ValidateWorker(info.ID); err != nil {
		return err
	}
	if len(info.Kinds) > MaxWorkerKinds {
		return fmt.Errorf("%w: worker %s serves %d kinds, more than %d", ErrInvalidInput, info.ID, len(info.Kinds), MaxWorkerKinds)
	}
	for _, k := range info.Kinds {
		if err := ValidateKind(k); err != nil {
			return err
		}
	}
	if len(info.Queues) > MaxWorkerKinds {
		return fmt.Errorf("%w: worker %s takes %d queues, more than %d", ErrInvalidInput, info.ID, len(info.Queues), MaxWorkerKinds)
	}
	for _, q := range info.Queues {
		if err := ValidateQueue(q); err != nil {
			return err
		}
	}
	if info.Concurrency < 1 {
		return fmt.Errorf("%w: worker %s: concurrency %d, less than 1", ErrInvalidInput, info.ID, info.Concurrency)
	}
	if len(info.Host) > 256 || len(info.Version) > 256 {
		return fmt.Errorf("%w: worker %s: host and version must be at most 256 bytes", ErrInvalidInput, info.ID)
	}
	if info.PID < 0 {
		return fmt.Errorf("%w: worker %s: negative process ID", ErrInvalidInput, info.ID)
	}
	return nil
}

// Normalized returns a copy of info as a registry stores it: kinds and
// queues sorted and without repeats, StartedAt in UTC (now if zero), and no
// Running or EndedAt.
func (info WorkerInfo) Normalized() WorkerInfo {
	info.EndedAt = time.Time{}
	info.Kinds = sortedSet(info.Kinds)
	info.Queues = sortedSet(info.Queues)
	if info.StartedAt.IsZero() {
		info.StartedAt = time.Now()
	}
	info.StartedAt = info.StartedAt.UTC().Round(time.Microsecond)
	info.Running = nil
	return info
}

// sortedSet returns names sorted, without repeats, never nil.
func sortedSet(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// Serves reports whether the worker claims jobs of kind.
func (info WorkerInfo) Serves(kind string) bool {
	if len(info.Kinds) == 0 {
		return true
	}
	return slices.Contains(info.Kinds, kind)
}

// AnyServes reports whether one of workers claims jobs of kind.
func AnyServes(workers []WorkerInfo, kind string) bool {
	return slices.ContainsFunc(workers, func(w WorkerInfo) bool { return w.Serves(kind) })
}

// Takes reports whether the worker claims jobs of queue (an empty queue is
// DefaultQueue).
func (info WorkerInfo) Takes(queue string) bool {
	return len(info.Queues) == 0 || slices.Contains(info.Queues, QueueOf(queue))
}

// AnyServesJob reports whether one of workers claims jobs of queue and
// kind.
func AnyServesJob(workers []WorkerInfo, queue, kind string) bool {
	return slices.ContainsFunc(workers, func(w WorkerInfo) bool { return w.Takes(queue) && w.Serves(kind) })
}

// UnservedQueues returns, sorted, the queues that have queued jobs in
// stats but that no worker of workers takes, whatever the kinds. It is
// never nil.
func UnservedQueues(stats Stats, workers []WorkerInfo) []string {
	out := []string{}
	for queue, counts := range stats.Queues {
		if counts[StateQueued] == 0 {
			continue
		}
		if !slices.ContainsFunc(workers, func(w WorkerInfo) bool { return w.Takes(queue) }) {
			out = append(out, queue)
		}
	}
	slices.Sort(out)
	return out
}

// WorkerRegistry is a Store that knows which workers are alive: memstore,
// filestore and pgstore implement it. A worker registers itself while it
// runs and is listed until it unregisters, its store is closed, or its
// process dies, whichever comes first: a dead process is never listed for
// long (the file store learns it from the lock the process held, at once;
// pgstore from the database session it held, within its lease timeout). A
// process that is stopped but alive stays listed.
type WorkerRegistry interface {
	// RegisterWorker lists info (see WorkerInfo.Normalized) until
	// unregister is called, the store is closed, or the process ends.
	// Returns an error wrapping ErrInvalidInput if info is invalid (see
	// WorkerInfo.Validate), and ErrWorkerExists if a live worker has the
	// same ID. unregister is idempotent.
	RegisterWorker(ctx context.Context, info WorkerInfo) (unregister func() error, err error)

	// Workers returns the live workers, sorted by ID, with Running empty
	// (see ListWorkers). It forgets the registrations of dead processes
	// as it finds them.
	Workers(ctx context.Context) ([]WorkerInfo, error)
}

// RecentWorkerWindow is how long a WorkerHistory remembers a worker that
// ended: long enough to span a restart or a rollout, so that a submit made
// while the only worker of a kind restarts is not taken for a kind nobody
// runs.
const RecentWorkerWindow = 15 * time.Minute

// WorkerHistory is a WorkerRegistry that also remembers the workers that
// ended lately: memstore, filestore and pgstore implement it.
type WorkerHistory interface {
	WorkerRegistry

	// EndedWorkers returns the workers that ended at or after since and
	// within RecentWorkerWindow (older ends are forgotten), sorted by ID,
	// each with EndedAt set: those that unregistered, whose store closed,
	// or whose process died. A worker ID that ended more than once is
	// listed with its latest end; a worker listed here may be live again
	// under the same ID (see RecentWorkers).
	EndedWorkers(ctx context.Context, since time.Time) ([]WorkerInfo, error)
}

// RecentWorkers returns the live workers of reg, and, if reg is a
// WorkerHistory, the workers that ended within RecentWorkerWindow before
// now and are not live again, each with EndedAt: the workers that
// "serve" a kind for a submit's check (RequireWorker, jobdir submit).
func RecentWorkers(ctx context.Context, reg WorkerRegistry, now time.Time) ([]WorkerInfo, error) {
	live, err := reg.Workers(ctx)
	if err != nil {
		return nil, err
	}
	h, ok := reg.(WorkerHistory)
	if !ok {
		return live, nil
	}
	ended, err := h.EndedWorkers(ctx, now.Add(-RecentWorkerWindow))
	if err != nil {
		return nil, err
	}
	for _, w := range ended {
		if !slices.ContainsFunc(live, func(l WorkerInfo) bool { return l.ID == w.ID }) {
			live = append(live, w)
		}
	}
	return live, nil
}

// Lister lists jobs, as Client.List: what ListWorkers needs of a store
// besides its WorkerRegistry.
type Lister interface {
	List(ctx context.Context, opts ListOptions) (Page, error)
}

// ListWorkers returns the live workers of c, which must be a
// WorkerRegistry (an error wrapping errors.ErrUnsupported if not), each
// with the jobs it runs now in Running.
func ListWorkers(ctx context.Context, c Lister) ([]WorkerInfo, error) {
	reg, ok := c.(WorkerRegistry)
	if !ok {
		return nil, fmt.Errorf("this store does not keep a list of workers: %w", errors.ErrUnsupported)
	}
	ws, err := reg.Workers(ctx)
	if err != nil {
		return nil, err
	}
	running := map[string][]string{}
	opts := ListOptions{States: []State{StateRunning}, Limit: MaxListLimit, Order: OldestFirst}
	for {
		page, err := c.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, j := range page.Jobs {
			running[j.Worker] = append(running[j.Worker], j.ID)
		}
		if page.Next == "" {
			break
		}
		opts.Cursor = page.Next
	}
	for i := range ws {
		ws[i].Running = running[ws[i].ID]
		if ws[i].Running == nil {
			ws[i].Running = []string{}
		}
	}
	return ws, nil
}

// UnservedKinds returns, sorted, the kinds that have queued jobs in stats
// but that no worker of workers claims: jobs that wait for a worker that is
// not there. It is never nil, so that JSON shows an empty list as [].
func UnservedKinds(stats Stats, workers []WorkerInfo) []string {
	out := []string{}
	for kind, counts := range stats.Kinds {
		if counts[StateQueued] == 0 {
			continue
		}
		if !AnyServes(workers, kind) {
			out = append(out, kind)
		}
	}
	slices.Sort(out)
	return out
}

// RequireWorker is a SubmitMiddleware (see WithSubmitMiddleware) that
// refuses, before anything is submitted, a Submit or SubmitBatch with a
// spec whose kind no live or recent worker of reg runs (see
// RecentWorkers: one that ended within RecentWorkerWindow counts, so that
// a restart of the only worker refuses nothing), or whose queue none that
// runs the kind takes, with an error wrapping ErrNoWorker that names the
// kind (and the queue): for a program that would rather fail than queue a
// job nobody will run. The check and the submit are not one step: a
// worker that stops just after the check leaves the job queued.
func RequireWorker(reg WorkerRegistry) SubmitMiddleware {
	return func(next SubmitFunc) SubmitFunc {
		return func(ctx context.Context, specs []Spec) ([]Submitted, error) {
			ws, err := RecentWorkers(ctx, reg, time.Now())
			if err != nil {
				return nil, err
			}
			for i, spec := range specs {
				if !AnyServesJob(ws, spec.Queue, spec.Kind) {
					what := fmt.Sprintf("kind %q", spec.Kind)
					if q := QueueOf(spec.Queue); q != DefaultQueue {
						what += fmt.Sprintf(" in queue %q", q)
					}
					if len(specs) == 1 {
						return nil, fmt.Errorf("%s: %w", what, ErrNoWorker)
					}
					return nil, fmt.Errorf("spec %d: %s: %w", i, what, ErrNoWorker)
				}
			}
			return next(ctx, specs)
		}
	}
}
