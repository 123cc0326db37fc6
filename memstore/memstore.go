package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Options configures a Store. A nil *Options means the zero value, and every
// field's zero value selects the documented default.
type Options struct {
	// MaxPayload limits the size in bytes of a job's payload and of a
	// successful attempt's result. Zero means jobstore.DefaultMaxPayload.
	MaxPayload int
	// Backoff sets the delay before a failed attempt is retried when its
	// Outcome gives no RetryAfter. Nil means jobstore.Backoff.
	Backoff jobstore.BackoffFunc
}

// Store is an in-memory jobstore.Store. Create one with New. It is safe for
// concurrent use by goroutines.
type Store struct {
	maxPayload int
	backoff    jobstore.BackoffFunc

	mu     sync.Mutex
	closed bool
	// done is closed by Close, waking every blocked call.
	done chan struct{}
	jobs map[string]*entry
	// ids holds every job ID in ascending order. IDs made in one process
	// increase strictly, so Submit appends.
	ids  []string
	keys map[string]string // idempotency key -> job ID
	// work is closed and replaced whenever a queued job may have become
	// claimable (submit, requeue, retry), waking AwaitWork.
	work chan struct{}
	// signals counts the closes of work and what the latest empty Claim
	// saw: AwaitWork returns at once if work arrived in between, so a
	// submit that lands between a caller's empty Claim and its AwaitWork
	// is not missed.
	signals storekit.WorkCount
	// noJobAt is when a Claim last found nothing: queued jobs due by then
	// were seen by it.
	noJobAt time.Time
	// workers holds the registered workers by ID (see RegisterWorker).
	workers map[string]worker
	// ended holds the workers that unregistered, by ID, until they are
	// older than jobstore.RecentWorkerWindow (see EndedWorkers).
	ended map[string]jobstore.WorkerInfo
	// schedules holds the schedules by name (see AddSchedule).
	schedules map[string]jobstore.ScheduleInfo
	// retention is the retention policy (see SetRetention).
	retention jobstore.Retention
	// queues holds the settings of the queues that have some (see
	// queues.go).
	queues map[string]jobstore.QueueSettings
	// starts holds the recent starts of each rate-limited queue.
	starts map[string]jobstore.RateWindow
	// dependents holds, for each job that others name in their After,
	// those jobs' IDs (see deps.go).
	dependents map[string][]string
	// batches holds the batches by name.
	batches map[string]*batch
	// rateNext is when the window of a rate-limited queue whose jobs the
	// last Claim passed over has room again; AwaitWork wakes then.
	rateNext time.Time
}

// entry is one job and the channel that announces its next change.
type entry struct {
	job jobstore.Job
	// changed is closed and replaced on every change to job, and closed when
	// the job is pruned, waking Wait and WatchCancel.
	changed chan struct{}
}

var (
	_ jobstore.Store       = (*Store)(nil)
	_ jobstore.StatePruner = (*Store)(nil)
	_ jobstore.Deleter     = (*Store)(nil)
	_ jobstore.WorkAwaiter = (*Store)(nil)
)

// New returns an empty Store configured by opts, which may be nil.
func New(opts *Options) *Store {
	if opts == nil {
		opts = &Options{}
	}
	s := &Store{
		maxPayload: opts.MaxPayload,
		backoff:    opts.Backoff,
		done:       make(chan struct{}),
		jobs:       make(map[string]*entry),
		keys:       make(map[string]string),
		work:       make(chan struct{}),
		dependents: make(map[string][]string),
		batches:    make(map[string]*batch),
	}
	if s.maxPayload <= 0 {
		s.maxPayload = jobstore.DefaultMaxPayload
	}
	if s.backoff == nil {
		s.backoff = jobstore.Backoff
	}
	return s
}

// lock takes s.mu and fails with ErrClosed after Close or with the context's
// error once ctx has ended. On success the caller must unlock s.mu.
func (s *Store) lock(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("memstore: %s: %w", op, jobstore.ErrClosed)
	}
	return nil
}

