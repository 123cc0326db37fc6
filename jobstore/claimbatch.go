package jobstore

import (
	"context"
)

// MaxClaimBatch is the most jobs one ClaimBatch takes.
const MaxClaimBatch = 100

// BatchClaimer is implemented by stores that can claim several jobs in one
// call at less cost than a Claim each: runner.Runner uses it to fill
// several free slots at once. storetest.Run checks every store that
// implements it.
type BatchClaimer interface {
	// ClaimBatch claims up to max due queued jobs that req accepts, as
	// that many calls of Claim would, and returns them in claim order
	// (highest Priority first, then earliest RunAt, then oldest ID). Each
	// attempt is handed to exactly one caller, whether it claims with
	// Claim or ClaimBatch. It returns an error wrapping ErrNoJob (possibly
	// a *NoJobError) when no job is due, and one wrapping ErrInvalidInput
	// when max is not between 1 and MaxClaimBatch.
	ClaimBatch(ctx context.Context, req ClaimRequest, max int) ([]Job, error)
}
