package memstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
	"github.com/jobdir/jobdir/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) jobstore.Store {
		s := memstore.New(nil)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestOptions(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(&memstore.Options{
		MaxPayload: 10,
		Backoff:    func(attempt int) time.Duration { return time.Duration(attempt) * time.Hour },
	})
	defer s.Close()

	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`"123456789"`)})
	require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`"12345678"`)})
	require.NoError(t, err)

	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(json.RawMessage(`"123456789"`)))
	require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge, "the limit applies to results too")

	before := time.Now()
	f, err := s.Complete(ctx, c.Lease(), jobstore.Failed(nil))
	require.NoError(t, err)
	require.Equal(t, j.ID, f.ID)
	require.WithinRange(t, f.RunAt, before.Add(time.Hour), time.Now().Add(time.Hour), "the configured backoff is used")
}

func TestInvalidArguments(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(nil)
	defer s.Close()
	_, err := s.Prune(ctx, -time.Second)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	for _, l := range []jobstore.Lease{
		{ID: jobstore.NewID(time.Now()), Worker: "", Attempt: 1},
		{ID: jobstore.NewID(time.Now()), Worker: "w", Attempt: 0},
	} {
		_, err = s.Complete(ctx, l, jobstore.Succeeded(nil))
		require.ErrorIs(t, err, jobstore.ErrInvalidInput)
		require.ErrorIs(t, s.WatchCancel(ctx, l), jobstore.ErrInvalidInput)
	}
	l := jobstore.Lease{ID: jobstore.NewID(time.Now()), Worker: "w", Attempt: 1}
	_, err = s.Complete(ctx, l, jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.ErrorIs(t, s.WatchCancel(ctx, l), jobstore.ErrNotFound)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = s.Submit(canceled, jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, context.Canceled, "a call with an ended context does nothing")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Counts[jobstore.StateQueued])
}

// TestSynctest runs the store inside a synctest bubble, as the runner's tests
// do: waits are driven by the bubble's fake clock, and no goroutine outlives
// the bubble.
func TestSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memstore.New(nil)
		defer s.Close()

		start := time.Now()
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", RunAt: start.Add(time.Hour)})
		require.NoError(t, err)
		_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.ErrorIs(t, err, jobstore.ErrNoJob)

		// AwaitWork sleeps until the job is due, on the fake clock.
		require.NoError(t, s.AwaitWork(ctx))
		require.Equal(t, time.Hour, time.Since(start))
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, j.ID, c.ID)

		// Wait and WatchCancel block durably until the job changes.
		waitDone := make(chan jobstore.Job, 1)
		watchDone := make(chan error, 1)
		go func() {
			j, _ := s.Wait(ctx, j.ID)
			waitDone <- j
		}()
		go func() { watchDone <- s.WatchCancel(ctx, c.Lease()) }()
		synctest.Wait()
		require.Empty(t, waitDone)
		require.Empty(t, watchDone)

		_, err = s.Cancel(ctx, j.ID)
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, <-watchDone)
		require.Empty(t, waitDone)

		_, err = s.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "stopped"})
		require.NoError(t, err)
		require.Equal(t, jobstore.StateCanceled, (<-waitDone).State)
	})
}

// TestAwaitWorkDoesNotSpin checks that a due job that no claimer accepts
// does not make AwaitWork return at once forever.
func TestAwaitWorkDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memstore.New(nil)
		defer s.Close()
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "other"})
		require.NoError(t, err)
		_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"mine"}})
		require.ErrorIs(t, err, jobstore.ErrNoJob)

		done := make(chan error, 1)
		go func() { done <- s.AwaitWork(ctx) }()
		synctest.Wait()
		require.Empty(t, done, "AwaitWork returned with nothing new to claim")

		mine, _, err := s.Submit(ctx, jobstore.Spec{Kind: "mine"})
		require.NoError(t, err)
		require.NoError(t, <-done)
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"mine"}})
		require.NoError(t, err)
		require.Equal(t, mine.ID, c.ID)
	})
}

// TestAwaitWorkNoLostWakeup checks that a job submitted between a claimer's
// empty Claim and its AwaitWork wakes it.
func TestAwaitWorkNoLostWakeup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memstore.New(nil)
		defer s.Close()
		_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.ErrorIs(t, err, jobstore.ErrNoJob)
		_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, s.AwaitWork(ctx))
		require.Zero(t, time.Since(start))
	})
}

// TestAwaitWorkDueBetweenClaimAndAwait checks that a delayed job that becomes
// due between a claimer's empty Claim and its AwaitWork wakes it.
func TestAwaitWorkDueBetweenClaimAndAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memstore.New(nil)
		defer s.Close()
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Second)})
		require.NoError(t, err)
		_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.ErrorIs(t, err, jobstore.ErrNoJob)
		time.Sleep(2 * time.Second)
		start := time.Now()
		require.NoError(t, s.AwaitWork(ctx))
		require.Zero(t, time.Since(start))
		_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
	})
}
