// Package filestore is a jobstore.Store kept in a directory that several
// processes on one machine share: a CLI submitting jobs, workers claiming
// them, a server answering status queries, all opening the same directory
// with no server to coordinate them.
//
// Each job is one JSON record file in the directory of its state group:
// queued/, claimed/ (running) or done/ (succeeded, failed, canceled). A
// claim is rename(2) from queued/ into claimed/; an idempotency key is a
// file in keys/ published with link(2); each job's changes are guarded by
// its record lock and a running job by its lease: on Linux a byte of
// locks/records.lock and one of locks/leases.lock (open file description
// locks), elsewhere a lock file of its own for each. SubmitBatch makes many jobs durable with a bounded
// number of flushes. In the jobdir repository, docs/format.md describes the
// layout and, for every operation, the order of its locks, writes, renames
// and fsyncs; docs/claim-semantics.md explains why claiming is safe.
//
// # Guarantees
//
//   - Every read goes to disk, and takes no lock: a record is replaced by
//     rename, so a read sees a whole one, as it was at some moment during
//     the call. Every change holds the job's record lock (a flock of its own
//     file) exclusively. Nothing is served from memory.
//   - A process stopped (SIGSTOP) or hung in the middle of an operation
//     delays only changes of the jobs it was changing (until their ctx
//     ends); reads, claims, submits and changes of every other job go on.
//   - Of any number of goroutines and processes claiming at once, exactly
//     one gets each attempt of each job.
//   - Of any number of processes submitting one key at once, exactly one
//     creates the job; the others get it with created=false.
//   - Any number of processes may Open a directory with no store at once
//     (missing, or an empty one such as a volume's mount point): one
//     creates the store, atomically (FORMAT last, under a creation lock)
//     and durably (the parent of every new directory fsynced) before Open
//     returns, and the others open it (docs/format.md, "Creating a
//     store").
//   - A worker's claim is a lease that dies with its process: the claimant
//     holds the job's lease lock (flock) for the whole attempt, the kernel
//     releases it when the process dies, and any live Store then queues the
//     job again (attempt counted) within about a second
//     (Options.RecoverInterval), or at the next Open; on Linux a Store
//     that claims sees the end of another process's Store as it happens
//     and queues its jobs again at once. LeaseFile hands a
//     copy of the lease to a child process, which holds the job past its
//     worker's death until it exits (execjob's supervisor does so).
//   - Cancel and Wait work across processes: a cancel reaches the running
//     worker's WatchCancel, and Wait returns when another process finishes
//     the job, both driven by inotify events within milliseconds, with a
//     poll (Options.PollInterval) as the fallback. All the Waits of a Store
//     on one job share one reader of its record, so thousands of waiters
//     cost one read per change, and readers never keep a change waiting
//     for more than the reads under way.
//   - A worker that cannot record an outcome gives the attempt back
//     (Release); its lease is let go even if that cannot be written
//     either, so the job never stays running while the worker lives.
//   - Submit, SubmitBatch, Complete, Cancel, Retry and Prune are durable when they
//     return (files and directories fsynced) unless Options.NoSync; a
//     syncfs(2) stands in for fsyncs only where it reaches the disk
//     (Store.Durability). A claim is made durable in the background a
//     moment after it returns (about one directory fsync), so an attempt
//     cut short by a power cut counts against MaxAttempts.
//   - A process killed at any instant leaves a store that opens cleanly,
//     has lost no job whose Submit returned, holds at most one job per key
//     and has no job stuck running.
//   - Corrupt, truncated or foreign files are reported with their path
//     (wrapping jobstore.ErrCorrupt), skipped by List (Page.Errors), and
//     never crash the process; symbolic links are never followed. Records
//     a power cut left empty or cut short never hold a key: Open, Submit
//     and Fsck's repair set them aside in quarantine/
//     (ProblemTornRecord).
//   - No hot path (Submit, Claim, Get, Complete, Cancel) lists a directory
//     whose size grows with history, and memory never holds payloads or
//     results.
//   - Claim hands out no job of a store that users other than this
//     process's own (and root) can write, since they would choose the
//     programs its workers run: it returns jobstore.ErrUntrusted, checked
//     at Open like ssh's StrictModes (see Store.CheckTrust). Reading,
//     submitting and canceling work on any store the process can open.
//
// # Caveats
//
//   - One machine only. flock, rename and inotify do not hold across NFS,
//     SMB/CIFS, FUSE or Ceph clients; Open refuses those filesystems unless
//     Options.AllowUnsafeFilesystem. Kubernetes pods may share a store only
//     on one node (a ReadWriteOnce volume, never ReadWriteMany).
//   - All of the directory must be one mount: renames across mounts fail.
//   - A hung but live worker keeps its job forever: flock has no expiry,
//     so a SIGSTOPped or deadlocked process is not a dead one. Bound
//     attempts with Job.Timeout in the runner.
//   - A job may run more than once: if its worker dies mid-attempt, the job
//     runs again elsewhere. Handlers must be idempotent.
//   - Only the process that claimed a job can complete it (it holds the
//     lease lock); Close releases the leases of the jobs a Store still
//     holds, which are then recovered like a dead worker's.
//   - Prune and Fsck list done/, whose size grows with history. List and
//     Stats read the state directories' names from an index each Store
//     keeps in memory by filesystem events (about 100 bytes a job; see
//     docs/format.md), and list the directories only to build it, at their
//     first call or after events were lost; the first Stats reads every
//     record once, later ones only those that changed. Prune steadily to
//     keep done/ small.
package filestore

