package storetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// queueControlTests are the rules of jobstore.QueueController.
var queueControlTests = []test{
	{"ListsQueues", testQueuesList},
	{"PauseStopsClaims", testQueuesPause},
	{"PauseStopsClaimBatch", testQueuesPauseBatch},
	{"PauseKeepsRunningJobs", testQueuesPauseRunning},
	{"ResumeWakesAwaitWork", testQueuesResumeWakes},
	{"Idempotent", testQueuesIdempotent},
	{"InvalidName", testQueuesInvalid},
	{"AfterClose", testQueuesClose},
	{"LimitBoundsRunning", testQueuesLimit},
	{"LimitBoundsClaimBatch", testQueuesLimitBatch},
	{"LimitLowered", testQueuesLimitLowered},
	{"LimitFreedByReleaseAndCleared", testQueuesLimitReleaseClear},
	{"LimitFreeSlotWakesAwaitWork", testQueuesLimitWakes},
	{"LimitInvalid", testQueuesLimitInvalid},
	{"PauseStopsLimitedQueue", testQueuesPauseLimited},
	{"PartitionLimitBoundsEachPartition", testQueuesPartitionLimit},
	{"PartitionLimitWithQueueLimit", testQueuesPartitionAndQueueLimit},
	{"PartitionLimitBoundsClaimBatch", testQueuesPartitionLimitBatch},
	{"PartitionLimitKeepsClaimOrder", testQueuesPartitionLimitOrder},
	{"PartitionLimitLoweredAndCleared", testQueuesPartitionLimitLowered},
	{"PartitionLimitFreeSlotWakesAwaitWork", testQueuesPartitionLimitWakes},
	{"PartitionLimitInvalid", testQueuesPartitionLimitInvalid},
	{"RateBoundsStarts", testQueuesRate},
	{"RateBoundsClaimBatch", testQueuesRateBatch},
	{"RateWindowSlides", testQueuesRateSlides},
	{"RateLoweredAndCleared", testQueuesRateLowered},
	{"RateInvalid", testQueuesRateInvalid},
}

// limiter returns s as a QueueLimiter, or skips the test.
func limiter(t *testing.T, s jobstore.Store) jobstore.QueueLimiter {
	t.Helper()
	ql, ok := s.(jobstore.QueueLimiter)
	if !ok {
		t.Skip("the store is not a jobstore.QueueLimiter")
	}
	return ql
}

// submitN submits n jobs of kind k to queue and returns them.
func submitN(t *testing.T, s jobstore.Store, queue string, n int) []jobstore.Job {
	t.Helper()
	var jobs []jobstore.Job
	for range n {
		jobs = append(jobs, submit(t, s, jobstore.Spec{Kind: "k", Queue: queue}))
	}
	return jobs
}

// claimQueue claims a job of queue, failing the test if there is none.
func claimQueue(t *testing.T, s jobstore.Store, queue string) jobstore.Job {
	t.Helper()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{queue}})
	require.NoError(t, err, "claim of queue %s", queue)
	return j
}

// requireQueueFull checks that Claim finds no job of queue.
func requireQueueFull(t *testing.T, s jobstore.Store, queue string) {
	t.Helper()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{queue}})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "claimed %s of queue %s, which runs as many jobs as its limit allows", j.ID, queue)
}

// controller returns s as a QueueController, or skips the test.
func controller(t *testing.T, s jobstore.Store) jobstore.QueueController {
	t.Helper()
	qc, ok := s.(jobstore.QueueController)
	if !ok {
		t.Skip("the store is not a jobstore.QueueController")
	}
	return qc
}

// queueInfo returns the QueueInfo of queue, failing the test if it is not
// listed.
func queueInfo(t *testing.T, qc jobstore.QueueController, queue string) jobstore.QueueInfo {
	t.Helper()
	qs, err := qc.Queues(t.Context())
	require.NoError(t, err)
	for _, q := range qs {
		if q.Queue == queue {
			return q
		}
	}
	require.Failf(t, "queue not listed", "Queues does not list %q: %+v", queue, qs)
	return jobstore.QueueInfo{}
}

