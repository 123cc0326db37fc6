package filestore

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestClaimBusyLeaseAsksAgainSoon: a due job whose lease someone else
// holds for a moment (another claimant, or a Complete or recovery putting
// it back in the queue) is skipped, and Claim asks to be called again
// within milliseconds rather than at the next poll, since releasing a flock
// makes no filesystem event. Without this, a job recovered from a dead
// worker waited a whole PollInterval for an idle worker to claim it.
func TestClaimBusyLeaseAsksAgainSoon(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, t.TempDir(), &Options{NoSync: true, PollInterval: time.Hour})
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)

	lp := s.leasePath(j.ID)
	h, ok, err := tryLease(s, lp)
	require.NoError(t, err)
	require.True(t, ok)

	before := time.Now()
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	var nj *jobstore.NoJobError
	require.True(t, errors.As(err, &nj), "got %v", err)
	require.False(t, nj.NextRunAt.IsZero(), "a busy due job must not look like an empty queue")
	require.WithinDuration(t, before.Add(leaseRetry), nj.NextRunAt, 50*time.Millisecond)

	releaseLease(lp, h)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, j.ID, c.ID)
}
