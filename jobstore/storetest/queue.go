package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// queueTests are the rules about Spec.Queue and ClaimRequest.Queues, which
// every store keeps.
var queueTests = []test{
	{"Default", testQueueDefault},
	{"Named", testQueueNamed},
	{"InvalidName", testQueueInvalid},
	{"ClaimTakesChosenQueues", testQueueClaim},
	{"ClaimBatchTakesChosenQueues", testQueueClaimBatch},
	{"ListFilter", testQueueList},
	{"Stats", testQueueStats},
	{"BatchAndImport", testQueueBatchImport},
}

// claimFrom claims the job of queue for worker "w" and checks that it is
// id.
func claimFrom(t *testing.T, s jobstore.Store, queue, id string) jobstore.Job {
	t.Helper()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{queue}})
	require.NoError(t, err)
	require.Equal(t, id, j.ID, "claimed the wrong job")
	return j
}

func testQueueDefault(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	require.Equal(t, jobstore.DefaultQueue, j.Queue, "a spec without a queue submits to the default queue")
	require.Equal(t, jobstore.DefaultQueue, get(t, s, j.ID).Queue)
	c := claim(t, s, "w")
	require.Equal(t, jobstore.DefaultQueue, c.Queue)
	done := complete(t, s, c, jobstore.Succeeded(nil))
	require.Equal(t, jobstore.DefaultQueue, done.Queue)
}

func testQueueNamed(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", Queue: "emails"})
	require.Equal(t, "emails", j.Queue)
	require.Equal(t, "emails", get(t, s, j.ID).Queue)
	c := claim(t, s, "w")
	require.Equal(t, "emails", c.Queue)
	done := complete(t, s, c, jobstore.Outcome{Error: "again"})
	require.Equal(t, "emails", done.Queue, "a job stays in its queue when it is queued again")
	require.Equal(t, jobstore.StateQueued, done.State)
}

func testQueueInvalid(t *testing.T, s jobstore.Store) {
	for _, q := range []string{"has space", "semi;colon", string(make([]byte, jobstore.MaxQueueLen+1))} {
		_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Queue: q})
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "queue %q", q)
		_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{q}})
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "claim of queue %q", q)
		_, err = s.List(t.Context(), jobstore.ListOptions{Queue: q})
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "list of queue %q", q)
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Counts[jobstore.StateQueued], "a refused submit queued nothing")
}

func testQueueClaim(t *testing.T, s jobstore.Store) {
	a := submit(t, s, jobstore.Spec{Kind: "x", Queue: "a", Priority: 5})
	b := submit(t, s, jobstore.Spec{Kind: "x", Queue: "b"})
	by := submit(t, s, jobstore.Spec{Kind: "y", Queue: "b"})
	d := submit(t, s, jobstore.Spec{Kind: "x"})

	got, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"b"}, Kinds: []string{"y"}})
	require.NoError(t, err)
	require.Equal(t, by.ID, got.ID, "kinds filter within the queues")
	got, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"b", jobstore.DefaultQueue}})
	require.NoError(t, err)
	require.Equal(t, b.ID, got.ID, "claim order within the queues taken: the oldest of equal priority")
	got, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"b", jobstore.DefaultQueue}})
	require.NoError(t, err)
	require.Equal(t, d.ID, got.ID)
	_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"b", "c"}})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	got = claim(t, s, "w") // no queues: every queue
	require.Equal(t, a.ID, got.ID)
}

func testQueueClaimBatch(t *testing.T, s jobstore.Store) {
	bc, ok := s.(jobstore.BatchClaimer)
	if !ok {
		t.Skip("the store is not a jobstore.BatchClaimer")
	}
	var want []string
	for i := range 6 {
		q := "even"
		if i%2 == 1 {
			q = "odd"
		}
		j := submit(t, s, jobstore.Spec{Kind: "k", Queue: q})
		if q == "odd" {
			want = append(want, j.ID)
		}
	}
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"odd"}}, 10)
	require.NoError(t, err)
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	require.Equal(t, want, got)
}

func testQueueList(t *testing.T, s jobstore.Store) {
	a := submit(t, s, jobstore.Spec{Kind: "k", Queue: "a"})
	submit(t, s, jobstore.Spec{Kind: "k", Queue: "b"})
	d := submitKind(t, s, "k")
	page, err := s.List(t.Context(), jobstore.ListOptions{Queue: "a"})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, a.ID, page.Jobs[0].ID)
	page, err = s.List(t.Context(), jobstore.ListOptions{Queue: jobstore.DefaultQueue, States: []jobstore.State{jobstore.StateQueued}})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, d.ID, page.Jobs[0].ID)
	page, err = s.List(t.Context(), jobstore.ListOptions{Queue: "none"})
	require.NoError(t, err)
	require.Empty(t, page.Jobs)
}

func testQueueStats(t *testing.T, s jobstore.Store) {
	submit(t, s, jobstore.Spec{Kind: "k", Queue: "a"})
	submit(t, s, jobstore.Spec{Kind: "k", Queue: "a"})
	submit(t, s, jobstore.Spec{Kind: "k", Queue: "b", RunAt: time.Now().Add(time.Hour)})
	d := submitKind(t, s, "k")
	claimFrom(t, s, jobstore.DefaultQueue, d.ID)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]map[jobstore.State]int{
		"a":                   {jobstore.StateQueued: 2},
		"b":                   {jobstore.StateQueued: 1},
		jobstore.DefaultQueue: {jobstore.StateRunning: 1},
	}, st.Queues)
	require.Contains(t, st.OldestQueuedByQueue, "a")
	require.NotContains(t, st.OldestQueuedByQueue, "b", "a job not yet due is not waiting")
}

func testQueueBatchImport(t *testing.T, s jobstore.Store) {
	res, err := s.SubmitBatch(t.Context(), []jobstore.Spec{{Kind: "k", Queue: "a"}, {Kind: "k"}})
	require.NoError(t, err)
	require.Equal(t, "a", res[0].Job.Queue)
	require.Equal(t, jobstore.DefaultQueue, res[1].Job.Queue)
	require.Equal(t, "a", get(t, s, res[0].Job.ID).Queue)
	_, err = s.SubmitBatch(t.Context(), []jobstore.Spec{{Kind: "k"}, {Kind: "k", Queue: "bad name"}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)

	im, ok := s.(jobstore.Importer)
	if !ok {
		return
	}
	now := time.Now().UTC()
	named := jobstore.NewJob(jobstore.Spec{Kind: "k", Queue: "imported"}, now)
	older := jobstore.NewJob(jobstore.Spec{Kind: "k"}, now)
	older.Queue = "" // as a store without queues exports it
	n, err := im.Import(t.Context(), []jobstore.Job{named, older})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, "imported", get(t, s, named.ID).Queue)
	require.Equal(t, jobstore.DefaultQueue, get(t, s, older.ID).Queue, "a job without a queue is imported into the default queue")
}
