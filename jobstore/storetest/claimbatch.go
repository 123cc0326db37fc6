package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// claimBatchTests check jobstore.BatchClaimer, for the stores that
// implement it; the others skip them.
var claimBatchTests = []test{
	{"Order", batchClaimer(testClaimBatchOrder)},
	{"Kinds", batchClaimer(testClaimBatchKinds)},
	{"EachOnce", batchClaimer(testClaimBatchEachOnce)},
	{"InvalidMax", batchClaimer(testClaimBatchInvalidMax)},
}

// batchClaimer adapts a test of a BatchClaimer, skipping stores that are
// not.
func batchClaimer(fn func(t *testing.T, s jobstore.Store, bc jobstore.BatchClaimer)) func(t *testing.T, s jobstore.Store) {
	return func(t *testing.T, s jobstore.Store) {
		bc, ok := s.(jobstore.BatchClaimer)
		if !ok {
			t.Skip("the store does not implement jobstore.BatchClaimer")
		}
		fn(t, s, bc)
	}
}

func testClaimBatchOrder(t *testing.T, s jobstore.Store, bc jobstore.BatchClaimer) {
	ctx := t.Context()
	low := submit(t, s, jobstore.Spec{Kind: "k", Priority: -1})
	plain1 := submit(t, s, jobstore.Spec{Kind: "k"})
	plain2 := submit(t, s, jobstore.Spec{Kind: "k"})
	urgent := submit(t, s, jobstore.Spec{Kind: "k", Priority: 5})
	plain3 := submit(t, s, jobstore.Spec{Kind: "k"})
	later := submit(t, s, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Hour)})

	jobs, err := bc.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w1"}, 3)
	require.NoError(t, err)
	require.Equal(t, []string{urgent.ID, plain1.ID, plain2.ID}, ids(jobs), "the most urgent three, in claim order")
	for _, j := range jobs {
		require.Equal(t, jobstore.StateRunning, j.State)
		require.Equal(t, "w1", j.Worker)
		require.Equal(t, 1, j.Attempt)
		requireSameJob(t, j, get(t, s, j.ID))
	}
	jobs2, err := bc.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w2"}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{plain3.ID, low.ID}, ids(jobs2), "the rest that are due")
	_, err = bc.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w2"}, 10)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	var nj *jobstore.NoJobError
	if errors.As(err, &nj) && !nj.NextRunAt.IsZero() {
		require.WithinDuration(t, later.RunAt, nj.NextRunAt, time.Second, "says when the delayed job is due")
	}
	// Each claimed job is held by its own lease.
	for _, j := range append(jobs, jobs2...) {
		require.Equal(t, jobstore.StateSucceeded, complete(t, s, j, jobstore.Succeeded(nil)).State)
	}
}

func testClaimBatchKinds(t *testing.T, s jobstore.Store, bc jobstore.BatchClaimer) {
	var want []string
	for i := range 6 {
		kind := "a"
		if i%2 == 1 {
			kind = "b"
		}
		j := submit(t, s, jobstore.Spec{Kind: kind})
		if kind == "b" {
			want = append(want, j.ID)
		}
	}
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w", Kinds: []string{"b", "c"}}, 10)
	require.NoError(t, err)
	require.Equal(t, want, ids(jobs), "only the kinds asked for")
	_, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w", Kinds: []string{"b"}}, 10)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
}

func testClaimBatchEachOnce(t *testing.T, s jobstore.Store, bc jobstore.BatchClaimer) {
	const n = 120
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	_, err := s.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		seen  = map[string]string{}
		wg    sync.WaitGroup
		fails []string
	)
	for w := range 4 {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for {
				var jobs []jobstore.Job
				var err error
				if w == 3 {
					var j jobstore.Job // one claimer claims one at a time
					if j, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: worker}); err == nil {
						jobs = []jobstore.Job{j}
					}
				} else {
					jobs, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: worker}, 7)
				}
				if errors.Is(err, jobstore.ErrNoJob) {
					return
				}
				mu.Lock()
				if err != nil {
					fails = append(fails, err.Error())
					mu.Unlock()
					return
				}
				for _, j := range jobs {
					if other, dup := seen[j.ID]; dup {
						fails = append(fails, fmt.Sprintf("job %s claimed by %s and %s", j.ID, other, worker))
					}
					seen[j.ID] = worker
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, fails)
	require.Len(t, seen, n, "every job claimed")
}

func testClaimBatchInvalidMax(t *testing.T, s jobstore.Store, bc jobstore.BatchClaimer) {
	submitKind(t, s, "k")
	for _, max := range []int{0, -1, jobstore.MaxClaimBatch + 1} {
		_, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, max)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "max %d", max)
	}
	_, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: ""}, 2)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput, "no worker")
	get(t, s, submitKind(t, s, "k").ID)
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
}
