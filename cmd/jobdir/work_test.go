package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

func TestHasDueJob(t *testing.T) {
	st := memstore.New(nil)
	defer st.Close()
	ctx := t.Context()
	due, err := hasDueJob(ctx, st, nil)
	require.NoError(t, err)
	require.False(t, due)

	// Many delayed jobs, more than a page, and no due one.
	for range jobstore.MaxListLimit + 5 {
		_, _, err := st.Submit(ctx, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	due, err = hasDueJob(ctx, st, nil)
	require.NoError(t, err)
	require.False(t, due)

	_, _, err = st.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	due, err = hasDueJob(ctx, st, nil)
	require.NoError(t, err)
	require.True(t, due, "the due job is on the second page")

	// A due job of a queue the worker does not take, or of a paused
	// queue, is no work for it.
	due, err = hasDueJob(ctx, st, []string{"other"})
	require.NoError(t, err)
	require.False(t, due)
	require.NoError(t, st.PauseQueue(ctx, jobstore.DefaultQueue))
	due, err = hasDueJob(ctx, st, nil)
	require.NoError(t, err)
	require.False(t, due)
	_, _, err = st.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "other"})
	require.NoError(t, err)
	due, err = hasDueJob(ctx, st, []string{"other"})
	require.NoError(t, err)
	require.True(t, due)
}
