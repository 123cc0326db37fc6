package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

func TestSpecDepsValidate(t *testing.T) {
	id := jobstore.NewID(time.Now())
	for _, ok := range []jobstore.Spec{
		{Kind: "k", After: []string{id}},
		{Kind: "k", AfterKeys: []string{"build-1"}, AfterSpecs: []int{0, 3}, AfterAny: true},
		{Kind: "k", Batch: "exports-2026.12"},
		{Kind: "k", AfterBatch: "exports", Batch: "reports"},
	} {
		require.NoError(t, ok.Validate(0), "%+v", ok)
	}
	for _, bad := range []jobstore.Spec{
		{Kind: "k", After: []string{"not-an-id"}},
		{Kind: "k", AfterKeys: []string{"a\nb"}},
		{Kind: "k", AfterKeys: []string{""}},
		{Kind: "k", AfterSpecs: []int{-1}},
		{Kind: "k", Batch: "a b"},
		{Kind: "k", Batch: strings.Repeat("b", jobstore.MaxBatchNameLen+1)},
		{Kind: "k", AfterBatch: "x", Batch: "x"},
		{Kind: "k", AfterSpecs: make([]int, jobstore.MaxAfter+1)},
	} {
		require.ErrorIs(t, bad.Validate(0), jobstore.ErrInvalidInput, "%+v", bad)
	}
}

func TestNewJobWithDeps(t *testing.T) {
	now := time.Now()
	j := jobstore.NewJob(jobstore.Spec{Kind: "k", Batch: "b"}, now)
	require.Equal(t, jobstore.StateQueued, j.State, "a job without dependencies is queued")
	require.Equal(t, "b", j.Batch)
	j.SetAfter([]string{"A", "B", "A"})
	require.Equal(t, jobstore.StateWaiting, j.State)
	require.Equal(t, []string{"A", "B"}, j.After)

	cb := jobstore.NewJob(jobstore.Spec{Kind: "k", AfterBatch: "b"}, now)
	require.True(t, cb.AfterAny, "a callback runs whatever the outcomes")
	require.Empty(t, jobstore.Job{After: []string{"A"}}.RerunSpec().After, "a rerun waits for nothing")
}

func TestDependencyCounts(t *testing.T) {
	j := jobstore.Job{After: []string{"A", "B", "C", "D", "E"}}
	pending, total := jobstore.DependencyCounts(j, map[string]jobstore.State{
		"A": jobstore.StateSucceeded, "B": jobstore.StateRunning, "C": jobstore.StateWaiting, "D": jobstore.StateQueued,
	})
	require.Equal(t, 3, pending, "E does not exist, so it has ended")
	require.Equal(t, 5, total)
}

func TestBatchInfoEnded(t *testing.T) {
	b := jobstore.BatchInfo{Total: 3, States: map[jobstore.State]int{jobstore.StateSucceeded: 2, jobstore.StateFailed: 1}}
	require.True(t, b.Ended())
	b.States[jobstore.StateFailed], b.States[jobstore.StateRunning] = 0, 1
	require.False(t, b.Ended())
}