// Ping returns nil while the store is open, and an error wrapping
// jobstore.ErrClosed after Close. It implements jobstore.Pinger.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.lock(ctx, "ping"); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

var _ jobstore.Pinger = (*Store)(nil)

// set stores j as the new state of e and wakes whoever waits on e. The
// caller holds s.mu.
func (s *Store) set(e *entry, j jobstore.Job) {
	freed := e.job.State == jobstore.StateRunning && j.State != jobstore.StateRunning && s.limited(&j)
	ended := !e.job.State.Terminal() && j.State.Terminal()
	e.job = j
	close(e.changed)
	e.changed = make(chan struct{})
	if j.State == jobstore.StateQueued || freed {
		// Queued work, or a limited queue's or partition's slot freed.
		s.signalWork()
	}
	if ended {
		s.settleDependents(j.ID, j.UpdatedAt)
	}
}

// signalWork wakes every AwaitWork. The caller holds s.mu.
func (s *Store) signalWork() {
	close(s.work)
	s.work = make(chan struct{})
	s.signals.Signal()
}

// get returns the entry for id, or an error wrapping ErrInvalidID or
// ErrNotFound. The caller holds s.mu.
func (s *Store) get(op, id string) (*entry, error) {
	e, ok := s.jobs[id]
	if !ok {
		return nil, fmt.Errorf("memstore: %s %s: %w", op, id, jobstore.ErrNotFound)
	}
	return e, nil
}

// Submit creates a queued job from spec and reports created=true, or returns
// the job that already has spec.Key with created=false. Returns an error
// wrapping jobstore.ErrInvalidInput (or jobstore.ErrPayloadTooLarge) for an
// invalid spec.
func (s *Store) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	if err := spec.Validate(s.maxPayload); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("memstore: submit: %w", err)
	}
	if err := s.lock(ctx, "submit"); err != nil {
		return jobstore.Job{}, false, err
	}
	defer s.mu.Unlock()
	p, err := s.plan([]jobstore.Spec{spec}, time.Now(), false)
	if err != nil {
		return jobstore.Job{}, false, fmt.Errorf("memstore: submit: %w", err)
	}
	s.add(p[0])
	return p[0].job.Clone(), p[0].created, nil
}

// SubmitBatch submits every spec as Submit would, all under one lock, and
// returns one result per spec in order. Returns an error wrapping
// jobstore.ErrInvalidInput (or jobstore.ErrPayloadTooLarge), naming the
// index, and submits nothing if any spec is invalid.
func (s *Store) SubmitBatch(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
	if err := storekit.ValidateBatch(specs, s.maxPayload); err != nil {
		return nil, fmt.Errorf("memstore: submit batch: %w", err)
	}
	if err := s.lock(ctx, "submit batch"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	p, err := s.plan(specs, time.Now(), true)
	if err != nil {
		return nil, fmt.Errorf("memstore: submit batch: %w", err)
	}
	out := make([]jobstore.Submitted, len(specs))
	for i, r := range p {
		s.add(r)
		out[i] = jobstore.Submitted{Job: r.job.Clone(), Created: r.created}
	}
	return out, nil
}

// add adds the job p made, if it is new. The caller holds s.mu.
func (s *Store) add(p planned) {
	if !p.created {
		return
	}
	j := p.job
	s.jobs[j.ID] = &entry{job: j.Clone(), changed: make(chan struct{})}
	if n := len(s.ids); n > 0 && s.ids[n-1] > j.ID {
		// Not reached with IDs from jobstore.NewID, which increase; kept so
		// that the order holds whatever the ID source.
		i, _ := slices.BinarySearch(s.ids, j.ID)
		s.ids = slices.Insert(s.ids, i, j.ID)
	} else {
		s.ids = append(s.ids, j.ID)
	}
	if j.Key != "" {
		s.keys[j.Key] = j.ID
	}
	s.link(j)
	s.signalWork()
}

// Get returns the job with the given ID. Returns an error wrapping
// jobstore.ErrInvalidID for a malformed ID and jobstore.ErrNotFound for an
// unknown one.
func (s *Store) Get(ctx context.Context, id string) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: get: %w", err)
	}
	if err := s.lock(ctx, "get"); err != nil {
		return jobstore.Job{}, err
	}
	defer s.mu.Unlock()
	e, err := s.get("get", id)
	if err != nil {
		return jobstore.Job{}, err
	}
	return e.job.Clone(), nil
}

