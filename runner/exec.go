package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// attemptRun is one attempt the worker goroutine runs: what execute set
// up before the handler, for finish after it.
type attemptRun struct {
	workCtx context.Context
	jp      *jobstore.Job
	lease   jobstore.Lease
	log     *slog.Logger
	after   *afterHooks
	// ctx is the handler's; cancel and stop (nil without a timeout) end
	// it, stopWatch and watchDone the watch of its cancel request.
	ctx       context.Context
	cancel    context.CancelCauseFunc
	stop      context.CancelFunc
	stopWatch context.CancelFunc
	watchDone chan struct{}
	began     time.Time
}

// execute runs one claimed attempt of *jp and records its outcome. jp
// points into the claim's slice of jobs, so that the attempt shares it
// rather than a copy of its own. workCtx is the parent of the handler's
// ctx; it ends after the shutdown grace. The handler runs on the calling
// goroutine; if it calls runtime.Goexit, that goroutine ends, and another
// records the outcome and goes on as a worker in its place (callHandler).
func (l *loop) execute(workCtx context.Context, jp *jobstore.Job) {
	a := l.begin(workCtx, jp)
	var result json.RawMessage
	var herr error
	if h := l.handlers[jp.Kind]; h != nil {
		result, herr = l.callHandler(a, h)
	} else {
		// Only a store that ignores ClaimRequest.Kinds gets here; another
		// worker may have the handler, so this is not permanent.
		herr = fmt.Errorf("runner: worker %s has no handler for kind %q", a.lease.Worker, jp.Kind)
	}
	l.finish(a, result, herr)
}

// begin sets up the attempt of *jp: its logger, its ctx, the watch of its
// cancel request.
func (l *loop) begin(workCtx context.Context, jp *jobstore.Job) *attemptRun {
	r := l.r
	a := &attemptRun{workCtx: workCtx, jp: jp, lease: jp.Lease()}
	// The attempt's logger carries the job's attributes; it is made only
	// for a handler that takes records, and records of a level it drops
	// are not built (with the default logger, none is: nothing per job).
	a.log = r.s.log
	if a.log.Enabled(workCtx, slog.LevelError) {
		a.log = a.log.With("job", jp.ID, "kind", jp.Kind, "attempt", jp.Attempt, "worker", a.lease.Worker)
	}
	wait := max(jp.StartedAt.Sub(jp.RunAt), 0)
	if a.log.Enabled(workCtx, slog.LevelDebug) {
		a.log.Debug("job claimed", "queue_wait", wait)
	}
	r.emit(Event{Type: EventClaimed, Job: *jp, QueueWait: wait})

	ctx, at := withAttempt(workCtx, r.store, a.lease)
	a.after = &at.after
	a.ctx, a.cancel = context.WithCancelCause(ctx)
	timeout := jp.Timeout
	if timeout <= 0 {
		timeout = r.s.jobTimeout
	}
	if timeout > 0 {
		a.ctx, a.stop = context.WithTimeoutCause(a.ctx, timeout, fmt.Errorf("%w after %s", ErrTimeout, timeout))
	}

	var watchCtx context.Context
	watchCtx, a.stopWatch = context.WithCancel(a.ctx)
	a.watchDone = make(chan struct{})
	go func() {
		defer close(a.watchDone)
		l.watch(watchCtx, a.lease, a.cancel, a.log)
	}()
	a.began = time.Now()
	return a
}

// callHandler runs h for a on the calling goroutine (a goroutine of its
// own for each attempt would cost a goroutine's start and its stack's
// growth per job) and returns what it returned; a panic becomes a
// *PanicError. A runtime.Goexit in h cannot be stopped: this goroutine
// ends once its deferred calls have run, so the last of them starts
// another, which finishes the attempt with errGoexit and goes on as a
// worker.
func (l *loop) callHandler(a *attemptRun, h Handler) (result json.RawMessage, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			result, err = nil, &PanicError{Value: v, Stack: debug.Stack()}
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.finish(a, nil, errGoexit)
			l.work(a.workCtx, nil)
		}()
	}()
	result, err = h.Work(a.ctx, *a.jp)
	returned = true
	return result, err
}

