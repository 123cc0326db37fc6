package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Runner claims jobs from a store and runs them with the registered
// handlers. Create it with New, register handlers with Handle, then call
// Run. Its methods are safe for concurrent use.
type Runner struct {
	store jobstore.Worker
	s     settings

	mu       sync.Mutex
	handlers map[string]Handler
	running  bool
}

// New returns a Runner that executes jobs from store, configured by opts
// (nil means the defaults).
func New(store jobstore.Worker, opts *Options) *Runner {
	if store == nil {
		panic("runner: New with nil store")
	}
	return &Runner{store: store, s: opts.settings(), handlers: map[string]Handler{}}
}

// Handle registers h for jobs of the given kind. Call it before Run; the
// runner claims only kinds that have a handler. Handle panics if kind is not
// a valid kind (see jobstore.ValidateKind), if it already has a handler, if
// h is nil, or if Run is running.
func (r *Runner) Handle(kind string, h Handler) {
	if err := jobstore.ValidateKind(kind); err != nil {
		panic(fmt.Sprintf("runner: Handle: %v", err))
	}
	if h == nil {
		panic(fmt.Sprintf("runner: Handle(%q): nil handler", kind))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		panic(fmt.Sprintf("runner: Handle(%q) while Run is running", kind))
	}
	if _, dup := r.handlers[kind]; dup {
		panic(fmt.Sprintf("runner: Handle(%q): kind already has a handler", kind))
	}
	r.handlers[kind] = h
}

// Worker returns the worker name the runner records on the jobs it claims.
func (r *Runner) Worker() string { return r.s.worker }

// Concurrency returns the most handlers the runner runs at once.
func (r *Runner) Concurrency() int { return r.s.concurrency }

// Kinds returns the kinds that have a handler, sorted.
func (r *Runner) Kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.handlers))
}

// Run claims and runs jobs until ctx ends, then shuts down gracefully: it
// stops claiming at once, lets running handlers go on for
// Options.ShutdownGrace, then cancels their ctx with cause ErrShutdown, and
// returns once every handler has returned and its outcome has been recorded.
// It returns nil after such a shutdown.
//
// While it runs, a runner whose store keeps a list of workers
// (jobstore.WorkerRegistry) is listed there: its worker name, host,
// process, kinds, concurrency and Options.Version. If it cannot be (its
// name is taken by another live worker, say), it logs a warning and runs
// unlisted.
//
// Errors from the store other than ErrClosed and ErrUntrusted are logged
// and retried after a short backoff. If the store is closed, Run cancels
// the running handlers at once, waits for them, and returns an error
// wrapping jobstore.ErrClosed. If the store refuses to hand out jobs
// because other users can write it, Run returns that error, wrapping
// jobstore.ErrUntrusted, before running anything.
// Run returns ErrNoHandlers if no handler is registered, ErrRunning if it is
// already running, and an error wrapping jobstore.ErrInvalidInput if the
// worker name or a queue of Options.Queues is invalid. A Runner may Run
// again after Run returns.
func (r *Runner) Run(ctx context.Context) error {
	for _, q := range r.s.queues {
		if err := jobstore.ValidateQueue(q); err != nil {
			return fmt.Errorf("runner: Options.Queues: %w", err)
		}
	}
	if err := jobstore.ValidateWorker(r.s.worker); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	handlers, err := r.start()
	if err != nil {
		return err
	}
	defer r.stop()

	kinds := slices.Sorted(maps.Keys(handlers))
	// Handlers run under workCtx: it keeps ctx's values but not its
	// cancellation, which is delayed by the grace period.
	workCtx, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	l := &loop{
		r:          r,
		handlers:   handlers,
		req:        jobstore.ClaimRequest{Worker: r.s.worker, Kinds: kinds, Queues: r.s.queues},
		slots:      make(chan struct{}, r.s.concurrency),
		completing: make(chan struct{}, 2*r.s.concurrency),
		detached:   context.WithoutCancel(workCtx),
		idle:       make(chan *jobstore.Job),
		stopped:    make(chan struct{}),
	}
	var sc scheduleStore
	if r.s.schedules {
		var ok bool
		if sc, ok = r.store.(scheduleStore); !ok {
			return fmt.Errorf("runner: Options.Schedules: this store keeps no schedules: %w", errors.ErrUnsupported)
		}
	}
	r.s.log.Info("runner started", "worker", r.s.worker, "kinds", kinds, "concurrency", r.s.concurrency)
	defer r.register(ctx, kinds)()
	if sc != nil {
		fireCtx, stopFiring := context.WithCancel(ctx)
		fired := make(chan struct{})
		go func() {
			defer close(fired)
			_ = r.fireSchedules(fireCtx, sc) // a closed store ends the claim loop too
		}()
		defer func() {
			stopFiring()
			<-fired
		}()
	}

	runErr := l.claimLoop(ctx, workCtx)

	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	switch {
	case runErr != nil:
		// The store is closed: no outcome can be recorded, so there is
		// nothing to wait for.
		stopWork(fmt.Errorf("%w: %w", ErrShutdown, runErr))
	case r.s.shutdownGrace < 0:
		stopWork(ErrShutdown)
	default:
		r.s.log.Info("runner stopping", "worker", r.s.worker, "grace", r.s.shutdownGrace)
		timer := time.NewTimer(r.s.shutdownGrace)
		select {
		case <-done:
		case <-timer.C:
			r.s.log.Warn("shutdown grace period over; canceling running handlers", "worker", r.s.worker)
			stopWork(ErrShutdown)
		}
		timer.Stop()
	}
	<-done
	if runErr != nil {
		r.s.log.Error("runner stopped", "worker", r.s.worker, "err", runErr)
	} else {
		r.s.log.Info("runner stopped", "worker", r.s.worker)
	}
	return runErr
}