// Where things are, for a reader of this package's code (TestDocMapNamesEveryFile
// keeps it whole):
//
//	store.go        the Store type, writing a record (store), record-lock helpers
//	open.go         Open and its steps (creation, layout, FORMAT, sweep of tmp/), Close
//	options.go      Options, FormatVersion, Open's errors
//	submit.go       Submit and idempotency keys
//	batch.go        SubmitBatch
//	claim.go        Claim and ClaimBatch (cands.go: the claim candidate set; claimflush.go: making
//	                claims durable in the background)
//	complete.go     Complete
//	release.go      Release
//	update.go       Cancel and Retry
//	query.go        Get and List
//	stats.go        Stats (dirindex.go, kindindex.go, moves.go: shared with List)
//	wait.go         Wait and its shared readers
//	await.go        AwaitWork and WatchCancel
//	notify.go       waking the calls blocked in this process
//	watch.go        inotify, the candidate set's refresh, the maintenance loop
//	prune.go        Prune
//	recover.go      queuing again the jobs of dead workers
//	ends.go         seeing other Stores end, to recover their jobs at once
//	fsck.go         Fsck, Repair and the recovery at Open
//	import.go       Import
//	leasefile.go    LeaseFile
//	locks.go        record locks and leases (turn.go: their in-process queue)
//	rangelocks.go   record locks (and leases) as bytes of locks/records.lock (locks/leases.lock), where the system has them
//	record.go       the record file: paths, encoding, finding the current copy
//	                (readfile.go: reading a small file on a bare descriptor)
//	journal.go      the submission journal: journal/<n>.log, its entries, covers and replay
//	durability.go   fsync, shared syncfs or none: every flush goes through it
//	                (syncshare.go: the syncfs flushes shared between processes)
//	fsops.go        the seam every change of the directory goes through (dirpins.go:
//	                the store's directories held open, from which it makes them)
//	faults.go       Options.Faults on that seam
//	trust.go        CheckTrust (trust_unix.go: the permission checks)
//	migrate.go      upgrading the old single-process store (legacy.go: its records)
//	ping.go         Ping
//	workers.go      the registry of live workers (workers/)
//	queues.go       queue settings: pause, resume and limits (QUEUES)
//	schedules.go    schedules and their latest ticks (SCHEDULES)
//	deps.go         dependencies and batches: submitGraph, settling waiting jobs, dependents/, batches/
//	slots.go        the slots of a limited queue's running jobs (slots/)
//	rates.go        the starts of a rate-limited queue (slots/<queue>/starts)
//	probe.go        IsStore and OtherFiles
//	sys_linux.go    Linux: filesystem check, where syncfs(2) reaches the disk, syncfs
//	sys_unix.go     every Unix system: open flags, inode numbers, the shared files' open
//	sys_other.go    Unix systems other than Linux (macOS)
//	ends_linux.go   Linux: the inotify watch of tmp/ that sees other Stores end
//	ends_other.go   other Unix systems: no such watch
//	rangelocks_linux.go  Linux: those bytes, locked with open file description locks
//	rangelocks_other.go  other Unix systems: a lock file per job instead
//	leaselocks_linux.go  Linux: leases as bytes of locks/leases.lock
//	leaselocks_other.go  other Unix systems: a lease file per job instead
//	build_unsupported.go  the build error on systems that are not Unix
