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
	due, err := hasDueJob(ctx, st)
	require.NoError(t, err)
	require.False(t, due)

	// Many delayed jobs, more than a page, and no due one.
	for range jobstore.MaxListLimit + 5 {
		_, _, err := st.Submit(ctx, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	due, err = hasDueJob(ctx, st)
	require.NoError(t, err)
	require.False(t, due)

	_, _, err = st.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	due, err = hasDueJob(ctx, st)
	require.NoError(t, err)
	require.True(t, due, "the due job is on the second page")
}