func (r *Runner) start() (map[string]Handler, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return nil, ErrRunning
	}
	if len(r.handlers) == 0 {
		return nil, ErrNoHandlers
	}
	handlers := make(map[string]Handler, len(r.handlers))
	for kind, h := range r.handlers {
		w, err := wrap(kind, h, r.s.middleware)
		if err != nil {
			return nil, err
		}
		if r.s.metrics != nil {
			w = MetricsMiddleware(r.s.metrics)(w) // outermost
		}
		handlers[kind] = w
	}
	r.running = true
	return handlers, nil
}

func (r *Runner) stop() {
	r.mu.Lock()
	r.running = false
	r.mu.Unlock()
}

func (r *Runner) emit(e Event) {
	if r.s.metrics != nil {
		switch e.Type {
		case EventStoreError:
			r.s.metrics.ObserveStoreError()
		case EventTickFired:
			if sm, ok := r.s.metrics.(ScheduleMetrics); ok {
				sm.ObserveTick(e.Schedule, e.QueueWait)
			}
		case EventTicksSkipped:
			if sm, ok := r.s.metrics.(ScheduleMetrics); ok {
				sm.ObserveTicksSkipped(e.Schedule, e.Skipped)
			}
		}
	}
	if r.s.onEvent == nil {
		return
	}
	e.Worker = r.s.worker
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.s.onEvent(e)
}

