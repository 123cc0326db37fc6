package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var claimTests = []test{
	{"Fields", testClaimFields},
	{"NoJob", testClaimNoJob},
	{"Order", testClaimOrder},
	{"DelayedNotClaimableUntilDue", testClaimDelayed},
	{"Kinds", testClaimKinds},
	{"NextRunAtAcrossPriorities", testClaimNextAcrossPriorities},
	{"RunningNotClaimedAgain", testClaimRunning},
}

func testClaimFields(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`{"n":1}`)})
	before := time.Now()
	c := claim(t, s, "worker-1")
	after := time.Now()
	require.Equal(t, j.ID, c.ID)
	require.Equal(t, 1, c.Attempt)
	require.Equal(t, "worker-1", c.Worker)
	require.WithinRange(t, c.StartedAt, before.Add(-time.Millisecond), after.Add(time.Millisecond))
	require.False(t, c.CancelRequested)
	require.JSONEq(t, `{"n":1}`, string(c.Payload))
	require.Equal(t, jobstore.Lease{ID: j.ID, Worker: "worker-1", Attempt: 1}, c.Lease())
	requireSameJob(t, c, get(t, s, j.ID))
}

func testClaimNoJob(t *testing.T, s jobstore.Store) {
	nj := requireNoJob(t, s)
	if nj != nil {
		require.True(t, nj.NextRunAt.IsZero(), "empty store reports a next run at %s", nj.NextRunAt)
	}
}

func testClaimOrder(t *testing.T, s jobstore.Store) {
	// The RunAts must still lie in the future once all six submits have
	// returned (a past RunAt is clamped to the submit time, which would
	// change the order). On a slow machine, try again with a wider margin
	// and a kind of its own, so the earlier round's jobs do not interfere.
	for round, margin := 0, 300*time.Millisecond; ; round, margin = round+1, margin*3 {
		kind := fmt.Sprintf("order-%d", round)
		t0 := time.Now().Add(margin).Truncate(time.Millisecond)
		later := t0.Add(100 * time.Millisecond)
		spec := func(prio int, runAt time.Time) jobstore.Spec {
			return jobstore.Spec{Kind: kind, Priority: prio, RunAt: runAt}
		}
		// Submitted oldest first; the claim order below differs from it.
		a := submit(t, s, spec(0, later)) // older but due later
		b := submit(t, s, spec(0, t0))    // same RunAt as c: FIFO
		c := submit(t, s, spec(0, t0))
		d := submit(t, s, spec(5, later)) // newest, but highest priority
		e := submit(t, s, spec(-1, t0))   // earliest, but lowest priority
		f := submit(t, s, spec(5, t0))    // highest priority and earlier than d
		if !time.Now().Before(t0) {
			require.Less(t, round, 3, "six submits took longer than %s", margin)
			continue
		}

		time.Sleep(time.Until(later) + 5*time.Millisecond)
		want := []jobstore.Job{f, d, b, c, a, e}
		for i, w := range want {
			got := claim(t, s, "w", kind)
			require.Equal(t, w.ID, got.ID, "claim %d: want priority %d run_at %s, got priority %d run_at %s",
				i, w.Priority, w.RunAt.Format(time.StampMilli), got.Priority, got.RunAt.Format(time.StampMilli))
		}
		requireNoJob(t, s, kind)
		return
	}
}

func testClaimDelayed(t *testing.T, s jobstore.Store) {
	// A loaded machine may spend the delay on the submits themselves; then
	// the round proves nothing and runs again with a longer delay, and a
	// kind of its own so that the earlier round's jobs stay out of it.
	for round, delay := range []time.Duration{200 * time.Millisecond, time.Second, 5 * time.Second} {
		kind := fmt.Sprintf("delayed-%d", round)
		runAt := time.Now().Add(delay).Truncate(time.Millisecond)
		j := submit(t, s, jobstore.Spec{Kind: kind, RunAt: runAt})
		far := submit(t, s, jobstore.Spec{Kind: kind, RunAt: runAt.Add(time.Hour)})

		got, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "checker", Kinds: []string{kind}})
		if err == nil && !time.Now().Before(runAt) {
			require.Less(t, round, 2, "two submits and a claim took longer than %s", delay)
			continue
		}
		require.ErrorIs(t, err, jobstore.ErrNoJob, "Claim handed out job %s (%s) before its RunAt", got.ID, got.State)
		var nj *jobstore.NoJobError
		require.ErrorAs(t, err, &nj, "Claim must return a *jobstore.NoJobError when a job is queued for later")
		require.True(t, nj.NextRunAt.Equal(runAt), "NextRunAt %s, want %s", nj.NextRunAt, runAt)

		c := claimWhenDue(t, s, "w", kind)
		require.False(t, time.Now().Before(runAt), "claimed before its RunAt")
		require.Equal(t, j.ID, c.ID)

		nj = requireNoJob(t, s, kind)
		require.NotNil(t, nj)
		require.True(t, nj.NextRunAt.Equal(far.RunAt), "NextRunAt %s, want %s", nj.NextRunAt, far.RunAt)
		return
	}
}

