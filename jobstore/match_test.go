package jobstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var (
	t0     = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	testID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
)

// queued returns a queued job due at t0.
func queued() jobstore.Job {
	return jobstore.Job{
		ID: testID, Kind: "k", State: jobstore.StateQueued, MaxAttempts: 3,
		RunAt: t0, CreatedAt: t0, UpdatedAt: t0,
	}
}

// running returns the job claimed by worker w for its attempt-th attempt.
func running(attempt int) jobstore.Job {
	j := queued()
	j.State = jobstore.StateRunning
	j.Attempt = attempt
	j.Worker = "w"
	j.StartedAt = t0
	return j
}

func TestDue(t *testing.T) {
	j := queued()
	require.True(t, j.Due(t0))
	require.True(t, j.Due(t0.Add(time.Nanosecond)))
	require.False(t, j.Due(t0.Add(-time.Nanosecond)))
	j.State = jobstore.StateCanceled
	require.False(t, j.Due(t0.Add(time.Hour)), "only queued jobs are due")
}

func TestLeaseHolds(t *testing.T) {
	j := running(2)
	l := j.Lease()
	require.True(t, j.Holds(l))
	for name, bad := range map[string]jobstore.Lease{
		"old attempt":  {ID: testID, Worker: "w", Attempt: 1},
		"next attempt": {ID: testID, Worker: "w", Attempt: 3},
		"other worker": {ID: testID, Worker: "v", Attempt: 2},
		"other job":    {ID: "01ARZ3NDEKTSV4RRFFQ69G5FAW", Worker: "w", Attempt: 2},
	} {
		require.False(t, j.Holds(bad), name)
	}
	j.State = jobstore.StateSucceeded
	require.False(t, j.Holds(l), "no lease holds a job that is not running")
}

func TestLeaseValidate(t *testing.T) {
	require.NoError(t, running(1).Lease().Validate())
	for name, l := range map[string]jobstore.Lease{
		"bad id":     {ID: "x", Worker: "w", Attempt: 1},
		"bad worker": {ID: testID, Worker: "", Attempt: 1},
		"no attempt": {ID: testID, Worker: "w", Attempt: 0},
	} {
		require.ErrorIs(t, l.Validate(), jobstore.ErrInvalidInput, name)
	}
}

func TestPrunable(t *testing.T) {
	cutoff := t0
	for _, st := range jobstore.States() {
		j := queued()
		j.State = st
		j.FinishedAt = t0.Add(-time.Second)
		require.Equal(t, st.Terminal(), j.Prunable(cutoff), st)
		j.FinishedAt = t0
		require.False(t, j.Prunable(cutoff), "finished exactly at the cutoff: %s", st)
	}
}

func TestMatchesList(t *testing.T) {
	j := queued()
	tests := []struct {
		opts jobstore.ListOptions
		want bool
	}{
		{jobstore.ListOptions{}, true},
		{jobstore.ListOptions{Kind: "k"}, true},
		{jobstore.ListOptions{Kind: "other"}, false},
		{jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}}, true},
		{jobstore.ListOptions{States: []jobstore.State{jobstore.StateRunning, jobstore.StateQueued}}, true},
		{jobstore.ListOptions{States: []jobstore.State{jobstore.StateRunning}}, false},
		{jobstore.ListOptions{Kind: "k", States: []jobstore.State{jobstore.StateRunning}}, false},
		{jobstore.ListOptions{Cursor: "00000000000000000000000000"}, true}, // the cursor is not a filter
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, j.MatchesList(tc.opts), "%+v", tc.opts)
	}
}