func testQueuesList(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	qs, err := qc.Queues(t.Context())
	require.NoError(t, err)
	require.Empty(t, qs, "a new store has no queues")
	submit(t, s, jobstore.Spec{Kind: "k", Queue: "b"})
	submit(t, s, jobstore.Spec{Kind: "k", Queue: "b"})
	r := submit(t, s, jobstore.Spec{Kind: "k", Queue: "a"})
	claimFrom(t, s, "a", r.ID)
	require.NoError(t, qc.PauseQueue(t.Context(), "c")) // settings, no jobs
	qs, err = qc.Queues(t.Context())
	require.NoError(t, err)
	require.Len(t, qs, 3)
	require.Equal(t, []string{"a", "b", "c"}, []string{qs[0].Queue, qs[1].Queue, qs[2].Queue}, "sorted by name")
	require.Equal(t, 1, qs[0].Running)
	require.Zero(t, qs[0].Queued)
	require.False(t, qs[0].Paused)
	require.Equal(t, 2, qs[1].Queued)
	require.False(t, qs[1].OldestDueAt.IsZero(), "b has due jobs")
	require.True(t, qs[2].Paused)
	require.Zero(t, qs[2].Queued+qs[2].Running)
}

func testQueuesPause(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	p := submit(t, s, jobstore.Spec{Kind: "k", Queue: "p", Priority: 10})
	o := submit(t, s, jobstore.Spec{Kind: "k", Queue: "o"})
	require.NoError(t, qc.PauseQueue(t.Context(), "p"))
	require.True(t, queueInfo(t, qc, "p").Paused)
	got := claim(t, s, "w")
	require.Equal(t, o.ID, got.ID, "a paused queue's jobs are passed over, whatever their priority")
	requireNoJob(t, s)
	_, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"p"}})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "naming a paused queue does not claim from it")
	// Submits are accepted while paused.
	p2 := submit(t, s, jobstore.Spec{Kind: "k", Queue: "p"})
	require.Equal(t, jobstore.StateQueued, get(t, s, p2.ID).State)

	require.NoError(t, qc.ResumeQueue(t.Context(), "p"))
	require.False(t, queueInfo(t, qc, "p").Paused)
	got = claimWhenDue(t, s, "w")
	require.Equal(t, p.ID, got.ID)
	got = claimWhenDue(t, s, "w")
	require.Equal(t, p2.ID, got.ID)
}

func testQueuesPauseBatch(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	bc, ok := s.(jobstore.BatchClaimer)
	if !ok {
		t.Skip("the store is not a jobstore.BatchClaimer")
	}
	for range 3 {
		submit(t, s, jobstore.Spec{Kind: "k", Queue: "p"})
	}
	o := submit(t, s, jobstore.Spec{Kind: "k"})
	require.NoError(t, qc.PauseQueue(t.Context(), "p"))
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, o.ID, jobs[0].ID)
	_, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
}

func testQueuesPauseRunning(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	j := submit(t, s, jobstore.Spec{Kind: "k", Queue: "p"})
	c := claimID(t, s, "w", j.ID)
	require.NoError(t, qc.PauseQueue(t.Context(), "p"))
	require.Equal(t, 1, queueInfo(t, qc, "p").Running)
	// The running job goes on: its worker completes it, and a failure
	// queues it again, to wait for the resume.
	done := complete(t, s, c, jobstore.Outcome{Error: "again"})
	require.Equal(t, jobstore.StateQueued, done.State)
	requireNoJob(t, s)
	require.NoError(t, qc.ResumeQueue(t.Context(), "p"))
	got := claimWhenDue(t, s, "w")
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, 2, got.Attempt)
}

func testQueuesResumeWakes(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	require.NoError(t, qc.PauseQueue(t.Context(), "p"))
	j := submit(t, s, jobstore.Spec{Kind: "k", Queue: "p"})
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w"); return err })
	w.requireBlocked(t) // a worker does not claim from a paused queue
	require.NoError(t, qc.ResumeQueue(t.Context(), "p"))
	require.NoError(t, w.result(t), "AwaitWork did not wake on resume")
	require.Equal(t, j.ID, got.ID)
}

func testQueuesIdempotent(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	require.NoError(t, qc.ResumeQueue(t.Context(), "never-paused"))
	require.NoError(t, qc.PauseQueue(t.Context(), "p"))
	require.NoError(t, qc.PauseQueue(t.Context(), "p"))
	require.True(t, queueInfo(t, qc, "p").Paused)
	require.NoError(t, qc.ResumeQueue(t.Context(), "p"))
	require.NoError(t, qc.ResumeQueue(t.Context(), "p"))
	qs, err := qc.Queues(t.Context())
	require.NoError(t, err)
	for _, q := range qs {
		require.False(t, q.Paused, "queue %s", q.Queue)
	}
}

