package filestore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestGetSeesMovingJob: a Get, which takes no lock, finds a whole record
// of a job that exists throughout the call while another process moves it
// between queued/, claimed/ and done/ as fast as it can (claims, failed
// attempts queued again, final failures, retries).
func TestGetSeesMovingJob(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	moving, _, err := s.Submit(ctx, jobstore.Spec{Kind: cycleKind, MaxAttempts: 3})
	require.NoError(t, err)
	c := startChild(t, dir, "cycle", childNoSync+"=1")
	require.Equal(t, "cycling", c.Next(t))

	const calls = 5000
	states := map[jobstore.State]int{}
	for i := range calls {
		j, err := s.Get(ctx, moving.ID)
		require.NoError(t, err, "Get %d of %d", i+1, calls)
		require.Equal(t, moving.ID, j.ID)
		states[j.State]++
	}
	t.Logf("states seen: %v", states)
	require.Greater(t, len(states), 1, "the job moved during the Gets")
}