func TestListOptionsNormalize(t *testing.T) {
	tests := []struct {
		name    string
		in      jobstore.ListOptions
		want    jobstore.ListOptions
		wantErr error
	}{
		{"zero", jobstore.ListOptions{}, jobstore.ListOptions{Limit: jobstore.DefaultListLimit}, nil},
		{"limit kept", jobstore.ListOptions{Limit: 7}, jobstore.ListOptions{Limit: 7}, nil},
		{"limit at max", jobstore.ListOptions{Limit: jobstore.MaxListLimit}, jobstore.ListOptions{Limit: jobstore.MaxListLimit}, nil},
		{"limit capped", jobstore.ListOptions{Limit: jobstore.MaxListLimit + 1}, jobstore.ListOptions{Limit: jobstore.MaxListLimit}, nil},
		{"everything", jobstore.ListOptions{States: []jobstore.State{jobstore.StateFailed}, Kind: "k", Cursor: testID, Order: jobstore.OldestFirst, Limit: 3},
			jobstore.ListOptions{States: []jobstore.State{jobstore.StateFailed}, Kind: "k", Cursor: testID, Order: jobstore.OldestFirst, Limit: 3}, nil},
		{"negative limit", jobstore.ListOptions{Limit: -1}, jobstore.ListOptions{}, jobstore.ErrInvalidInput},
		{"unknown state", jobstore.ListOptions{States: []jobstore.State{"done"}}, jobstore.ListOptions{}, jobstore.ErrInvalidInput},
		{"bad kind", jobstore.ListOptions{Kind: "a b"}, jobstore.ListOptions{}, jobstore.ErrInvalidInput},
		{"bad cursor", jobstore.ListOptions{Cursor: "../x"}, jobstore.ListOptions{}, jobstore.ErrInvalidID},
		{"unknown order", jobstore.ListOptions{Order: 2}, jobstore.ListOptions{}, jobstore.ErrInvalidInput},
		{"byte limit kept", jobstore.ListOptions{MaxBytes: 4096}, jobstore.ListOptions{Limit: jobstore.DefaultListLimit, MaxBytes: 4096}, nil},
		{"negative byte limit", jobstore.ListOptions{MaxBytes: -1}, jobstore.ListOptions{}, jobstore.ErrInvalidInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Normalize()
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestAfterCursor(t *testing.T) {
	a, b, c := "0000000000000000000000000A", "0000000000000000000000000B", "0000000000000000000000000C"
	newest := jobstore.ListOptions{Cursor: b}
	require.True(t, newest.AfterCursor(a))
	require.False(t, newest.AfterCursor(b))
	require.False(t, newest.AfterCursor(c))
	oldest := jobstore.ListOptions{Cursor: b, Order: jobstore.OldestFirst}
	require.False(t, oldest.AfterCursor(a))
	require.False(t, oldest.AfterCursor(b))
	require.True(t, oldest.AfterCursor(c))
	require.True(t, jobstore.ListOptions{}.AfterCursor(a), "no cursor: everything")
}

func TestBackoff(t *testing.T) {
	for attempt := 1; attempt <= 10; attempt++ {
		base := time.Duration(attempt*attempt*attempt*attempt) * time.Second
		if base > jobstore.MaxBackoff {
			base = jobstore.MaxBackoff
		}
		lo := time.Duration(float64(base) * 0.9)
		hi := time.Duration(float64(base) * 1.1)
		var minSeen, maxSeen time.Duration
		for i := range 200 {
			d := jobstore.Backoff(attempt)
			require.GreaterOrEqual(t, d, lo, "attempt %d", attempt)
			require.LessOrEqual(t, d, hi, "attempt %d", attempt)
			if i == 0 || d < minSeen {
				minSeen = d
			}
			if d > maxSeen {
				maxSeen = d
			}
		}
		require.Greater(t, maxSeen, minSeen, "attempt %d: no jitter", attempt)
	}
	// The cap holds for any attempt, without overflow.
	for _, attempt := range []int{8, 59, 60, 1000, 1 << 40} {
		d := jobstore.Backoff(attempt)
		require.GreaterOrEqual(t, d, jobstore.MaxBackoff*9/10, attempt)
		require.LessOrEqual(t, d, jobstore.MaxBackoff*11/10, attempt)
	}
	// Attempts below 1 count as 1.
	for _, attempt := range []int{0, -5} {
		d := jobstore.Backoff(attempt)
		require.GreaterOrEqual(t, d, 900*time.Millisecond)
		require.LessOrEqual(t, d, 1100*time.Millisecond)
	}
}