// GetByKey returns the job whose Key is key, or an error wrapping
// jobstore.ErrNotFound if none. Returns an error wrapping
// jobstore.ErrInvalidInput for an empty or invalid key.
func (s *Store) GetByKey(ctx context.Context, key string) (jobstore.Job, error) {
	if err := jobstore.ValidateLookupKey(key); err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: get by key: %w", err)
	}
	if err := s.lock(ctx, "get by key"); err != nil {
		return jobstore.Job{}, err
	}
	defer s.mu.Unlock()
	id, ok := s.keys[key]
	if !ok {
		return jobstore.Job{}, fmt.Errorf("memstore: get by key: no job with key %q: %w", key, jobstore.ErrNotFound)
	}
	e, err := s.get("get by key", id)
	if err != nil {
		return jobstore.Job{}, err
	}
	return e.job.Clone(), nil
}

// List returns one page of the jobs that match opts, in ID order as
// opts.Order says, and the cursor of the next page. Returns an error wrapping
// jobstore.ErrInvalidInput for invalid options.
func (s *Store) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	opts, err := opts.Normalize()
	if err != nil {
		return jobstore.Page{}, fmt.Errorf("memstore: list: %w", err)
	}
	if err := s.lock(ctx, "list"); err != nil {
		return jobstore.Page{}, err
	}
	defer s.mu.Unlock()
	page := storekit.NewPageBuilder(opts)
	n := len(s.ids)
	for k := range n {
		i := k
		if opts.Order == jobstore.NewestFirst {
			i = n - 1 - k
		}
		id := s.ids[i]
		if !opts.AfterCursor(id) {
			continue
		}
		j := s.jobs[id].job
		if !j.MatchesList(opts) {
			continue
		}
		// Size does not depend on the copy, so only jobs that go on the
		// page are cloned.
		if !page.Add(j) {
			break
		}
	}
	p := page.Page()
	for i := range p.Jobs {
		p.Jobs[i] = p.Jobs[i].Clone()
	}
	return p, nil
}

// Claim moves the most urgent due queued job that req accepts to running for
// req.Worker and returns it. Returns a *jobstore.NoJobError (which wraps
// jobstore.ErrNoJob) when no such job is due; its NextRunAt is the earliest
// RunAt of the accepted queued jobs that are not yet due.
func (s *Store) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	if err := req.Validate(); err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: claim: %w", err)
	}
	if err := s.lock(ctx, "claim"); err != nil {
		return jobstore.Job{}, err
	}
	defer s.mu.Unlock()
	now := time.Now()
	var best *entry
	var next time.Time
	full := s.full()
	rated, rateNext := s.rateFull(now)
	var waitRate time.Time // when the first due job the request accepts may start by its rate
	for _, e := range s.jobs {
		j := &e.job
		if j.State != jobstore.StateQueued || !req.Accepts(j.Queue, j.Kind) || s.queues[j.Queue].Paused || full.has(j) {
			continue
		}
		if rated[j.Queue] && j.Due(now) {
			if next.IsZero() || rateNext[j.Queue].Before(next) {
				next = rateNext[j.Queue]
			}
			if waitRate.IsZero() || rateNext[j.Queue].Before(waitRate) {
				waitRate = rateNext[j.Queue]
			}
			continue
		}
		if !j.Due(now) {
			if next.IsZero() || j.RunAt.Before(next) {
				next = j.RunAt
			}
			continue
		}
		if best == nil || storekit.ClaimOrder(*j, best.job) {
			best = e
		}
	}
	if best == nil {
		s.signals.NoJob(s.signals.Seq())
		s.noJobAt = now
		s.rateNext = waitRate
		return jobstore.Job{}, fmt.Errorf("memstore: claim: %w", &jobstore.NoJobError{NextRunAt: next, Since: s.signals.Seq()})
	}
	j, err := storekit.ApplyClaim(best.job, req.Worker, now)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: claim: %w", err)
	}
	s.recordStart(j.Queue, now)
	s.set(best, j)
	return j.Clone(), nil
}

