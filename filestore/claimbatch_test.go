package filestore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// TestClaimBatchSkipsJobItCannotClaim: a job whose claim fails halfway
// (its rename into claimed/ fails, as on a failing disk) does not cost the
// batch the other jobs: ClaimBatch returns them, without an error, and
// the failed one stays queued with no attempt counted and its lease free,
// so the next claim takes it. When every claim fails, ClaimBatch returns
// the error and every job stays queued.
func TestClaimBatchSkipsJobItCannotClaim(t *testing.T) {
	ctx := t.Context()
	var failID atomic.Pointer[string]
	inj := &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		if id := failID.Load(); op == fsfault.Rename && id != nil && (*id == "" || strings.Contains(path, *id)) {
			return fsfault.Error(op, syscall.EIO)
		}
		return nil
	}}
	s, err := Open(ctx, t.TempDir(), &Options{NoSync: true, Faults: inj.Func()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	var ids []string
	for range 5 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	bad := ids[1]
	failID.Store(&bad)
	jobs, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, 10)
	require.NoError(t, err)
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	require.Equal(t, []string{ids[0], ids[2], ids[3], ids[4]}, got, "the others, in claim order")
	j, err := s.Get(ctx, bad)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Zero(t, j.Attempt)

	failID.Store(nil)
	j, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err, "the job whose claim failed is claimable")
	require.Equal(t, bad, j.ID)
	jobs = append(jobs, j)
	for _, j := range jobs {
		_, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}

	for range 3 {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	all := ""
	failID.Store(&all)
	_, err = s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, 10)
	require.ErrorIs(t, err, syscall.EIO)
	require.False(t, errors.Is(err, jobstore.ErrNoJob))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Counts[jobstore.StateQueued], "a failed claim leaves its job queued")
	require.Zero(t, st.Counts[jobstore.StateRunning])
}

// TestClaimBatchBesideStoppedProcess: a process stopped while it holds
// one job's record lock does not keep a batch from the other jobs:
// ClaimBatch returns the rest, and the locked job stays queued. With only
// that job left, ClaimBatch says there is none.
func TestClaimBatchBesideStoppedProcess(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	var ids []string
	for i := range 6 {
		// The first is the most urgent: the one a claim would take first.
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Priority: 10 - i})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	holder := startHolder(t, dir, ids[0])
	require.NoError(t, holder.Signal(syscall.SIGSTOP))
	defer func() { _ = holder.Signal(syscall.SIGCONT) }()

	jobs, err := returnsPromptly(t, "ClaimBatch", func() ([]jobstore.Job, error) {
		return s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, 10)
	})
	require.NoError(t, err)
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	require.Equal(t, ids[1:], got, "every job beside the locked one, in claim order")
	_, err = returnsPromptly(t, "ClaimBatch", func() ([]jobstore.Job, error) {
		return s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, 10)
	})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "only the locked job is left")
	j, err := s.Get(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
}

// TestClaimBatchCtxEndsHalfway: a ctx that ends while a batch claims
// stops it; the jobs it claimed by then are returned, each held by its
// lease, and the others stay queued, unclaimed.
func TestClaimBatchCtxEndsHalfway(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var renames atomic.Int32
	inj := &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		if op == fsfault.Rename && strings.Contains(path, "claimed") && renames.Add(1) == 2 {
			cancel() // the second claim's rename goes on; no claim starts after it
		}
		return nil
	}}
	s, err := Open(t.Context(), t.TempDir(), &Options{NoSync: true, Faults: inj.Func()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	const n = 40
	for range n {
		_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	jobs, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, n)
	require.NoError(t, err, "the jobs claimed before the ctx ended are the caller's")
	require.GreaterOrEqual(t, len(jobs), 2)
	require.Less(t, len(jobs), n, "the batch went on after its ctx ended")
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, len(jobs), st.Counts[jobstore.StateRunning], "every job claimed is returned")
	require.Equal(t, n-len(jobs), st.Counts[jobstore.StateQueued])
	for _, j := range jobs {
		_, err := s.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err, "a returned job is held by its lease")
	}
	_, err = s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, n)
	require.ErrorIs(t, err, context.Canceled, "with nothing claimed, the ctx's error")
}
