package storekit_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// states is a DepLookup over a map; a missing ID is a job that does not
// exist. It counts the look-ups.
type states struct {
	m     map[string]jobstore.State
	calls int
}

func (s *states) lookup(id string) (jobstore.State, bool, error) {
	s.calls++
	st, ok := s.m[id]
	return st, ok, nil
}

func waiting(after []string, any bool) jobstore.Job {
	now := time.Now()
	j := jobstore.NewJob(jobstore.Spec{Kind: "k", AfterAny: any}, now.Add(-time.Minute))
	j.SetAfter(after)
	return j
}

func TestSettle(t *testing.T) {
	const a, b, c = "A", "B", "C"
	now := time.Now()
	for _, tc := range []struct {
		name    string
		any     bool
		deps    map[string]jobstore.State
		want    jobstore.State
		lastErr string
	}{
		{"all succeeded", false, map[string]jobstore.State{a: jobstore.StateSucceeded, b: jobstore.StateSucceeded, c: jobstore.StateSucceeded}, jobstore.StateQueued, ""},
		{"one pending", false, map[string]jobstore.State{a: jobstore.StateSucceeded, b: jobstore.StateRunning, c: jobstore.StateSucceeded}, jobstore.StateWaiting, ""},
		{"queued again is pending", false, map[string]jobstore.State{a: jobstore.StateQueued, b: jobstore.StateSucceeded, c: jobstore.StateSucceeded}, jobstore.StateWaiting, ""},
		{"failed cancels before the others end", false, map[string]jobstore.State{a: jobstore.StateRunning, b: jobstore.StateFailed, c: jobstore.StateWaiting}, jobstore.StateCanceled, "dependency B failed"},
		{"canceled cancels", false, map[string]jobstore.State{a: jobstore.StateSucceeded, b: jobstore.StateSucceeded, c: jobstore.StateCanceled}, jobstore.StateCanceled, "dependency C was canceled"},
		{"missing cancels", false, map[string]jobstore.State{a: jobstore.StateSucceeded, b: jobstore.StateSucceeded}, jobstore.StateCanceled, "dependency C no longer exists"},
		{"any: every end runs", true, map[string]jobstore.State{a: jobstore.StateFailed, b: jobstore.StateCanceled, c: jobstore.StateSucceeded}, jobstore.StateQueued, ""},
		{"any: missing counts as ended", true, map[string]jobstore.State{a: jobstore.StateFailed, b: jobstore.StateSucceeded}, jobstore.StateQueued, ""},
		{"any: waits for the last", true, map[string]jobstore.State{a: jobstore.StateFailed, b: jobstore.StateSucceeded, c: jobstore.StateWaiting}, jobstore.StateWaiting, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := waiting([]string{a, b, c}, tc.any)
			s := &states{m: tc.deps}
			got, changed, err := storekit.Settle(j, "", s.lookup, now)
			require.NoError(t, err)
			require.Equal(t, tc.want, got.State)
			require.Equal(t, tc.want != jobstore.StateWaiting, changed)
			require.Equal(t, tc.lastErr, got.LastError)
			switch got.State {
			case jobstore.StateQueued:
				require.True(t, got.RunAt.Equal(now.UTC()), "a promoted job is due from its promotion")
				require.True(t, got.FinishedAt.IsZero())
			case jobstore.StateCanceled:
				require.True(t, got.FinishedAt.Equal(now.UTC()))
			}
		})
	}
}

func TestSettleFirstStopsAtPending(t *testing.T) {
	after := []string{"A", "B", "C", "D"}
	j := waiting(after, true)
	s := &states{m: map[string]jobstore.State{"A": jobstore.StateRunning, "B": jobstore.StateRunning, "C": jobstore.StateSucceeded, "D": jobstore.StateRunning}}
	got, changed, err := storekit.Settle(j, "C", s.lookup, time.Now())
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, jobstore.StateWaiting, got.State)
	require.Equal(t, 2, s.calls, "the ended dependency, then the next, which has not ended")

	// Without after_any, the one that ended is looked at first.
	j = waiting(after, false)
	s.m["D"] = jobstore.StateFailed
	got, changed, err = storekit.Settle(j, "D", s.lookup, time.Now())
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, "dependency D failed", got.LastError)
	require.Equal(t, 1, s.calls-2)
}

func TestSettleLeavesOtherStates(t *testing.T) {
	j := jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now())
	got, changed, err := storekit.Settle(j, "", func(string) (jobstore.State, bool, error) { panic("looked up") }, time.Now())
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, j, got)
}

func TestSettleLookupError(t *testing.T) {
	boom := errors.New("disk on fire")
	j := waiting([]string{"A"}, false)
	_, changed, err := storekit.Settle(j, "", func(string) (jobstore.State, bool, error) { return "", false, boom }, time.Now())
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "dependency A")
	require.False(t, changed)
}

func TestSettleRetry(t *testing.T) {
	j := waiting([]string{"A"}, false)
	j.State = jobstore.StateCanceled
	r, err := storekit.ApplyRetry(j, time.Now())
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, r.State)
	failed := func(string) (jobstore.State, bool, error) { return jobstore.StateFailed, true, nil }
	_, err = storekit.SettleRetry(r, failed, time.Now())
	require.ErrorIs(t, err, jobstore.ErrDependencyFailed)
	require.ErrorContains(t, err, "dependency A failed; retry that job first")
	ok := func(string) (jobstore.State, bool, error) { return jobstore.StateSucceeded, true, nil }
	got, err := storekit.SettleRetry(r, ok, time.Now())
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

func TestResolveAfter(t *testing.T) {
	keys := map[string]string{"k1": "ID1"}
	byKey := func(k string) (string, error) { return keys[k], nil }
	ids, err := storekit.ResolveAfter(jobstore.Spec{After: []string{"ID0"}, AfterKeys: []string{"k1"}, AfterSpecs: []int{1}}, byKey, []string{"E0", "E1"})
	require.NoError(t, err)
	require.Equal(t, []string{"ID0", "ID1", "E1"}, ids)
	_, err = storekit.ResolveAfter(jobstore.Spec{AfterKeys: []string{"nope"}}, byKey, nil)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, err = storekit.ResolveAfter(jobstore.Spec{AfterSpecs: []int{0}}, byKey, nil)
	require.ErrorContains(t, err, "only a spec of a batch")
	_, err = storekit.ResolveAfter(jobstore.Spec{AfterSpecs: []int{2}}, byKey, []string{"E0", "E1"})
	require.ErrorContains(t, err, "earlier spec")
}

// TestSettleFanInCostsLinear: the ends of a fan-in, in the order its jobs
// were named, cost about two look-ups each, not a walk from the start.
func TestSettleFanInCostsLinear(t *testing.T) {
	const n = 1000
	after := make([]string, n)
	m := make(map[string]jobstore.State, n)
	for i := range after {
		after[i] = fmt.Sprintf("J%04d", i)
		m[after[i]] = jobstore.StateRunning
	}
	j := waiting(after, true)
	s := &states{m: m}
	for i, id := range after {
		m[id] = jobstore.StateSucceeded
		got, changed, err := storekit.Settle(j, id, s.lookup, time.Now())
		require.NoError(t, err)
		require.Equal(t, i == n-1, changed)
		if changed {
			require.Equal(t, jobstore.StateQueued, got.State)
		}
	}
	require.LessOrEqual(t, s.calls, 3*n, "look-ups for %d ends", n)
}
