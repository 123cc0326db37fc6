package pgstore_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestConcurrentCompletes: many handlers completing at once, of jobs
// claimed in batches, each get their own outcome, also when some rows
// changed since their claim (a cancel) and must be read again.
func TestConcurrentCompletes(t *testing.T) {
	pool := pgtest.Pool(t, 8)
	s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	ctx := t.Context()
	const n = 200
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k", MaxAttempts: 2}
	}
	_, err = s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	var claimed []jobstore.Job
	for len(claimed) < n {
		jobs, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w"}, jobstore.MaxClaimBatch)
		require.NoError(t, err)
		claimed = append(claimed, jobs...)
	}
	for i := 0; i < n; i += 10 {
		_, err := s.Cancel(ctx, claimed[i].ID) // the row changes under the claim
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	got := make([]jobstore.Job, n)
	errs := make([]error, n)
	for i, j := range claimed {
		wg.Go(func() {
			o := jobstore.Succeeded([]byte(`{"ok":true}`))
			if i%3 == 1 {
				o = jobstore.Outcome{Error: "boom"}
			}
			got[i], errs[i] = s.Complete(ctx, j.Lease(), o)
		})
	}
	wg.Wait()
	for i, j := range claimed {
		require.NoError(t, errs[i], "job %d", i)
		want := jobstore.StateSucceeded
		switch {
		case i%3 == 1 && i%10 == 0:
			want = jobstore.StateCanceled // failed after its cancel
		case i%3 == 1:
			want = jobstore.StateQueued // an attempt left
		}
		require.Equal(t, want, got[i].State, "job %d", i)
		cur, err := s.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, want, cur.State, "job %d as stored", i)
		_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		require.ErrorIs(t, err, jobstore.ErrNotHeld, "job %d: a lease completes once", i)
	}
}