// AwaitWork blocks until a queued job may have become due and returns nil:
// a job was submitted, requeued or retried, or the earliest future RunAt
// arrived. It returns at once if such work arrived, or such a RunAt passed,
// since a Claim last found nothing, so that work arriving between a caller's
// empty Claim and its AwaitWork is not missed. It returns ctx.Err() when ctx ends and an error wrapping
// jobstore.ErrClosed when the store is closed.
func (s *Store) AwaitWork(ctx context.Context) error {
	return s.awaitWork(ctx, nil)
}

// AwaitWorkSince is AwaitWork for the caller whose Claim returned nj; it
// implements jobstore.WorkAwaiter.
func (s *Store) AwaitWorkSince(ctx context.Context, nj *jobstore.NoJobError) error {
	return s.awaitWork(ctx, nj)
}

// awaitWork is AwaitWork, or AwaitWorkSince with nj.
func (s *Store) awaitWork(ctx context.Context, nj *jobstore.NoJobError) error {
	if err := s.lock(ctx, "await work"); err != nil {
		return err
	}
	if s.signals.Arrived(nj) {
		s.mu.Unlock()
		return nil
	}
	work := s.work
	// Sleep until the earliest job that was not yet due when a Claim last
	// found nothing. Jobs due by then were seen by that Claim, so they do not
	// wake us: a due job that no claimer accepts must not make AwaitWork
	// return at once forever.
	var next time.Time
	for _, e := range s.jobs {
		j := &e.job
		if j.State == jobstore.StateQueued && j.RunAt.After(s.noJobAt) && (next.IsZero() || j.RunAt.Before(next)) {
			next = j.RunAt
		}
	}
	if !s.rateNext.IsZero() && (next.IsZero() || s.rateNext.Before(next)) {
		next = s.rateNext
	}
	if now := time.Now(); !next.IsZero() && !next.After(now) {
		s.noJobAt = now
		s.rateNext = time.Time{}
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()

	var due <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-work:
		return nil
	case <-due:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return fmt.Errorf("memstore: await work: %w", jobstore.ErrClosed)
	}
}

// Complete ends the attempt that lease holds with outcome o and returns the
// updated job. Returns an error wrapping jobstore.ErrNotHeld if lease no
// longer holds the job, jobstore.ErrNotFound if there is no such job, and
// jobstore.ErrPayloadTooLarge if o.Result exceeds the payload limit.
func (s *Store) Complete(ctx context.Context, lease jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	if err := lease.Validate(); err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: complete: %w", err)
	}
	if o.Error == "" {
		if err := jobstore.ValidatePayload(o.Result, s.maxPayload); err != nil {
			return jobstore.Job{}, fmt.Errorf("memstore: complete %s: result: %w", lease.ID, err)
		}
	}
	if err := s.lock(ctx, "complete"); err != nil {
		return jobstore.Job{}, err
	}
	defer s.mu.Unlock()
	e, err := s.get("complete", lease.ID)
	if err != nil {
		return jobstore.Job{}, err
	}
	j, err := storekit.ApplyOutcome(e.job, lease, o, time.Now(), s.backoff)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: complete: %w", err)
	}
	s.set(e, j)
	return j.Clone(), nil
}

