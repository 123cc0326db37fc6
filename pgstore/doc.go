// Package pgstore is a jobstore.Store kept in PostgreSQL, for deploys that
// outgrow one machine: any number of processes on any number of machines
// submit, claim, cancel and wait for jobs in one schema, with the same
// state machine and the same promises as filestore.
//
//	s, err := pgstore.OpenDSN(ctx, "postgres://app@db/app", nil)
//
// The store lives in one schema (Options.Schema, default "jobdir") that
// Open creates and upgrades by versioned migrations embedded in the
// package, under an advisory lock. Each job is one row of the jobs table;
// the columns that indexes and statements need are columns, and the other
// fields are a JSON document, so the state machine is the one in jobstore
// (each change reads the row, applies a storekit.Apply function and writes
// the row back if its version did not change meanwhile). The file
// docs/postgres.md in the jobdir repository describes the schema, the
// leases and what differs from filestore.
//
// Store.Logs keeps the output of exec jobs in the schema (joblog.Logs), so
// that every machine reads it while the job runs; Store.Import takes in
// jobs from another store as they are (jobstore.Importer), which "jobdir
// copy" uses to move a store from a directory to PostgreSQL and back.
//
// # Guarantees
//
//   - Of any number of goroutines and processes claiming at once, exactly
//     one gets each attempt of each job: a claim is one UPDATE of the job
//     that an index scan in claim order (priority, RunAt, ID) picks and
//     locks with FOR UPDATE SKIP LOCKED. The same statement binds the job
//     to the claimant's lease session only while that session lives (its
//     advisory lock is held, and its row is locked against a recovery), so
//     a claim never hands out a lease that is already lost, and no job is
//     left running under a session that no recovery will look at.
//   - Of any number of processes submitting one key at once, exactly one
//     creates the job (a unique index on the key); the others get it with
//     created=false. SubmitBatch inserts its jobs in one statement of one
//     transaction: all of them or none.
//   - A worker's claim is a lease that dies with its process: the claims
//     of a store belong to its lease session, a connection of its own that
//     holds a session-level advisory lock. When the worker's process dies,
//     its connection closes, the server releases the lock, and any live
//     store queues the jobs again (attempt counted) within about a second
//     (Options.RecoverInterval plus Options.LeaseGrace).
//   - A worker cut off without its connection closing (a lost node, a hung
//     process) loses its jobs once its session expires: it renews the
//     session every LeaseTTL/4 on the database's clock, and its jobs are
//     queued again LeaseTTL after the last renewal. A worker that cannot
//     renew, or whose lease connection closes, gives its leases up at once:
//     WatchCancel returns jobstore.ErrNotHeld (wrapping ErrLeaseLost), so
//     runner.Runner cancels the handler's ctx with runner.ErrLeaseLost.
//   - Every Complete is fenced by (worker, attempt): a stale worker never
//     overwrites the outcome of a newer attempt.
//   - Queue limits and rates (Store.SetQueueLimit, SetPartitionLimit,
//     SetQueueRate) hold for every process on every machine: a claim of a
//     limited queue's job takes the queue's transaction-level advisory
//     lock, then counts the queue's running jobs, its partitions' and its
//     recent starts in a statement whose snapshot sees every claim of the
//     queue committed before (limits.go). A job holds its places while it
//     is running in the database, so a dead worker's are freed with its
//     lease session. A claim that meets another claim at a queue's lock
//     takes other queues' jobs, or waits its turn for at most 100 ms. A
//     change of a setting waits for the claims in flight, so it holds
//     from the moment it returns. What a limit does not survive (a crash
//     of the server, workers of a release before limits, a claim cut off
//     between its two statements) is in docs/queues.md.
//   - Events, not polling: LISTEN/NOTIFY wakes AwaitWork on a submit or a
//     requeue, WatchCancel on a cancel or a recovery, Wait on the end of
//     a job, and a follower of a job's log (Logs.WatchLog, which
//     joblog.CopyLogs uses) on each chunk written to it, across processes
//     and machines. Blocked calls read the
//     database every Options.PollInterval only while the listener
//     connection is down; it reconnects.
//   - Claim, Get, List, Prune and the due time in Stats read indexes whose
//     size does not grow with the number of finished jobs (claims use an
//     index of queued jobs only); Prune deletes in transactions of 1,000.
//   - Stats' counts cost the same at a thousand jobs and at a million: they
//     are the sums of a small table of count deltas that statement-level
//     triggers on the jobs table append to in each writing transaction (so
//     every writer, by hand too, keeps them exact) and that the stores
//     compact every second. They are exact as of one instant.
//   - Submit, SubmitBatch, Complete, Cancel, Retry and Prune are durable
//     when they return, as the server's commits are (synchronous_commit).
//   - Dependencies (jobstore.Spec.After, AfterKeys, AfterSpecs, AfterAny)
//     and batches (Spec.Batch, AfterBatch) hold across processes: a job
//     that waits for others is StateWaiting, which no claim takes (the
//     claim indexes hold queued jobs only), and it is settled in the
//     transaction of the write that ends its last dependency, whichever
//     process makes it (Complete, Cancel, Release, a dead worker's
//     recovery, a cascade): queued, and announced on the work channel at
//     that commit, or canceled ("dependency <id> failed") if one failed.
//     It is promoted exactly once: the write locks the waiting dependents
//     FOR UPDATE, then reads their dependencies' states in a later
//     statement, so of two writes that end its last two dependencies at
//     once the second sees the first (TestDepsConcurrentEndsAcrossStores,
//     TestProcessBatchFanIn). A submit that names a job marks it depended
//     on and holds it FOR SHARE until it commits, so the job's end either
//     comes first and is seen, or waits and settles the new job
//     (TestDepsSubmitRacesEnd). A SubmitBatch's graph is one transaction.
//     A batch's row is locked FOR SHARE by its members' submits and FOR
//     UPDATE by a callback's, which reads the members after it has the
//     lock: the callback waits for every job of the batch, and a later
//     member's submit fails with jobstore.ErrBatchClosed. Prune and Delete
//     keep a finished job that a waiting job names. settle.go says how;
//     migration 0012 holds the columns (after, after_any, batch,
//     after_batch, depended) and the batches table.
//
// # Caveats
//
//   - A connection pooler in transaction mode (PgBouncer's
//     pool_mode=transaction) breaks session-level advisory locks and
//     LISTEN. The store detects it (see pooler.go), before it takes a lock
//     or listens: Claim fails with ErrSessionNotKept, and the listener logs
//     it and leaves waiting calls polling; Open refuses, with
//     ErrSessionNotKept, a pool whose cached prepared statements such a
//     pooler breaks (pgx's default; default_query_exec_mode=exec avoids
//     them). The store's own connections are made from the pool's
//     settings, so they go wherever the pool goes. Give the store a direct
//     connection, or a pooler in session mode. docs/postgres.md says what
//     is checked and which tests, through a real PgBouncer, prove it.
//   - A follower of a job's log (Logs.WatchLog) or a Wait marks the job's
//     row, so that the changes it waits for notify: a Claim that meets the
//     row at that instant skips it (FOR UPDATE SKIP LOCKED), answers
//     ErrNoJob with a NextRunAt 5 ms away, and AwaitWork returns then.
//   - Times are kept to the microsecond. Job times (RunAt, StartedAt, ...)
//     come from the clock of the process that made the change, as in
//     filestore, so the machines' clocks should agree (NTP); lease expiry
//     uses the database's clock only.
//   - A job may run more than once: if its worker dies mid-attempt, or
//     loses its lease session (a restart of the server, a network cut),
//     the job runs again elsewhere. Handlers must be idempotent.
//   - Each statement that writes jobs calls a trigger (about 15–25 µs of
//     server time): single submits are about a tenth slower than without
//     it; batches pay it once.
//   - Many jobs scheduled far in the future slow a Claim that finds
//     nothing due, which steps over them in the claim index.
//   - Dependencies cost nothing to jobs that no job names: their submits
//     and completions are the statements they were. A job that others
//     name ends in a transaction of a few statements more (Complete takes
//     its one-row path, not the shared batch statement), and the ends of
//     the dependencies of one waiting job take its row lock in turn: the
//     jobs of a batch of 10,000 with a callback end about 2 ms apart at
//     best, however many workers end them.
//   - A process of a release before dependencies that ends a job leaves
//     its dependents waiting; every store sweeps the waiting jobs when it
//     opens and every minute, and settles those whose dependencies ended
//     (TestSweepSettlesStrandedWaiting). A batch stays closed while it has
//     jobs, even once its callbacks are pruned.
package pgstore
