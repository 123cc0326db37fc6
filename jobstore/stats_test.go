package jobstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestStatsMatching counts what a List with a kind and states would hold,
// from the counts by state, or by kind and state.
func TestStatsMatching(t *testing.T) {
	st := jobstore.Stats{Counts: map[jobstore.State]int{jobstore.StateQueued: 3, jobstore.StateFailed: 2, jobstore.StateSucceeded: 5}}
	st.AddKind("a", jobstore.StateQueued, 2)
	st.AddKind("a", jobstore.StateFailed, 2)
	st.AddKind("b", jobstore.StateQueued, 1)
	st.AddKind("b", jobstore.StateSucceeded, 5)
	for _, c := range []struct {
		kind   string
		states []jobstore.State
		want   int
	}{
		{"", nil, 10},
		{"", []jobstore.State{jobstore.StateQueued, jobstore.StateFailed}, 5},
		{"a", nil, 4},
		{"a", []jobstore.State{jobstore.StateSucceeded}, 0},
		{"b", []jobstore.State{jobstore.StateSucceeded, jobstore.StateQueued}, 6},
		{"none", nil, 0},
	} {
		require.Equal(t, c.want, st.Matching(c.kind, c.states), "%q %v", c.kind, c.states)
	}
}
