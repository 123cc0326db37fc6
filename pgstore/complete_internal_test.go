package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

// TestCompletesShareOneCommit: the Completes that wait while every flusher
// writes a batch are written next, together, in one statement (their rows carry
// one transaction ID), and each returns only once its row is committed. A
// Complete whose ctx ends while it waits is left out of the batch: it
// returns the ctx's error and its job stays running.
func TestCompletesShareOneCommit(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t, 8)
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	const n = 10
	specs := make([]jobstore.Spec, n+1+completeFlushers)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	_, err = s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	jobs, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, len(specs))
	require.NoError(t, err)
	require.Len(t, jobs, len(specs))
	blocked, late, rest := jobs[:completeFlushers], jobs[completeFlushers], jobs[completeFlushers+1:]

	// Hold the rows of the first jobs, so that each flusher writes one of
	// them and waits.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	waiting := func(k int) func() bool {
		return func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.completing) == k
		}
	}
	blockedDone := make(chan error, len(blocked))
	for i, j := range blocked {
		_, err = tx.Exec(ctx, `SELECT 1 FROM `+s.q.schema+`.jobs WHERE id = $1 FOR UPDATE`, j.ID)
		require.NoError(t, err)
		go func() {
			_, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
			blockedDone <- err
		}()
		require.Eventually(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.flushing == i+1 && len(s.completing) == 0
		}, 10*time.Second, time.Millisecond, "flusher %d did not start", i+1)
	}

	lateCtx, lateCancel := context.WithCancel(ctx)
	lateDone := make(chan error, 1)
	go func() {
		_, err := s.Complete(lateCtx, late.Lease(), jobstore.Succeeded(nil))
		lateDone <- err
	}()
	require.Eventually(t, waiting(1), 10*time.Second, time.Millisecond)
	lateCancel()
	require.ErrorIs(t, <-lateDone, context.Canceled)

	var wg sync.WaitGroup
	states := make([]string, n)
	errs := make([]error, n)
	for i, j := range rest {
		wg.Go(func() {
			if _, errs[i] = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); errs[i] != nil {
				return
			}
			// Another connection sees the outcome as soon as Complete
			// returns.
			errs[i] = pool.QueryRow(ctx, `SELECT state FROM `+s.q.schema+`.jobs WHERE id = $1`, j.ID).Scan(&states[i])
		})
	}
	require.Eventually(t, waiting(n+1), 10*time.Second, time.Millisecond, "the completes did not queue up")
	for _, st := range states {
		require.Empty(t, st, "a Complete returned before its batch was written")
	}
	require.NoError(t, tx.Commit(ctx))
	for range blocked {
		require.NoError(t, <-blockedDone)
	}
	wg.Wait()
	ids := make([]string, n)
	for i, j := range rest {
		require.NoError(t, errs[i])
		require.Equal(t, "succeeded", states[i])
		ids[i] = j.ID
	}
	var xids int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM `+s.q.schema+`.jobs WHERE id = ANY($1)`, ids).Scan(&xids))
	require.Equal(t, 1, xids, "the waiting completes were not written in one transaction")
	got, err := s.Get(ctx, late.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State, "a Complete whose ctx ended was written")
}
