package memstore

import (
	"context"
	"fmt"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.BatchClaimer = (*Store)(nil)

// ClaimBatch claims up to max jobs as that many Claims would, and returns
// them in claim order; it lets the runner's batch claims be tested without
// a database.
func (s *Store) ClaimBatch(ctx context.Context, req jobstore.ClaimRequest, max int) ([]jobstore.Job, error) {
	if err := storekit.ValidateClaimBatch(max); err != nil {
		return nil, fmt.Errorf("memstore: claim batch: %w", err)
	}
	var jobs []jobstore.Job
	for len(jobs) < max {
		j, err := s.Claim(ctx, req)
		if err != nil {
			if len(jobs) > 0 {
				return jobs, nil // those claimed are the caller's
			}
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}
