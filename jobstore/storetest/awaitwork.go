package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var awaitWorkTests = []test{
	{"WakesOnSubmit", testAwaitWorkSubmit},
	{"WakesWhenDelayedJobDue", testAwaitWorkDelayed},
	{"WakesOnRequeue", testAwaitWorkRequeue},
	{"ContextDeadline", testAwaitWorkDeadline},
}

// awaitAndClaim runs the loop a worker runs: Claim, and AwaitWork while
// there is nothing to claim. It returns the claimed job.
func awaitAndClaim(ctx context.Context, s jobstore.Store, worker string) (jobstore.Job, error) {
	for {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, jobstore.ErrNoJob) {
			return j, err
		}
		if err := s.AwaitWork(ctx); err != nil {
			return jobstore.Job{}, err
		}
	}
}

func testAwaitWorkSubmit(t *testing.T, s jobstore.Store) {
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w"); return err })
	time.Sleep(settle)
	j := submitKind(t, s, "k")
	require.NoError(t, w.result(t), "AwaitWork did not wake on submit")
	require.Equal(t, j.ID, got.ID)
}

func testAwaitWorkDelayed(t *testing.T, s jobstore.Store) {
	runAt := time.Now().Add(150 * time.Millisecond)
	j := submit(t, s, jobstore.Spec{Kind: "k", RunAt: runAt})
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	got, err := awaitAndClaim(ctx, s, "w")
	require.NoError(t, err, "AwaitWork did not wake when the delayed job became due")
	require.Equal(t, j.ID, got.ID)
	require.False(t, time.Now().Before(runAt))
}

func testAwaitWorkRequeue(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w2"); return err })
	time.Sleep(settle)
	complete(t, s, c, jobstore.Outcome{Error: "again", RetryAfter: 100 * time.Millisecond})
	require.NoError(t, w.result(t), "AwaitWork did not wake when a failed job became due again")
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
}

func testAwaitWorkDeadline(t *testing.T, s jobstore.Store) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	w := start(func() error {
		for {
			// AwaitWork may return nil spuriously; it must end with ctx.
			if err := s.AwaitWork(ctx); err != nil {
				return err
			}
		}
	})
	require.ErrorIs(t, w.result(t), context.DeadlineExceeded)
}
