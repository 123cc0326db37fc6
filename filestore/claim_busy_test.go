package filestore

import (
	"errors"
	"sync"
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

	h, ok, err := tryLease(s, j.ID)
	require.NoError(t, err)
	require.True(t, ok)

	before := time.Now()
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	var nj *jobstore.NoJobError
	require.True(t, errors.As(err, &nj), "got %v", err)
	require.False(t, nj.NextRunAt.IsZero(), "a busy due job must not look like an empty queue")
	require.WithinDuration(t, before.Add(leaseRetry), nj.NextRunAt, 50*time.Millisecond)

	releaseLease(h)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, j.ID, c.ID)
}

// TestTryLeaseOneHolder: of many goroutines taking one lease lock at once,
// round after round, exactly one holds it, and the table names that one;
// a release lets the next round take it.
func TestTryLeaseOneHolder(t *testing.T) {
	s := openAt(t, t.TempDir(), &Options{NoSync: true})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	for round := range 50 {
		const n = 16
		got := make(chan *leaseHold, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				h, ok, err := tryLease(s, j.ID)
				if err == nil && ok {
					got <- h
				}
			})
		}
		wg.Wait()
		close(got)
		var holders []*leaseHold
		for h := range got {
			holders = append(holders, h)
		}
		require.Len(t, holders, 1, "round %d: holders of one lease", round)
		held, ok := heldLease(s, j.ID)
		require.True(t, ok)
		require.Same(t, holders[0], held, "the table names another holder")
		releaseLease(holders[0])
		_, ok = heldLease(s, j.ID)
		require.False(t, ok, "released, still in the table")
	}
}
