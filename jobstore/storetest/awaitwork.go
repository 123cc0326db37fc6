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
	{"EachClaimerWakes", testAwaitWorkEachClaimer},
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

// testAwaitWorkEachClaimer: of two claimers of one store, for different
// kinds, that found nothing, each wakes for a submit made after its Claim
// began, though the other already woke and claimed again meanwhile: with
// AwaitWorkSince, for a store that is a jobstore.WorkAwaiter (skipped for
// others).
func testAwaitWorkEachClaimer(t *testing.T, s jobstore.Store) {
	wa, ok := s.(jobstore.WorkAwaiter)
	if !ok {
		t.Skip("not a jobstore.WorkAwaiter")
	}
	noJob := func(kind string) *jobstore.NoJobError {
		_, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w-" + kind, Kinds: []string{kind}})
		nj, ok := errors.AsType[*jobstore.NoJobError](err)
		require.True(t, ok, "Claim of a store that is a WorkAwaiter must return a *NoJobError when nothing is due, not %v", err)
		return nj
	}
	a, b := noJob("a"), noJob("b")
	j := submitKind(t, s, "b")

	// A wakes, finds nothing of its kind, and would wait again.
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	require.NoError(t, wa.AwaitWorkSince(ctx, a), "the first claimer did not wake")
	noJob("a")

	// B must still wake for the submit: a plain AwaitWork may not (A took
	// the store's one account of it).
	short, cancelShort := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancelShort()
	require.NoError(t, wa.AwaitWorkSince(short, b), "the second claimer slept through a submit made after its Claim")
	got, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w-b", Kinds: []string{"b"}})
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
}
