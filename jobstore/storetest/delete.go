package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var deleteTests = []test{
	{"OnlyFinished", testDeleteOnlyFinished},
	{"FreesTheKey", testDeleteFreesTheKey},
	{"NotFoundAndInvalidID", testDeleteNotFound},
}

// deleter returns s as a Deleter, or skips the test.
func deleter(t *testing.T, s jobstore.Store) jobstore.Deleter {
	t.Helper()
	d, ok := s.(jobstore.Deleter)
	if !ok {
		t.Skip("the store is not a jobstore.Deleter")
	}
	return d
}

func testDeleteOnlyFinished(t *testing.T, s jobstore.Store) {
	d := deleter(t, s)
	ctx := t.Context()
	byState := jobsInEveryState(t, s, func(jobstore.State) string { return "" })
	for st, j := range byState {
		err := d.Delete(ctx, j.ID)
		if !st.Terminal() {
			require.ErrorIs(t, err, jobstore.ErrNotFinished, "a %s job", st)
			require.ErrorIs(t, err, jobstore.ErrInvalidTransition)
			got := get(t, s, j.ID)
			require.Equal(t, st, got.State, "a refused delete changed the job")
			continue
		}
		require.NoError(t, err, "a %s job", st)
		_, err = s.Get(ctx, j.ID)
		require.ErrorIs(t, err, jobstore.ErrNotFound, "the deleted %s job is still there", st)
		require.ErrorIs(t, d.Delete(ctx, j.ID), jobstore.ErrNotFound, "a second delete")
	}
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Matching("", nil), "the waiting, queued and running jobs are all that is left")
	page, err := s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 3)
}

func testDeleteFreesTheKey(t *testing.T, s jobstore.Store) {
	d := deleter(t, s)
	ctx := t.Context()
	j := submit(t, s, jobstore.Spec{Kind: "k", Key: "report-7"})
	c := claimID(t, s, "w", j.ID)
	complete(t, s, c, jobstore.Succeeded(nil))
	require.NoError(t, d.Delete(ctx, j.ID))
	_, err := s.GetByKey(ctx, "report-7")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	again, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "report-7"})
	require.NoError(t, err)
	require.True(t, created, "the key of a deleted job is not free")
	require.NotEqual(t, j.ID, again.ID)
}

func testDeleteNotFound(t *testing.T, s jobstore.Store) {
	d := deleter(t, s)
	require.ErrorIs(t, d.Delete(t.Context(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"), jobstore.ErrNotFound)
	require.ErrorIs(t, d.Delete(t.Context(), "not-an-id"), jobstore.ErrInvalidID)
}
