package filestore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestWaitersShareOneReader: a thousand Waits on one running job share one
// reader of its record, which reads only when something happens (here
// nothing does: the poll is an hour), and all of them return when another
// Store finishes the job, woken by the filesystem event alone.
func TestWaitersShareOneReader(t *testing.T) {
	const waiters = 1000
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, PollInterval: time.Hour})
	worker := openAt(t, dir, &Options{NoSync: true})
	j, _, err := worker.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	c, err := worker.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() {
			got, err := s.Wait(ctx, j.ID)
			if err == nil && got.State != jobstore.StateSucceeded {
				err = &jobstore.TransitionError{ID: got.ID, From: got.State, To: jobstore.StateSucceeded}
			}
			errs <- err
		})
	}
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.readers[j.ID]
		return r != nil && r.refs == waiters
	}, 30*time.Second, time.Millisecond)
	s.mu.Lock()
	require.Len(t, s.readers, 1)
	reads := s.readers[j.ID].started
	s.mu.Unlock()
	// Each joining waiter may ask for a read, but they come together: far
	// fewer reads than waiters.
	require.Less(t, reads, uint64(waiters/2), "waiters read the record themselves")

	_, err = worker.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s.mu.Lock()
	require.Empty(t, s.readers, "the reader stops with its last waiter")
	s.mu.Unlock()
}

// TestWaitAfterRetryIsNotStale: a Wait that begins after a Retry returned
// does not take the failed state that the shared reader read before it.
func TestWaitAfterRetryIsNotStale(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, PollInterval: time.Hour})
	other := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	require.NoError(t, err)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "boom"})
	require.NoError(t, err)

	// A waiter that stays: the reader publishes the failed job and lives on.
	r, _, leave, err := s.joinReader(j.ID)
	require.NoError(t, err)
	defer leave()
	require.Eventually(t, func() bool {
		return r.last.Load().job.State == jobstore.StateFailed
	}, 10*time.Second, time.Millisecond)

	// Retried by another Store: only a filesystem event, which comes a
	// little later, tells the reader.
	_, err = other.Retry(ctx, j.ID)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	got, err := s.Wait(wctx, j.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Wait returned %s: the state from before the Retry", got.State)
}
