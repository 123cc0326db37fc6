package jobstore

import "context"

// WorkAwaiter is implemented by a Store whose wait for work can tell its
// callers apart. AwaitWork keeps one account of the wake-ups since a Claim
// found nothing, so of several goroutines that claim from one Store and
// wait, one may take the wake-up another needed; AwaitWorkSince answers
// for the caller whose Claim returned nj. runner.Runner uses it when the
// store has it. storetest.Run checks every store that implements it
// (AwaitWork/EachClaimerWakes).
type WorkAwaiter interface {
	// AwaitWorkSince is AwaitWork for the caller whose Claim (or
	// ClaimBatch) returned nj: it returns nil at once if a job may have
	// become claimable since that Claim began, whatever other callers'
	// calls of AwaitWork or AwaitWorkSince took, and otherwise blocks as
	// AwaitWork does. It may return nil spuriously.
	AwaitWorkSince(ctx context.Context, nj *NoJobError) error
}
