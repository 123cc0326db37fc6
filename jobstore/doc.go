// Package jobstore defines the jobdir domain: the Job record, its State machine,
// the Store interface that every job store implements, and the errors callers
// test with errors.Is.
//
// The package does no I/O. Implementations live in sibling packages named
// after what they depend on: memstore (process memory), pgstore (a
// PostgreSQL schema, for many machines) and filestore (a
// directory shared by several processes). Their common behaviour is specified
// once, by the conformance suite in jobstore/storetest, and the runner package
// executes jobs from any Store. What only a store's implementation needs
// (the state changes, the claim order, page building, the validation of
// a store's inputs) is in jobstore/storekit, so that this package holds
// what a user of a store calls.
//
// # The life of a job
//
// Submit creates a job in StateQueued. Claim hands the most urgent due job to
// one worker and moves it to StateRunning with its Attempt incremented; the
// pair (ID, Attempt) plus the worker name form the Lease that fences every
// later step of that attempt. Complete ends the attempt: success makes the job
// StateSucceeded; failure makes it StateQueued again with a backoff RunAt while
// attempts remain, and StateFailed once they are used up. Cancel makes a
// queued job StateCanceled at once and marks a running one CancelRequested,
// which its worker observes through WatchCancel. Retry puts a failed or
// canceled job back in the queue. The file docs/state-machine.md in the
// jobdir repository draws the diagram.
//
// # Typed payloads
//
// A job's payload is JSON. A Go type that names its kind (Args) is the
// typed form of it: SubmitArgs submits a value as a job's payload, NewSpec
// makes the Spec (for SubmitBatch), DecodeArgs decodes a payload back, and
// runner.Register runs the jobs of the kind with their payload decoded.
package jobstore
