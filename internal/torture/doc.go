// Package torture attacks a multi-process job store and checks, from records
// kept outside the store, that it kept its promises.
//
// It has two parts.
//
// Run is the torture run: it starts worker, submitter, canceller and waiter
// processes (re-executions of the current binary, see [IsChild] and
// [ChildMain]) on one store directory, SIGKILLs and restarts them at random
// moments, stops a worker or submitter with SIGSTOP for 1-5s now and then
// before continuing it (SIGCONT), runs the store of some processes on a
// failing disk (Config.FaultRate: EIO and ENOSPC on a share of their file
// operations, which they retry), then stops the chaos, lets the survivors
// drain the queue, and checks the store against what the processes
// recorded: every submitted ID exists and is terminal; one job per
// idempotency key; attempts of one job never overlap in time; a succeeded
// or canceled-while-queued job never starts again; every re-run follows the
// death of the worker that ran the previous attempt; no process of an exec
// job's attempt outlives it (tree jobs, run by the runner workers through
// execjob, start programs that fork, call setsid and double-fork, and each
// such process holds a lock that the next attempt and the final check
// test); no job is seen running long after its worker died or after its
// live, unstopped worker ended the attempt (the driver samples the running
// jobs every second: no live process holds such a job's lease); every Wait
// of the wait storm (Config.Waiters) returns the job ended; the store
// reopens, and once it has made the repairs of what the kills left
// (filestore's Repair) its consistency check finds nothing. The [Report]
// holds the figures and the violations. The children time their store
// operations (on CLOCK_MONOTONIC), and the Report gives the p99 and the
// longest duration of the operations of processes that were not stopped
// while another was: a stopped process should delay only its own jobs.
// A slow one is counted as a stall, and is a violation past Config.MaxStall
// (the file store's CI run, TestTortureShort, sets it; make torture too).
//
// RunLinearizability is the linearizability check: several clients
// (goroutines of several processes) run random
// Submit, Claim, Complete, Cancel, Retry and Get operations against one
// store and record each call and return on CLOCK_MONOTONIC, which all
// processes on one machine share; the history is then checked with
// github.com/anishathalye/porcupine against linModel, a sequential model of
// the job state machine partitioned by job.
//
// # Guarantees
//
// A Report with no violations means that, for this run, each property above
// held for every job the run created. Attempt start and end records are
// marker files that a worker publishes with link(2), which never replaces
// an existing name, before the handler runs and after it returns (before
// Complete), so they survive the worker's death and a second start of one
// attempt cannot go unnoticed; submit and cancel records are appended and
// fsynced before the submitter proceeds. Some workers run runner.Runner and
// the others a minimal claim loop, so that both the store alone and the
// production worker stack are attacked. FileBackend wires in filestore.
// PGBackend wires in pgstore: each process has a pool of its own, the chaos
// also cuts every connection of a worker process (pg_terminate_backend), and
// the long form may restart the server; an attempt may then lose its lease
// or its outcome, which the checks allow only for an attempt whose worker's
// connections were cut (or the server restarted) between its claim (the
// start marker records when that was) and the loss, and the re-run must
// still start after the lost attempt ended, unless the lost attempt's
// worker was stopped (SIGSTOP) between the cut and the re-run's start: it
// could not stop its handler before it was continued, and its outcome must
// have been refused (counted as "stopped through a cut"). A cut returns once the cut
// connections are gone, and each child's output keeps pgstore's warnings. Errors that are not
// jobstore errors are retried by the children there (Backend.Transient).
//
// # Caveats
//
// The latency figures leave out the runner workers (wrapping their store
// would hide its optional interfaces from runner.Runner) and the
// operations a SIGKILL cut off before they were written down (each child
// writes its timings every 200ms). A worker stopped with SIGSTOP is hung
// but alive: it keeps the flock that holds its attempt, so the store does
// not consider it dead and its job is not run elsewhere until it is
// continued. A run therefore checks that a paused worker's job was not
// re-run while it was paused, not that it was rescued (with pgstore,
// pauses stay well under the lease TTL, so that holds there too). The
// live-holder check samples once a second, so it misses a job stranded for
// less than that, and it cannot tell a stranded job from one whose worker
// is slow to record an ended attempt's outcome for longer than
// Config.HolderBound. Injected faults reach only the file operations that
// change the store (reads never fail), and only in the processes that
// Config.FaultRate names. A torture run proves properties of the
// interleavings it happened to produce, not of all interleavings; run it
// long and often. The linearizability check drops Claim calls that found
// no job (they name no job to partition by), so it does not check that "no
// job" was true, and it does not check List or Stats. The package needs
// Linux or another Unix with CLOCK_MONOTONIC, flock and signals.
package torture
