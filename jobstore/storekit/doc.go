// Package storekit is for writing a jobdir store: what every
// implementation of jobstore.Store needs and a user of a store does not.
//
// A store keeps records; the rules that change them are here, once, as
// pure functions, so that every store moves jobs by the same rules:
// ApplyClaim, ApplyOutcome, ApplyRelease, ApplyRecover, ApplyCancel and
// ApplyRetry compute a job's next record from its current one, and the
// store writes it while it holds the job exclusively. ClaimOrder is the
// order of claims, PageBuilder cuts List pages, WorkCount keeps the
// account of wake-ups that AwaitWork compares against, and the Validate
// functions check a store's inputs the way every store checks them.
//
// The conformance suite, jobstore/storetest, says whether a store built
// with them keeps the contract of jobstore.Store: run it from the store's
// tests. memstore is the smallest store that passes it, and the one to
// read first.
package storekit
