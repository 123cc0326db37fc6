// Package runner executes jobs from any jobstore.Worker (every
// jobstore.Store is one): it claims due jobs of the kinds it has handlers
// for, runs each handler in its own goroutine under a concurrency limit, and
// records every attempt's outcome with Worker.Complete.
//
//	r := runner.New(store, &runner.Options{Concurrency: 8})
//	r.Handle("email", runner.HandlerFunc(sendEmail))
//	err := r.Run(ctx) // until ctx ends; then a graceful shutdown
//
// Typed handlers take the payload decoded: Register runs the jobs of the
// kind a jobstore.Args type names with a value of that type (a payload
// that does not decode fails the job at once), and jobstore.SubmitArgs
// submits one:
//
//	type Welcome struct{ To string }
//	func (Welcome) Kind() string { return "email.welcome" }
//
//	runner.Register(r, func(ctx context.Context, job jobstore.Job, w Welcome) error { return send(ctx, w.To) })
//	jobstore.SubmitArgs(ctx, store, Welcome{To: "ada@example.com"}, jobstore.Spec{Key: "welcome-ada"})
//
// Options.Middleware wraps every attempt's handler, whatever its kind, for
// logging, metrics, tracing or checks (see Middleware).
//
// With Options.Schedules, the runner also fires the ticks of the store's
// schedules (jobstore.Scheduler) while it runs: each tick's job is
// submitted with the tick's key, so that however many runners, in however
// many processes, fire a tick, it is one job (TestSchedulesFireEachTickOnce).
// FireSchedules does the same for a process that runs no jobs.
//
// The runner claims as soon as a job is due: it calls Claim until the store
// has nothing for it, then blocks in Worker.AwaitWork, which a store returns
// from when work arrives. It never waits longer than Options.PollInterval or
// past the RunAt of the next delayed job the store reports, so a store that
// cannot signal is polled. With a store that is a jobstore.BatchClaimer
// (pgstore, filestore, memstore), it claims for all its free slots at once, in one ClaimBatch
// of at most that many jobs, rather than one Claim per slot
// (TestBatchClaimsFillFreeSlots). While jobs are queued beyond its free
// slots (its last claim found a job for each), it waits a millisecond
// before it claims, so that the slots that handlers free meanwhile are
// claimed for together (TestClaimGathersFreedSlotsUnderBacklog); an idle
// runner claims at once (TestNoClaimGatherWhenSlotsWereLeftEmpty). The
// workers handed the jobs of a claim get the processor before the runner
// claims again, so that an idle runner's one job does not wait behind its
// next claim (TestHandlerStartsBeforeNextClaim).
//
// A handler's slot is free again as soon as the handler returns: its
// outcome is recorded while the next job runs, so that no handler waits
// for another's write, and a store that groups concurrent Completes into
// one write (pgstore's batched statement, the file store's shared flush)
// gets larger groups. At most twice Options.Concurrency outcomes are
// recorded at once; past that, a handler that returned keeps its slot
// until one is (TestSlotFreeWhileOutcomeIsRecorded). Events and after-attempt hooks of
// an attempt still come once its outcome is recorded or dropped.
//
// # Guarantees
//
// What a handler can rely on:
//
//   - It is called only for jobs of the kind it was registered for, and at
//     most Options.Concurrency handlers of one Runner run at once.
//   - Its ctx ends when Cancel is requested for the job (context.Cause is
//     ErrCanceled), when the store says this worker no longer holds the job
//     (ErrLeaseLost), when the attempt's timeout passes (job.Timeout, else
//     Options.JobTimeout; ErrTimeout), and when the runner shuts down and
//     Options.ShutdownGrace has passed (ErrShutdown). Only then.
//   - What it returns is recorded: nil error makes the job succeeded with the
//     result; an error fails the attempt, and the store queues the job again
//     with backoff while attempts remain. Permanent and RetryAfter change
//     that. A panic fails the attempt with the panic value and the stack in
//     the job's LastError, and the runner goes on; so does a runtime.Goexit
//     (as testing's FailNow calls), with an error that says so: the handler
//     runs on its worker's goroutine, which the Goexit ends, and another
//     records the attempt and takes its place (TestGoexitFailsAttempt,
//     TestGoexitWorkerIsReplaced).
//   - A typed handler (Register) is called only with a payload that decoded
//     into its type: one that does not fails the job at once (Permanent),
//     with a LastError that names the type (TestRegister).
//   - Every attempt goes through Options.Middleware, the first outermost,
//     and what the outermost returns is the outcome (TestMiddlewareOrder).
//   - The outcome is recorded even if the handler returns during shutdown:
//     Complete runs under its own context bounded by Options.CompleteTimeout,
//     not under Run's. If the lease was lost in the meantime (another attempt
//     started), the store refuses the outcome and the runner drops it. If
//     Complete keeps failing (a full disk) until CompleteTimeout, the runner
//     drops the outcome, logs it, and gives the attempt back with
//     jobstore.Worker.Release: the job is retried, or fails if that was its
//     last attempt, exactly as if the worker had died, and never stays
//     running while the worker lives.
//   - Run returns only after every handler it started has returned and its
//     outcome was recorded or dropped, and every goroutine it started has
//     exited.
//
// # Caveats
//
// A handler that ignores its ctx delays shutdown: Run waits for it to
// return, however long that takes, because abandoning it would leave a job
// running with nobody to record its outcome. Handlers should return soon
// after ctx ends.
//
// Delivery is at least once. A job runs again if its worker died during an
// attempt (the store recovers it), if the runner was shut down while the
// handler was still running (the interrupted attempt is requeued at once), or
// if a handler failed with attempts left. Handlers should be idempotent, for
// example by keying their side effects on the job ID.
//
// A handler that ignores a cancel and returns success makes the job
// succeeded, not canceled: the work was done.
//
// An attempt cut short by the runner's own shutdown (its ctx ended with
// ErrShutdown and it returned an error that is not Permanent) is recorded
// with jobstore.Outcome.Interrupted: the job is due again at once and the
// attempt does not count, so a routine restart never fails a job. An
// attempt that fails on its own during the grace period, times out, or
// whose worker dies still counts.
package runner