func testQueuesInvalid(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	for _, q := range []string{"", "has space", string(make([]byte, jobstore.MaxQueueLen+1))} {
		require.ErrorIs(t, qc.PauseQueue(t.Context(), q), jobstore.ErrInvalidInput, "pause %q", q)
		require.ErrorIs(t, qc.ResumeQueue(t.Context(), q), jobstore.ErrInvalidInput, "resume %q", q)
	}
	qs, err := qc.Queues(t.Context())
	require.NoError(t, err)
	require.Empty(t, qs, "a refused change leaves no queue behind")
}

func testQueuesClose(t *testing.T, s jobstore.Store) {
	qc := controller(t, s)
	require.NoError(t, s.Close())
	_, err := qc.Queues(t.Context())
	require.ErrorIs(t, err, jobstore.ErrClosed)
	require.ErrorIs(t, qc.PauseQueue(t.Context(), "p"), jobstore.ErrClosed)
	require.ErrorIs(t, qc.ResumeQueue(t.Context(), "p"), jobstore.ErrClosed)
}

func testQueuesLimit(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 2))
	require.Equal(t, 2, queueInfo(t, ql, "q").Limit)
	jobs := submitN(t, s, "q", 4)
	other := submit(t, s, jobstore.Spec{Kind: "k", Queue: "other", Priority: -5})
	a := claim(t, s, "w")
	b := claim(t, s, "w")
	require.Equal(t, []string{jobs[0].ID, jobs[1].ID}, []string{a.ID, b.ID})
	got := claim(t, s, "w")
	require.Equal(t, other.ID, got.ID, "a full queue's jobs are passed over for other queues' jobs, whatever their priority")
	requireNoJob(t, s)
	requireQueueFull(t, s, "q")
	complete(t, s, a, jobstore.Succeeded(nil))
	c := claimQueue(t, s, "q")
	require.Equal(t, jobs[2].ID, c.ID, "a completion frees a slot")
	requireQueueFull(t, s, "q")
	info := queueInfo(t, ql, "q")
	require.Equal(t, 2, info.Running)
	require.Equal(t, 1, info.Queued)
}

func testQueuesLimitBatch(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	bc, ok := s.(jobstore.BatchClaimer)
	if !ok {
		t.Skip("the store is not a jobstore.BatchClaimer")
	}
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 3))
	submitN(t, s, "q", 6)
	submitN(t, s, "other", 2)
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
	require.NoError(t, err)
	byQueue := map[string]int{}
	for _, j := range jobs {
		byQueue[j.Queue]++
	}
	require.Equal(t, map[string]int{"q": 3, "other": 2}, byQueue)
	_, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
}

func testQueuesLimitLowered(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 3))
	submitN(t, s, "q", 5)
	running := []jobstore.Job{claimQueue(t, s, "q"), claimQueue(t, s, "q"), claimQueue(t, s, "q")}
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 1))
	// The three running jobs go on; none starts until fewer than one run.
	complete(t, s, running[0], jobstore.Succeeded(nil))
	requireQueueFull(t, s, "q")
	complete(t, s, running[1], jobstore.Succeeded(nil))
	requireQueueFull(t, s, "q")
	complete(t, s, running[2], jobstore.Succeeded(nil))
	next := claimQueue(t, s, "q")
	requireQueueFull(t, s, "q")
	complete(t, s, next, jobstore.Succeeded(nil))
	claimQueue(t, s, "q")
}

func testQueuesLimitReleaseClear(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 1))
	submitN(t, s, "q", 3)
	a := claimQueue(t, s, "q")
	requireQueueFull(t, s, "q")
	require.NoError(t, s.Release(t.Context(), a.Lease()))
	again := claimQueue(t, s, "q") // a released attempt frees its slot
	requireQueueFull(t, s, "q")
	// A failed attempt queued again for a retry frees it too.
	complete(t, s, again, jobstore.Outcome{Error: "again", RetryAfter: time.Hour})
	b := claimQueue(t, s, "q")
	require.NotEqual(t, again.ID, b.ID)
	requireQueueFull(t, s, "q")
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 0))
	require.Zero(t, queueInfo(t, ql, "q").Limit)
	claimQueue(t, s, "q") // a cleared limit bounds nothing
	require.Equal(t, 2, queueInfo(t, ql, "q").Running)
}