// Release gives back the attempt that lease holds without an outcome, as
// a dead worker's would be (see storekit.ApplyRelease): the attempt counts,
// and the job is queued again due now or fails if its attempts are used
// up. It never blocks, so it goes ahead even if ctx has ended. Returns an
// error wrapping jobstore.ErrNotHeld if lease no longer holds the job, and
// jobstore.ErrNotFound if there is no such job.
func (s *Store) Release(ctx context.Context, lease jobstore.Lease) error {
	if err := lease.Validate(); err != nil {
		return fmt.Errorf("memstore: release: %w", err)
	}
	if err := s.lock(context.WithoutCancel(ctx), "release"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, err := s.get("release", lease.ID)
	if err != nil {
		return err
	}
	j, err := storekit.ApplyRelease(e.job, lease, time.Now())
	if err != nil {
		return fmt.Errorf("memstore: release: %w", err)
	}
	s.set(e, j)
	return nil
}

// WatchCancel blocks until Cancel is requested for the attempt that lease
// holds and returns nil. Returns an error wrapping jobstore.ErrNotHeld as soon
// as lease no longer holds the job, ctx.Err() when ctx ends, and an error
// wrapping jobstore.ErrClosed when the store is closed.
func (s *Store) WatchCancel(ctx context.Context, lease jobstore.Lease) error {
	if err := lease.Validate(); err != nil {
		return fmt.Errorf("memstore: watch cancel: %w", err)
	}
	for {
		if err := s.lock(ctx, "watch cancel"); err != nil {
			return err
		}
		e, err := s.get("watch cancel", lease.ID)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		if !e.job.Holds(lease) {
			s.mu.Unlock()
			return fmt.Errorf("memstore: watch cancel %s: %w", lease.ID, jobstore.ErrNotHeld)
		}
		if e.job.CancelRequested {
			s.mu.Unlock()
			return nil
		}
		changed := e.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return fmt.Errorf("memstore: watch cancel: %w", jobstore.ErrClosed)
		}
	}
}

// Cancel cancels the job with the given ID and returns it: a queued job
// becomes canceled, a running one gets CancelRequested, and a canceled one
// is returned unchanged. Returns a *jobstore.TransitionError for a succeeded
// or failed job, and an error wrapping jobstore.ErrNotFound for an unknown
// one.
func (s *Store) Cancel(ctx context.Context, id string) (jobstore.Job, error) {
	return s.update(ctx, "cancel", id, storekit.ApplyCancel)
}

// Retry queues a failed or canceled job again, due now, and returns it.
// Returns a *jobstore.TransitionError for a job in another state, and an
// error wrapping jobstore.ErrNotFound for an unknown one.
func (s *Store) Retry(ctx context.Context, id string) (jobstore.Job, error) {
	return s.update(ctx, "retry", id, func(j jobstore.Job, now time.Time) (jobstore.Job, bool, error) {
		j, err := storekit.ApplyRetry(j, now)
		if err == nil && j.State == jobstore.StateWaiting {
			j, err = storekit.SettleRetry(j, s.lookup, now)
		}
		return j, err == nil, err
	})
}

// update applies f to the job id under the lock and stores the result if f
// reports a change.
func (s *Store) update(ctx context.Context, op, id string, f func(jobstore.Job, time.Time) (jobstore.Job, bool, error)) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: %s: %w", op, err)
	}
	if err := s.lock(ctx, op); err != nil {
		return jobstore.Job{}, err
	}
	defer s.mu.Unlock()
	e, err := s.get(op, id)
	if err != nil {
		return jobstore.Job{}, err
	}
	j, changed, err := f(e.job, time.Now())
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: %s: %w", op, err)
	}
	if changed {
		s.set(e, j)
	}
	return j.Clone(), nil
}

// Wait blocks until the job is in a terminal state and returns it. Returns
// ctx.Err() when ctx ends first, an error wrapping jobstore.ErrNotFound if
// the job does not exist or is pruned while waiting, and one wrapping
// jobstore.ErrClosed when the store is closed.
func (s *Store) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("memstore: wait: %w", err)
	}
	for {
		if err := s.lock(ctx, "wait"); err != nil {
			return jobstore.Job{}, err
		}
		e, err := s.get("wait", id)
		if err != nil {
			s.mu.Unlock()
			return jobstore.Job{}, err
		}
		if e.job.State.Terminal() {
			j := e.job.Clone()
			s.mu.Unlock()
			return j, nil
		}
		changed := e.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return jobstore.Job{}, ctx.Err()
		case <-s.done:
			return jobstore.Job{}, fmt.Errorf("memstore: wait: %w", jobstore.ErrClosed)
		}
	}
}