// testClaimNextAcrossPriorities: NextRunAt is the earliest RunAt of the
// queued jobs whatever their priority, with kinds and without, and Stats'
// OldestQueuedAt the earliest RunAt of the due ones, and
// OldestQueuedByKind each kind's.
func testClaimNextAcrossPriorities(t *testing.T, s jobstore.Store) {
	now := time.Now().Truncate(time.Millisecond)
	in := func(d time.Duration) time.Time { return now.Add(time.Hour + d) }
	for _, spec := range []jobstore.Spec{
		{Kind: "k0", Priority: 5, RunAt: in(3 * time.Minute)},
		{Kind: "k0", Priority: 1000, RunAt: in(2 * time.Minute)},
		{Kind: "k0", Priority: -3, RunAt: in(time.Minute)}, // k0's earliest, in the middle
		{Kind: "k0", Priority: -1000, RunAt: in(4 * time.Minute)},
		{Kind: "k1", Priority: 1000, RunAt: in(6 * time.Minute)},
		{Kind: "k1", Priority: -1000, RunAt: in(5 * time.Minute)}, // k1's earliest, the lowest
	} {
		submit(t, s, spec)
	}
	for _, tc := range []struct {
		kinds []string
		want  time.Time
	}{
		{nil, in(time.Minute)},
		{[]string{"k0"}, in(time.Minute)},
		{[]string{"k1", "x"}, in(5 * time.Minute)},
	} {
		nj := requireNoJob(t, s, tc.kinds...)
		require.True(t, nj.NextRunAt.Equal(tc.want), "kinds %v: NextRunAt %s, want %s", tc.kinds, nj.NextRunAt, tc.want)
	}

	// Due jobs (a RunAt in the past is the submit's time): the oldest is
	// a low priority's.
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, st.OldestQueuedAt.IsZero(), "no job is due, yet OldestQueuedAt is %s", st.OldestQueuedAt)
	require.Empty(t, st.OldestQueuedByKind, "no job is due")
	oldest := submit(t, s, jobstore.Spec{Kind: "due", Priority: -7})
	time.Sleep(2 * time.Millisecond)
	submit(t, s, jobstore.Spec{Kind: "due", Priority: 7})
	other := submit(t, s, jobstore.Spec{Kind: "due2", Priority: 9})
	submit(t, s, jobstore.Spec{Kind: "due", Priority: 0})
	st, err = s.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, st.OldestQueuedAt.Equal(oldest.RunAt), "OldestQueuedAt %s, want %s", st.OldestQueuedAt, oldest.RunAt)
	// And each kind's: only the kinds with a due job (k0 and k1 wait).
	require.Len(t, st.OldestQueuedByKind, 2, "%v", st.OldestQueuedByKind)
	require.True(t, st.OldestQueuedByKind["due"].Equal(oldest.RunAt), "due: %s, want %s", st.OldestQueuedByKind["due"], oldest.RunAt)
	require.True(t, st.OldestQueuedByKind["due2"].Equal(other.RunAt), "due2: %s, want %s", st.OldestQueuedByKind["due2"], other.RunAt)
}

func testClaimKinds(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	b := submitKind(t, s, "b")
	later := submit(t, s, jobstore.Spec{Kind: "c", RunAt: time.Now().Add(time.Hour).Truncate(time.Millisecond)})

	got := claim(t, s, "w", "b")
	require.Equal(t, b.ID, got.ID, "Kinds [b] claimed a job of kind %s", got.Kind)

	nj := requireNoJob(t, s, "b", "x")
	if nj != nil {
		require.True(t, nj.NextRunAt.IsZero(), "no job of the accepted kinds is queued")
	}
	nj = requireNoJob(t, s, "c")
	require.NotNil(t, nj)
	require.True(t, nj.NextRunAt.Equal(later.RunAt), "NextRunAt %s, want %s", nj.NextRunAt, later.RunAt)

	got = claim(t, s, "w", "x", "a")
	require.Equal(t, a.ID, got.ID)
	submitKind(t, s, "d")
	got = claim(t, s, "w") // no kinds: any kind
	require.Equal(t, "d", got.Kind)
}

func testClaimRunning(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	claimID(t, s, "w1", j.ID)
	requireNoJob(t, s)
	require.Equal(t, "w1", get(t, s, j.ID).Worker)
}
