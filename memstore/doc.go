// Package memstore is an in-memory jobstore.Store: every behaviour of the
// store interface except durability and use by more than one process.
//
// It is right for tests, for examples, and for a single process that does not
// need its jobs to survive a restart. The conformance suite in
// jobstore/storetest specifies its behaviour, and memstore passes all of it.
//
// # Guarantees
//
// A Store is safe for concurrent use by goroutines. Every state change goes
// through the storekit.Apply* functions, so memstore follows exactly the
// rules that every other store follows. Jobs handed in and handed out are
// copies: mutating a Job's Payload or Result after Submit, or after a method
// returns it, does not change the store.
//
// Blocking methods (AwaitWork, Wait, WatchCancel) are driven by channels that
// state changes close, not by polling. A Store starts no goroutine of its own
// and no goroutine outlives the call that started it, so a Store can run
// inside a testing/synctest bubble (create it inside the bubble).
//
// # Caveats
//
// Jobs live only in process memory: they are lost when the process exits,
// and other processes cannot see them. Use filestore for either.
//
// Claim and List scan every job, so their cost grows linearly with the
// number of jobs held; Prune keeps that number bounded.
package memstore