// loop is the state of one call of Run.
type loop struct {
	r        *Runner
	handlers map[string]Handler
	req      jobstore.ClaimRequest
	// slots holds one token per running handler; its capacity is the
	// concurrency limit.
	slots chan struct{}
	// completing holds one token per attempt whose handler has returned
	// and whose outcome is being recorded; its capacity is twice the
	// concurrency limit. A handler's slot is given back once its attempt
	// holds one (handed), so that the next job starts while the outcome
	// is written: a store that groups the writes of concurrent Completes
	// (pgstore's batches, the file store's shared fsyncs) then writes more
	// of them at once, and no handler waits for another's commit.
	completing chan struct{}
	// idle hands a claimed job to a worker goroutine waiting for one;
	// stopped is closed when the claim loop ends, and ends those waits.
	idle     chan *jobstore.Job
	stopped  chan struct{}
	wg       sync.WaitGroup
	failures int // consecutive store errors in the claim loop
	// emptyWakes counts consecutive AwaitWork signals after which Claim
	// found nothing.
	emptyWakes int
	// backlog says that the last claim found a job for each of its slots.
	backlog bool
	// detached is workCtx without its cancellation, the parent of the
	// contexts under which outcomes are recorded and attempts released.
	detached context.Context
}

// claimGather is how long the claim loop waits before a claim while jobs
// are queued beyond its free slots (the last claim filled every slot it
// had): the slots that handlers free meanwhile are claimed for in the same
// call. A claim costs much the same for one job as for many (one
// statement, one scan of the queue), so under a backlog this trades at
// most this delay of a start for fewer, larger claims. An idle runner,
// or one whose last claim left slots empty, claims at once.
const claimGather = time.Millisecond

// A store may wake AwaitWork spuriously. After spinLimit wake-ups in a row
// that found nothing to claim, the runner pauses spinPause (at most the poll
// interval) before each Claim until a claim succeeds or a wait times out.
const (
	spinLimit = 64
	spinPause = 10 * time.Millisecond
)

// claimLoop claims and starts jobs until ctx ends (it returns nil) or the
// store is closed (it returns the error).
func (l *loop) claimLoop(ctx, workCtx context.Context) error {
	defer close(l.stopped)
	for {
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if ctx.Err() != nil {
			<-l.slots
			return nil
		}
		if l.backlog {
			// The last claim found a job for every slot it had: more are
			// queued. Let the handlers that end meanwhile free their slots
			// too, so that one claim takes the jobs of all of them.
			sleep(ctx, claimGather)
		}
		jobs, n, err := l.claim(ctx)
		if err == nil {
			l.backlog = n > 0 && len(jobs) == n && cap(l.slots) > 1
			for range n - len(jobs) {
				<-l.slots
			}
			l.failures, l.emptyWakes = 0, 0
			for i := range jobs {
				l.start(workCtx, &jobs[i])
			}
			if len(jobs) > 0 {
				// Let the workers just handed a job run before this
				// goroutine claims again: otherwise the next claim's
				// goroutines, and a store's flush it wakes, may take this
				// processor first, and an idle runner's one job starts
				// only when another processor wakes (TestHandlerStartsBeforeNextClaim).
				runtime.Gosched()
			}
			continue
		}
		l.backlog = false
		for range n {
			<-l.slots
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jobstore.ErrClosed), errors.Is(err, jobstore.ErrUntrusted):
			return fmt.Errorf("runner: claim: %w", err)
		case errors.Is(err, jobstore.ErrNoJob):
			l.failures = 0
			if l.emptyWakes >= spinLimit {
				// The store keeps signalling work that Claim does not
				// find; pace the loop instead of spinning.
				sleep(ctx, min(l.r.s.pollInterval, spinPause))
			}
			signaled, err := l.await(ctx, err)
			if err != nil {
				return err
			}
			if signaled {
				l.emptyWakes++
			} else {
				l.emptyWakes = 0
			}
		default:
			l.storeError(ctx, "claim", err)
		}
	}
}

// workerIdle is how long a worker goroutine that finished a job waits for
// the next before it ends.
const workerIdle = 10 * time.Second

// start runs job, which holds a slot, on an idle worker goroutine, or on a
// new one if none is idle. Worker goroutines are reused, so that a job
// does not pay for a new goroutine and for growing its stack again.
func (l *loop) start(workCtx context.Context, job *jobstore.Job) {
	select {
	case l.idle <- job:
	default:
		l.wg.Add(1)
		go l.worker(workCtx, job)
	}
}