func testQueuesLimitWakes(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 1))
	jobs := submitN(t, s, "q", 2)
	first := claimQueue(t, s, "q")
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w2"); return err })
	w.requireBlocked(t)
	complete(t, s, first, jobstore.Succeeded(nil))
	require.NoError(t, w.result(t), "AwaitWork did not wake when a slot freed")
	require.Equal(t, jobs[1].ID, got.ID)
}

func testQueuesLimitInvalid(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 2))
	for _, n := range []int{-1, jobstore.MaxQueueLimit + 1} {
		require.ErrorIs(t, ql.SetQueueLimit(t.Context(), "q", n), jobstore.ErrInvalidInput, "limit %d", n)
	}
	require.ErrorIs(t, ql.SetQueueLimit(t.Context(), "bad name", 1), jobstore.ErrInvalidInput)
	require.Equal(t, 2, queueInfo(t, ql, "q").Limit, "a refused change changes nothing")
	qs, err := ql.Queues(t.Context())
	require.NoError(t, err)
	require.Len(t, qs, 1)
}

func testQueuesPauseLimited(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 2))
	require.NoError(t, ql.SetQueueRate(t.Context(), "r", jobstore.Rate{N: 5, Per: time.Hour}))
	jobs := submitN(t, s, "q", 2)
	rated := submitN(t, s, "r", 1)
	require.NoError(t, ql.PauseQueue(t.Context(), "q"))
	require.NoError(t, ql.PauseQueue(t.Context(), "r"))
	requireNoJob(t, s) // paused, whatever the limit or the rate
	requireQueueFull(t, s, "q")
	if bc, ok := s.(jobstore.BatchClaimer); ok {
		_, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
		require.ErrorIs(t, err, jobstore.ErrNoJob)
	}
	require.NoError(t, ql.ResumeQueue(t.Context(), "q"))
	require.NoError(t, ql.ResumeQueue(t.Context(), "r"))
	got := []string{claim(t, s, "w").ID, claim(t, s, "w").ID, claim(t, s, "w").ID}
	require.ElementsMatch(t, []string{jobs[0].ID, jobs[1].ID, rated[0].ID}, got)
	info := queueInfo(t, ql, "q")
	require.False(t, info.Paused)
	require.Equal(t, 2, info.Limit, "a pause and a resume leave the limit as it was")
}

// submitParts submits, in this order, a job of queue for each partition
// named in parts ("" for none), and returns them.
func submitParts(t *testing.T, s jobstore.Store, queue string, parts ...string) []jobstore.Job {
	t.Helper()
	var jobs []jobstore.Job
	for _, p := range parts {
		jobs = append(jobs, submit(t, s, jobstore.Spec{Kind: "k", Queue: queue, Partition: p}))
	}
	return jobs
}

func testQueuesPartitionLimit(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 1))
	info := queueInfo(t, ql, "q")
	require.Equal(t, 1, info.PerPartition)
	require.Zero(t, info.Limit, "a per-partition limit leaves the queue's own limit alone")
	jobs := submitParts(t, s, "q", "a", "a", "b", "", "")
	require.Equal(t, "a", jobs[0].Partition)
	a := claimQueue(t, s, "q")
	require.Equal(t, jobs[0].ID, a.ID)
	require.Equal(t, "a", a.Partition)
	got := []string{claimQueue(t, s, "q").ID, claimQueue(t, s, "q").ID, claimQueue(t, s, "q").ID}
	require.Equal(t, []string{jobs[2].ID, jobs[3].ID, jobs[4].ID}, got,
		"the second job of partition a is passed over for the jobs after it, of another partition or of none")
	requireQueueFull(t, s, "q")
	complete(t, s, a, jobstore.Succeeded(nil))
	next := claimQueue(t, s, "q")
	require.Equal(t, jobs[1].ID, next.ID, "the end of the partition's job frees its slot")
	require.Equal(t, "a", get(t, s, next.ID).Partition)
}