// Prune deletes the terminal jobs that finished more than olderThan ago and
// returns how many it deleted. Their idempotency keys become free again.
func (s *Store) Prune(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.PruneStates(ctx, olderThan, nil)
}

// PruneStates is Prune limited to jobs in states; it implements
// jobstore.StatePruner.
func (s *Store) PruneStates(ctx context.Context, olderThan time.Duration, states []jobstore.State) (int, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("memstore: prune: %w: negative age %s", jobstore.ErrInvalidInput, olderThan)
	}
	inStates, err := storekit.PruneFilter(states)
	if err != nil {
		return 0, fmt.Errorf("memstore: prune: %w", err)
	}
	if err := s.lock(ctx, "prune"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	cutoff := time.Now().Add(-olderThan)
	n := 0
	s.ids = slices.DeleteFunc(s.ids, func(id string) bool {
		e := s.jobs[id]
		if !e.job.Prunable(cutoff) || !inStates(e.job.State) || s.waitingOn(id) != "" {
			return false
		}
		delete(s.jobs, id)
		s.unlink(e.job)
		if e.job.Key != "" && s.keys[e.job.Key] == id {
			delete(s.keys, e.job.Key)
		}
		close(e.changed)
		n++
		return true
	})
	return n, nil
}

// Stats counts the jobs in each state and reports the RunAt of the
// longest-waiting due queued job, of all and of each kind.
func (s *Store) Stats(ctx context.Context) (jobstore.Stats, error) {
	if err := s.lock(ctx, "stats"); err != nil {
		return jobstore.Stats{}, err
	}
	defer s.mu.Unlock()
	st := jobstore.Stats{Counts: make(map[jobstore.State]int), Kinds: make(map[string]map[jobstore.State]int), Queues: make(map[string]map[jobstore.State]int)}
	for _, state := range jobstore.States() {
		st.Counts[state] = 0
	}
	now := time.Now()
	for _, e := range s.jobs {
		st.Counts[e.job.State]++
		st.AddKind(e.job.Kind, e.job.State, 1)
		st.AddQueue(e.job.Queue, e.job.State, 1)
		if e.job.Due(now) {
			st.AddDue(e.job.Queue, e.job.Kind, e.job.RunAt)
		}
	}
	return st, nil
}

// Close marks the store closed: later calls return an error wrapping
// jobstore.ErrClosed, and blocked AwaitWork, Wait and WatchCancel calls
// return it promptly. The jobs are dropped. Close is idempotent and always
// returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	s.jobs = nil
	s.keys = nil
	s.ids = nil
	s.workers = nil
	s.queues = nil
	s.dependents = nil
	s.batches = nil
	return nil
}

// Delete deletes the finished job id. It implements jobstore.Deleter.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := jobstore.ValidateID(id); err != nil {
		return fmt.Errorf("memstore: delete: %w", err)
	}
	if err := s.lock(ctx, "delete"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, ok := s.jobs[id]
	if !ok {
		return fmt.Errorf("memstore: delete %s: %w", id, jobstore.ErrNotFound)
	}
	if !e.job.State.Terminal() {
		return fmt.Errorf("memstore: delete %s: job is %s: %w", id, e.job.State, jobstore.ErrNotFinished)
	}
	if w := s.waitingOn(id); w != "" {
		return fmt.Errorf("memstore: delete: %w", jobstore.DependedOn(id, w))
	}
	delete(s.jobs, id)
	s.unlink(e.job)
	if i, found := slices.BinarySearch(s.ids, id); found {
		s.ids = slices.Delete(s.ids, i, i+1)
	}
	if e.job.Key != "" && s.keys[e.job.Key] == id {
		delete(s.keys, e.job.Key)
	}
	close(e.changed)
	return nil
}