// worker runs job and then the jobs that start hands it, until none
// comes for workerIdle or the claim loop has ended.
func (l *loop) worker(workCtx context.Context, job *jobstore.Job) {
	defer l.wg.Done()
	l.work(workCtx, job)
}

// work runs job, if not nil, and then the jobs that start hands it, as
// worker does.
func (l *loop) work(workCtx context.Context, job *jobstore.Job) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		if job != nil {
			l.execute(workCtx, job)
		}
		idle.Reset(workerIdle)
		select {
		case job = <-l.idle:
		case <-idle.C:
			return
		case <-l.stopped:
			return
		}
	}
}

// handed gives back the slot of an attempt whose handler has returned,
// once the attempt holds a completing token; the token goes back when its
// outcome is recorded. When twice as many outcomes are being recorded as
// handlers may run, a returning handler keeps its slot until one is done,
// so that writes that fall behind hold back the claims.
func (l *loop) handed() {
	l.completing <- struct{}{}
	<-l.slots
}

// claim claims jobs for the slot the caller took and for as many more
// free slots as it can take at once (up to jobstore.MaxClaimBatch), with
// one ClaimBatch if the store is a jobstore.BatchClaimer, else one Claim
// for the one slot. It returns the jobs and the number of slots it holds,
// of which the caller gives back those that got no job.
func (l *loop) claim(ctx context.Context) ([]jobstore.Job, int, error) {
	n := 1
	bc, batch := l.r.store.(jobstore.BatchClaimer)
more:
	for batch && n < jobstore.MaxClaimBatch {
		select {
		case l.slots <- struct{}{}:
			n++
		default:
			break more
		}
	}
	if n > 1 {
		jobs, err := bc.ClaimBatch(ctx, l.req, n)
		return jobs, n, err
	}
	job, err := l.r.store.Claim(ctx, l.req)
	if err != nil {
		return nil, n, err
	}
	return []jobstore.Job{job}, n, nil
}

// await blocks until the store signals work, the next delayed job is due,
// or the poll interval passes, and reports whether the store signalled. It
// returns an error only if the store is closed.
func (l *loop) await(ctx context.Context, noJob error) (signaled bool, err error) {
	wait := l.r.s.pollInterval
	// A NextRunAt in the past names a job this runner cannot claim (another
	// kind, or one just claimed elsewhere); waking for it would spin.
	nj, _ := errors.AsType[*jobstore.NoJobError](noJob)
	if nj != nil && !nj.NextRunAt.IsZero() {
		if d := time.Until(nj.NextRunAt); d > 0 && d < wait {
			wait = d
		}
	}
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// With several runners (or other claimers) on one store, only a
	// WorkAwaiter knows which wake-ups this runner has not seen.
	if wa, ok := l.r.store.(jobstore.WorkAwaiter); ok && nj != nil {
		err = wa.AwaitWorkSince(actx, nj)
	} else {
		err = l.r.store.AwaitWork(actx)
	}
	switch {
	case err == nil:
		return true, nil
	case actx.Err() != nil:
		return false, nil
	case errors.Is(err, jobstore.ErrClosed):
		return false, fmt.Errorf("runner: await work: %w", err)
	}
	l.storeError(ctx, "await work", err)
	return false, nil
}

// storeError logs a transient store error and sleeps for a backoff that
// grows with consecutive failures.
func (l *loop) storeError(ctx context.Context, op string, err error) {
	l.failures++
	l.r.s.log.Warn("store error; retrying", "op", op, "err", err, "failures", l.failures)
	l.r.emit(Event{Type: EventStoreError, Err: fmt.Errorf("runner: %s: %w", op, err)})
	sleep(ctx, retryDelay(l.failures))
}

// retryDelay is the pause after the nth consecutive failure of a store
// call: 10ms doubling up to 1s.
func retryDelay(n int) time.Duration {
	d := 10 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
