package filestore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestFsckChecksTheGraph: a waiting job whose dependency ended without
// settling it (its entry in dependents/ was lost, as a crash between the
// end and the settle leaves it) is reported as unsettled and settled by
// Repair; one that names a job whose record is gone is reported as
// dangling and, without after_any, canceled.
func TestFsckChecksTheGraph(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true, RecoverInterval: time.Hour})
	a, _, err := s.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	w, _, err := s.Submit(ctx, jobstore.Spec{Kind: "w", After: []string{a.ID}})
	require.NoError(t, err)
	b, _, err := s.Submit(ctx, jobstore.Spec{Kind: "b"})
	require.NoError(t, err)
	w2, _, err := s.Submit(ctx, jobstore.Spec{Kind: "w2", After: []string{b.ID}})
	require.NoError(t, err)

	require.NoError(t, os.RemoveAll(filepath.Join(s.Dir(), dirDependents, a.ID)))
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "x", Kinds: []string{"a"}})
	require.NoError(t, err)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(s.Dir(), dirQueued, b.ID+recordExt)))

	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	uns := problemsOf(r, ProblemUnsettled)
	require.Len(t, uns, 2, "%v", r.Problems)
	dang := problemsOf(r, ProblemDanglingDependency)
	require.Len(t, dang, 1, "%v", r.Problems)
	require.Equal(t, w2.ID, dang[0].ID)
	require.Contains(t, dang[0].Detail, b.ID)
	got, err := s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State, "Fsck without repair changed a job")

	r, err = s.Repair(ctx)
	require.NoError(t, err)
	require.Len(t, problemsOf(r, ProblemUnsettled), 2)
	got, err = s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	got, err = s.Get(ctx, w2.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	require.Equal(t, "dependency "+b.ID+" no longer exists", got.LastError)
	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
}

// TestSettlePassFindsWhatAnEndMissed: a Store that claims settles, every
// settleInterval, the waiting jobs it has seen, so one that a dead
// process left unsettled does not wait for the next Open.
func TestSettlePassFindsWhatAnEndMissed(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true})
	a, _, err := s.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	w, _, err := s.Submit(ctx, jobstore.Spec{Kind: "w", After: []string{a.ID}})
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(s.Dir(), dirDependents, a.ID)))
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "x"})
	require.NoError(t, err)
	require.Equal(t, a.ID, c.ID)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	got, err := s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State)
	s.settleWaiting(ctx) // what the maintenance loop runs every settleInterval
	got, err = s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

// TestPrunedBatchIsGone: once every job of a batch and its callback are
// pruned, the batch is unknown again and its name may be used anew.
func TestPrunedBatchIsGone(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true})
	m, _, err := s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err)
	cb, _, err := s.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	require.NoError(t, err)
	for _, id := range []string{m.ID, cb.ID} {
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, id, c.ID)
		_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	time.Sleep(5 * time.Millisecond)
	n, err := s.Prune(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = s.Batch(ctx, "b")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = os.Lstat(s.batchDir("b"))
	require.ErrorIs(t, err, os.ErrNotExist, "the batch's directory stays")
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err, "the name of a pruned batch cannot be used again")
}