// finish ends the attempt a, whose handler returned result and herr: it
// gives back the attempt's slot and records the outcome.
func (l *loop) finish(a *attemptRun, result json.RawMessage, herr error) {
	r, job, lease, log, after := l.r, *a.jp, a.lease, a.log, a.after
	ran := time.Since(a.began)
	// Why ctx ended, if it had by the time the handler returned; read now,
	// before a timeout that fires later can be mistaken for the reason.
	cause := context.Cause(a.ctx)
	a.stopWatch()
	<-a.watchDone
	a.cancel(nil)
	if a.stop != nil {
		a.stop()
	}
	l.handed()
	defer func() { <-l.completing }()

	if p, ok := errors.AsType[*PanicError](herr); ok {
		log.Error("handler panicked", "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
		r.emit(Event{Type: EventPanicked, Job: job, Err: herr})
	}
	o := outcome(cause, result, herr)

	cctx, ccancel := context.WithTimeout(l.detached, r.s.completeTimeout)
	defer ccancel()
	done, err := l.complete(cctx, lease, &o, log)
	if err != nil {
		// The event comes first: once released, the job may run again
		// and finish before this attempt's drop would be reported.
		if errors.Is(err, jobstore.ErrNotHeld) {
			log.Warn("outcome dropped: lease lost", "err", err, "outcome_error", o.Error)
			after.run(AttemptEnd{Job: job, Outcome: o, RunDuration: ran, Err: err})
			r.emit(Event{Type: EventDropped, Job: job, RunDuration: ran, Outcome: o, Err: err})
			return
		}
		log.Error("outcome dropped: complete failed", "err", err, "outcome_error", o.Error)
		after.run(AttemptEnd{Job: job, Outcome: o, RunDuration: ran, Err: err})
		r.emit(Event{Type: EventDropped, Job: job, RunDuration: ran, Outcome: o, Err: err})
		l.release(lease, log)
		return
	}
	switch {
	case done.State == jobstore.StateSucceeded:
		if log.Enabled(a.workCtx, slog.LevelInfo) {
			log.Info("job succeeded", "run", ran)
		}
	case done.State == jobstore.StateQueued:
		log.Warn("attempt failed; will retry", "run", ran, "err", o.Error, "run_at", done.RunAt)
	default:
		log.Warn("job ended", "state", done.State, "run", ran, "err", o.Error)
	}
	after.run(AttemptEnd{Job: done, Outcome: o, RunDuration: ran, Recorded: true, Err: herr})
	r.emit(Event{Type: EventFinished, Job: done, RunDuration: ran, Outcome: o, Err: herr})
}

// Attempt runs h on job as Run runs one attempt, without a store, and
// returns the outcome Run would record: the result of a nil error; a
// failure with the error's message, Permanent and RetryAfter as the error
// says; a panic or runtime.Goexit in h as a failure with its value and
// stack. If ctx had ended when h returned, the outcome says why as Run's
// does (context.Cause: ErrTimeout marks it timed out, ErrShutdown
// interrupted). Options.Middleware is not applied: wrap h first to test it
// too. It is what package runnertest builds on.
func Attempt(ctx context.Context, h Handler, job jobstore.Job) jobstore.Outcome {
	result, herr := call(ctx, h, &job)
	var cause error
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	return outcome(cause, result, herr)
}

// call runs h in its own goroutine so that a panic or runtime.Goexit in
// the handler becomes an error instead of ending the runner's goroutine.
func call(ctx context.Context, h Handler, job *jobstore.Job) (json.RawMessage, error) {
	c := &handlerCall{err: errGoexit} // kept only if Work neither returns nor panics
	c.done.Add(1)
	go c.run(ctx, h, job)
	c.done.Wait()
	return c.result, c.err
}

// handlerCall is one call of a handler, in a goroutine of its own: what
// it returned, and done, which it leaves when it has.
type handlerCall struct {
	result json.RawMessage
	err    error
	done   sync.WaitGroup
}

func (c *handlerCall) run(ctx context.Context, h Handler, job *jobstore.Job) {
	defer c.done.Done()
	defer func() {
		if v := recover(); v != nil {
			c.result, c.err = nil, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	c.result, c.err = h.Work(ctx, *job)
}

// outcome turns what the handler returned into the outcome to record.
// cause is why the handler's ctx had ended when it returned, or nil.
func outcome(cause error, result json.RawMessage, herr error) jobstore.Outcome {
	if herr == nil {
		return jobstore.Succeeded(result)
	}
	o := jobstore.Failed(herr)
	o.Permanent = IsPermanent(herr)
	if ra, ok := errors.AsType[*retryAfterError](herr); ok && ra.d > 0 {
		o.RetryAfter = ra.d
	}
	if cause != nil {
		// Say why ctx ended when the handler's error does not:
		// "context canceled" alone does not tell cancel from timeout.
		if !errors.Is(herr, cause) {
			o.Error = jobstore.TruncateError(o.Error + " (" + cause.Error() + ")")
		}
		o.TimedOut = errors.Is(cause, ErrTimeout)
		// An attempt cut short by this runner's shutdown is not the job's
		// fault: it is given back, due again at once for another worker,
		// and does not count. A permanent error is the handler's verdict
		// on the job, whatever stopped it.
		o.Interrupted = errors.Is(cause, ErrShutdown) && !o.Permanent
	}
	return o
}

// watch cancels the handler's ctx when Cancel is requested for the job or
// the lease is lost, until ctx ends.
func (l *loop) watch(ctx context.Context, lease jobstore.Lease, cancel context.CancelCauseFunc, log *slog.Logger) {
	for failures := 1; ; failures++ {
		err := l.r.store.WatchCancel(ctx, lease)
		switch {
		case err == nil:
			log.Info("cancel requested; canceling handler")
			cancel(ErrCanceled)
			return
		case ctx.Err() != nil:
			return
		case errors.Is(err, jobstore.ErrNotHeld), errors.Is(err, jobstore.ErrNotFound):
			log.Warn("lease lost; canceling handler", "err", err)
			cancel(fmt.Errorf("%w: %w", ErrLeaseLost, err))
			return
		case errors.Is(err, jobstore.ErrClosed):
			// The claim loop sees it too and shuts the runner down.
			return
		}
		log.Warn("watch cancel failed; retrying", "err", err, "failures", failures)
		l.r.emit(Event{Type: EventStoreError, Err: fmt.Errorf("runner: watch cancel %s: %w", lease.ID, err)})
		if !sleep(ctx, retryDelay(failures)) {
			return
		}
	}
}

// release gives back the attempt that lease holds after its outcome could
// not be recorded, so that the job does not stay running for as long as
// this worker lives: the store counts the attempt and queues the job again
// (or fails it) as it would a dead worker's. If the release cannot be
// recorded either, the store still lets the lease go, and recovery takes
// the job over in its usual time.
func (l *loop) release(lease jobstore.Lease, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(l.detached, l.r.s.completeTimeout)
	defer cancel()
	err := l.r.store.Release(ctx, lease)
	switch {
	case err == nil:
		log.Warn("gave the job back to the store: it runs again, or fails if that was its last attempt, as if this worker had died")
	case errors.Is(err, jobstore.ErrNotHeld), errors.Is(err, jobstore.ErrNotFound):
		log.Warn("could not give the job back: this worker no longer holds it", "err", err)
	case errors.Is(err, jobstore.ErrClosed):
		log.Warn("could not give the job back: the store is closed, which gives up its jobs", "err", err)
	default:
		log.Error("could not give the job back; the store let its lease go, so recovery will take the job over", "err", err)
		l.r.emit(Event{Type: EventStoreError, Job: jobstore.Job{ID: lease.ID}, Err: fmt.Errorf("runner: release %s: %w", lease.ID, err)})
	}
}

// complete records o for lease, retrying transient errors until ctx ends.
// If the store rejects a successful result as invalid, it records a failure
// that says so instead, and updates o to match.
func (l *loop) complete(ctx context.Context, lease jobstore.Lease, o *jobstore.Outcome, log *slog.Logger) (jobstore.Job, error) {
	for failures := 1; ; failures++ {
		job, err := l.r.store.Complete(ctx, lease, *o)
		switch {
		case err == nil:
			return job, nil
		case errors.Is(err, jobstore.ErrInvalidInput) && o.Error == "":
			log.Warn("store rejected the result; recording a failure", "err", err)
			*o = jobstore.Outcome{Error: "runner: handler result rejected: " + err.Error()}
			continue
		case errors.Is(err, jobstore.ErrNotHeld), errors.Is(err, jobstore.ErrClosed),
			errors.Is(err, jobstore.ErrNotFound), errors.Is(err, jobstore.ErrInvalidInput),
			ctx.Err() != nil:
			// Retrying cannot help.
			return job, err
		}
		log.Warn("complete failed; retrying", "err", err, "failures", failures)
		l.r.emit(Event{Type: EventStoreError, Err: fmt.Errorf("runner: complete %s: %w", lease.ID, err)})
		if !sleep(ctx, retryDelay(failures)) {
			return job, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
	}
}
