// Package storetest is the conformance suite for jobstore.Store
// implementations.
//
// Every store calls Run from its own tests, in the way that file systems
// call testing/fstest.TestFS:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) jobstore.Store {
//			return memstore.New(nil)
//		})
//	}
//
// Run runs one subtest per rule of the Store interface, each against a fresh
// store, so a failure names the rule that was broken
// ("TestConformance/Claim/Order"). The subtests cover submission and
// idempotency keys, validation, Get and List, claim order and kind filters,
// completion with retries, backoff and lease fencing, cancel, retry, Wait,
// WatchCancel, AwaitWork, Prune, Stats, Close, copy semantics, and races
// between many goroutines. The file docs/state-machine.md in the jobdir
// repository lists which subtest proves which rule.
//
// # Requirements on the store under test
//
// The factory must return an empty store with the default payload limit
// (jobstore.DefaultMaxPayload) and the default backoff (jobstore.Backoff),
// and should register its own cleanup with t.Cleanup; Run also closes every
// store when its subtest ends, so Close must be idempotent.
//
// The suite uses real time with short delays (tens to hundreds of
// milliseconds) and generous deadlines for anything that waits, so it stays
// reliable on a loaded machine; assertions about safety (who holds which job,
// what state a job ends in) are strict.
package storetest

// Where the cases are: the cases of each group of Run are in the file named
// for the group (claim.go: Claim, retry.go: Retry, awaitwork.go: AwaitWork),
// except for these groups, listed with their file (TestGroupFiles keeps
// this true):
//
//	SubmitBatch  batch.go
//	Validation   submit.go
//	Get          submit.go
//	Prune        lifecycle.go
//	Stats        lifecycle.go
//	Close        lifecycle.go
//	Copies       lifecycle.go
//	Concurrent   lifecycle.go
//	Retention    schedules.go
//	Batches      deps.go