func testQueuesPartitionAndQueueLimit(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueLimit(t.Context(), "q", 2))
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 1))
	info := queueInfo(t, ql, "q")
	require.Equal(t, 2, info.Limit)
	require.Equal(t, 1, info.PerPartition)
	jobs := submitParts(t, s, "q", "a", "a", "b", "c")
	first := claimQueue(t, s, "q")
	second := claimQueue(t, s, "q")
	require.Equal(t, []string{jobs[0].ID, jobs[2].ID}, []string{first.ID, second.ID})
	requireQueueFull(t, s, "q") // c has room, the queue has not
	complete(t, s, second, jobstore.Succeeded(nil))
	require.Equal(t, jobs[3].ID, claimQueue(t, s, "q").ID, "a has no room, c has")
	requireQueueFull(t, s, "q")
	complete(t, s, first, jobstore.Succeeded(nil))
	require.Equal(t, jobs[1].ID, claimQueue(t, s, "q").ID)
}

func testQueuesPartitionLimitBatch(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	bc, ok := s.(jobstore.BatchClaimer)
	if !ok {
		t.Skip("the store is not a jobstore.BatchClaimer")
	}
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 2))
	submitParts(t, s, "q", "a", "b", "c", "a", "b", "c", "a", "b", "c")
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 20)
	require.NoError(t, err)
	byPart := map[string]int{}
	for _, j := range jobs {
		byPart[j.Partition]++
	}
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, byPart)
	_, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 20)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
}

func testQueuesPartitionLimitOrder(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 1))
	bc, batch := s.(jobstore.BatchClaimer)
	// Many rounds: a store that claims a batch's jobs side by side must
	// not let a partition's second job take its place from the first.
	for round := range 30 {
		p := "p" + strconv.Itoa(round)
		jobs := submitParts(t, s, "q", p, p, p)
		var got []jobstore.Job
		if batch {
			var err error
			got, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 3)
			require.NoError(t, err)
		} else {
			got = []jobstore.Job{claimQueue(t, s, "q")}
		}
		require.Len(t, got, 1, "round %d: one job of the partition at a time", round)
		require.Equal(t, jobs[0].ID, got[0].ID, "round %d: the partition's first job in claim order", round)
		complete(t, s, got[0], jobstore.Succeeded(nil))
		second := claimQueue(t, s, "q")
		require.Equal(t, jobs[1].ID, second.ID, "round %d", round)
		complete(t, s, second, jobstore.Succeeded(nil))
		complete(t, s, claimQueue(t, s, "q"), jobstore.Succeeded(nil))
	}
}

func testQueuesPartitionLimitLowered(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 2))
	submitParts(t, s, "q", "a", "a", "a", "a")
	running := []jobstore.Job{claimQueue(t, s, "q"), claimQueue(t, s, "q")}
	requireQueueFull(t, s, "q")
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 1))
	complete(t, s, running[0], jobstore.Succeeded(nil))
	requireQueueFull(t, s, "q") // one runs: as many as the new limit
	// A released attempt frees its slot too.
	require.NoError(t, s.Release(t.Context(), running[1].Lease()))
	next := claimQueue(t, s, "q")
	requireQueueFull(t, s, "q")
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 0))
	require.Zero(t, queueInfo(t, ql, "q").PerPartition)
	claimQueue(t, s, "q") // a cleared limit bounds nothing
	require.Equal(t, 2, queueInfo(t, ql, "q").Running)
	complete(t, s, next, jobstore.Succeeded(nil))
}

func testQueuesPartitionLimitWakes(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 1))
	jobs := submitParts(t, s, "q", "a", "a")
	first := claimQueue(t, s, "q")
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got jobstore.Job
	w := start(func() (err error) { got, err = awaitAndClaim(ctx, s, "w2"); return err })
	w.requireBlocked(t)
	complete(t, s, first, jobstore.Succeeded(nil))
	require.NoError(t, w.result(t), "AwaitWork did not wake when a partition's slot freed")
	require.Equal(t, jobs[1].ID, got.ID)
}

func testQueuesPartitionLimitInvalid(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetPartitionLimit(t.Context(), "q", 2))
	for _, n := range []int{-1, jobstore.MaxQueueLimit + 1} {
		require.ErrorIs(t, ql.SetPartitionLimit(t.Context(), "q", n), jobstore.ErrInvalidInput, "limit %d", n)
	}
	require.ErrorIs(t, ql.SetPartitionLimit(t.Context(), "bad name", 1), jobstore.ErrInvalidInput)
	require.Equal(t, 2, queueInfo(t, ql, "q").PerPartition, "a refused change changes nothing")
}

func testQueuesRate(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	rate := jobstore.Rate{N: 2, Per: time.Hour}
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", rate))
	info := queueInfo(t, ql, "q")
	require.Equal(t, rate, info.Rate)
	require.Zero(t, info.Limit, "a rate leaves the limits alone")
	jobs := submitN(t, s, "q", 3)
	other := submit(t, s, jobstore.Spec{Kind: "k", Queue: "other", Priority: -5})
	a := claim(t, s, "w")
	b := claim(t, s, "w")
	require.Equal(t, []string{jobs[0].ID, jobs[1].ID}, []string{a.ID, b.ID})
	require.Equal(t, other.ID, claim(t, s, "w").ID, "a queue whose window is full is passed over for other queues' jobs")
	complete(t, s, a, jobstore.Succeeded(nil))
	nj := requireNoJob(t, s)
	require.NotNil(t, nj)
	// The window has room again when the first start leaves it.
	want := a.StartedAt.Add(time.Hour)
	require.WithinDuration(t, want, nj.NextRunAt, 50*time.Millisecond,
		"NextRunAt says when the next start is allowed: %s, want %s", nj.NextRunAt, want)
	require.Equal(t, 1, queueInfo(t, ql, "q").Queued, "an ended attempt still counts: a rate counts starts")
}

func testQueuesRateBatch(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	bc, ok := s.(jobstore.BatchClaimer)
	if !ok {
		t.Skip("the store is not a jobstore.BatchClaimer")
	}
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", jobstore.Rate{N: 3, Per: time.Hour}))
	submitN(t, s, "q", 6)
	submitN(t, s, "other", 2)
	jobs, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
	require.NoError(t, err)
	byQueue := map[string]int{}
	for _, j := range jobs {
		byQueue[j.Queue]++
	}
	require.Equal(t, map[string]int{"q": 3, "other": 2}, byQueue)
	_, err = bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 10)
	var nj *jobstore.NoJobError
	require.ErrorAs(t, err, &nj)
	require.False(t, nj.NextRunAt.IsZero(), "the batch says when the next start is allowed")
}

func testQueuesRateSlides(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	const per = 300 * time.Millisecond
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", jobstore.Rate{N: 2, Per: per}))
	jobs := submitN(t, s, "q", 3)
	first := claimQueue(t, s, "q")
	claimQueue(t, s, "q")
	nj := requireNoJob(t, s)
	require.NotNil(t, nj)
	// A worker that waits for work is woken when the window has room, and
	// its claim then starts the third job, no sooner than that.
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	got, err := awaitAndClaim(ctx, s, "w2")
	require.NoError(t, err, "AwaitWork did not wake when the window had room")
	require.Equal(t, jobs[2].ID, got.ID)
	require.False(t, got.StartedAt.Before(first.StartedAt.Add(per)), "started %s after the first, within its window of %s", got.StartedAt.Sub(first.StartedAt), per)
}

func testQueuesRateLowered(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", jobstore.Rate{N: 3, Per: time.Hour}))
	submitN(t, s, "q", 4)
	claimQueue(t, s, "q")
	claimQueue(t, s, "q")
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", jobstore.Rate{N: 1, Per: time.Hour}))
	requireQueueFull(t, s, "q") // two starts in the window: more than the new rate
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", jobstore.Rate{N: 3, Per: time.Hour}))
	claimQueue(t, s, "q")
	requireQueueFull(t, s, "q")
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", jobstore.Rate{}))
	require.True(t, queueInfo(t, ql, "q").Rate.IsZero())
	claimQueue(t, s, "q") // a cleared rate bounds nothing
}

func testQueuesRateInvalid(t *testing.T, s jobstore.Store) {
	ql := limiter(t, s)
	rate := jobstore.Rate{N: 5, Per: time.Minute}
	require.NoError(t, ql.SetQueueRate(t.Context(), "q", rate))
	for _, bad := range []jobstore.Rate{{N: 0, Per: time.Second}, {N: 1}, {N: -1, Per: time.Second}, {N: 1, Per: -time.Second},
		{N: 1, Per: 25 * time.Hour}, {N: jobstore.MaxRateStarts + 1, Per: time.Second}, {N: 1, Per: time.Microsecond}} {
		require.ErrorIs(t, ql.SetQueueRate(t.Context(), "q", bad), jobstore.ErrInvalidInput, "rate %+v", bad)
	}
	require.ErrorIs(t, ql.SetQueueRate(t.Context(), "bad name", rate), jobstore.ErrInvalidInput)
	require.Equal(t, rate, queueInfo(t, ql, "q").Rate, "a refused change changes nothing")
}
