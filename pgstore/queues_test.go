package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/internal/queuetest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestProcessesPauseAndResume: with jobs of a queue submitted all along,
// and two other processes claiming them, no job of the queue starts (its
// started_at, the claim's time) after PauseQueue returned in this process,
// while another queue's jobs go on starting; after ResumeQueue, the
// workers, which wait for work, start the queue's jobs again, woken by the
// notification of the resume. It logs how soon after the resume returned
// the first one started.
func TestProcessesPauseAndResume(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	var children []*testproc.Proc
	for range 2 {
		c := startChild(t, schema, "claim-starts")
		require.Equal(t, "ready", c.Next(t))
		children = append(children, c)
	}
	queuetest.PauseAndResume(t, s, children)
}

// TestProcessesQueueLimit: four worker processes of eight slots each work
// off the jobs of a queue limited to 3, and one is SIGKILLed while it runs
// jobs: at no instant do more than 3 run, and 3 do (queuetest.QueueLimit).
func TestProcessesQueueLimit(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 50 * time.Millisecond, LeaseGrace: 50 * time.Millisecond})
	queuetest.QueueLimit(t, s, func() []*testproc.Proc { return startLimitWorkers(t, schema) })
}

// TestProcessesPartitionLimit: four worker processes of eight slots each
// work off 5 jobs of each of 20 partitions of a queue whose per-partition
// limit is 1, and one is SIGKILLed while it runs jobs: no two jobs of a
// partition ran at once, each partition's jobs started in claim order,
// and partitions ran in parallel (queuetest.PartitionLimit).
func TestProcessesPartitionLimit(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 50 * time.Millisecond, LeaseGrace: 50 * time.Millisecond})
	queuetest.PartitionLimit(t, s, func() []*testproc.Proc { return startLimitWorkers(t, schema) })
}

// TestProcessesQueueRate: four worker processes of eight slots each take
// the jobs of a queue whose rate is 20 a second for five seconds: no
// window of a second holds more than 20 starts, and one holds 20
// (queuetest.QueueRate).
func TestProcessesQueueRate(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	queuetest.QueueRate(t, s, func() []*testproc.Proc { return startLimitWorkers(t, schema) })
}

// startLimitWorkers starts four limit-worker children on the schema
// (queuetest.LimitWorker) and waits until they are ready.
func startLimitWorkers(t *testing.T, schema string) []*testproc.Proc {
	t.Helper()
	var workers []*testproc.Proc
	for range 4 {
		c := startChild(t, schema, "limit-worker")
		require.Equal(t, "ready", c.Next(t))
		workers = append(workers, c)
	}
	return workers
}

// TestLimitsOfAnotherStoreHoldAtOnce: a limit set, lowered or cleared
// through one store (another process's, with a pool of its own) holds for
// the claims of another store from the moment it returns, though that
// store has not read the settings since: its claims never pass the
// limit, and they take the queue's jobs again once it is cleared.
func TestLimitsOfAnotherStoreHoldAtOnce(t *testing.T) {
	schema := pgtest.Schema(t)
	ctx := t.Context()
	// No refresh of the settings but what the claims do.
	a := openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	b := openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	var ids []string
	for range 4 {
		j, _, err := a.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "q"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	claim := func() (jobstore.Job, error) { return a.Claim(ctx, jobstore.ClaimRequest{Worker: "w"}) }
	first, err := claim()
	require.NoError(t, err)
	require.Equal(t, ids[0], first.ID)

	require.NoError(t, b.SetQueueLimit(ctx, "q", 2))
	second, err := claim()
	require.NoError(t, err, "the limit has room for one more")
	require.Equal(t, ids[1], second.ID)
	_, err = claim()
	require.ErrorIs(t, err, jobstore.ErrNoJob, "two run: as many as the limit set in the other store")

	require.NoError(t, b.SetQueueLimit(ctx, "q", 1))
	_, err = a.Complete(ctx, first.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	_, err = claim()
	require.ErrorIs(t, err, jobstore.ErrNoJob, "one runs: as many as the lowered limit")

	require.NoError(t, b.SetQueueLimit(ctx, "q", 0))
	for _, id := range ids[2:] {
		got, err := claim()
		require.NoError(t, err, "a cleared limit bounds nothing")
		require.Equal(t, id, got.ID)
	}
}

// TestStoppedWorkerKeepsItsSlots: a worker that is stopped (SIGSTOP) while
// it runs a job of a limited partition keeps the job's place as it keeps
// its lease: no other process starts the partition's next job while its
// lease session lives, though the queue has room, and another partition's
// job runs. Once the session expires (LeaseTTL, as for a worker cut off
// from the database), the job is recovered, and its place with it.
func TestStoppedWorkerKeepsItsSlots(t *testing.T) {
	schema := pgtest.Schema(t)
	// The stopped worker's session lives until LeaseTTL after its last
	// renewal, which came at most LeaseTTL/4 before the stop: checking
	// for a quarter of it leaves half of it to a loaded machine.
	const ttl = 4 * time.Second
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 50 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, s.SetQueueLimit(ctx, "q", 3))
	require.NoError(t, s.SetPartitionLimit(ctx, "q", 1))
	spec := jobstore.Spec{Kind: "work", Queue: "q", Partition: "customer-1"}
	first, _, err := s.Submit(ctx, spec)
	require.NoError(t, err)
	next, _, err := s.Submit(ctx, spec)
	require.NoError(t, err)
	c := startChild(t, schema, "hold", childTTL+"="+ttl.String())
	require.Equal(t, "claimed "+first.ID+" 1", c.Next(t))
	require.NoError(t, c.Stop(ctx))
	stopped := time.Now()
	req := jobstore.ClaimRequest{Worker: "w", Queues: []string{"q"}}
	other, _, err := s.Submit(ctx, jobstore.Spec{Kind: "work", Queue: "q", Partition: "customer-2"})
	require.NoError(t, err)
	got, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, other.ID, got.ID, "another partition's job runs")
	_, err = s.Complete(ctx, got.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	for time.Since(stopped) < ttl/4 { // many recovery passes
		_, err := s.Claim(ctx, req)
		require.ErrorIs(t, err, jobstore.ErrNoJob, "a place of a stopped worker was taken from it within its lease")
		time.Sleep(50 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		_, err := s.Claim(ctx, req)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the place is free once the stopped worker's lease expired")
	t.Logf("a place held %s after the stop (LeaseTTL %s)", time.Since(stopped).Round(time.Millisecond), ttl)
	j, err := s.Get(ctx, first.ID)
	require.NoError(t, err)
	require.True(t, j.State == jobstore.StateQueued || j.Worker == "w", "the stopped worker's attempt was recovered: %s by %s", j.State, j.Worker)
	_, err = s.Claim(ctx, req)
	require.ErrorIs(t, err, jobstore.ErrNoJob, "one job of the partition at a time: of %s and %s, one waits", first.ID, next.ID)
}

// TestSetLimitWaitsForClaimsInFlight: a change of a limit waits for the
// writes of jobs in flight when it committed (an open transaction that
// holds the jobs table for writing stands for a claim that read the old
// settings), so that once it returns, every job such a claim started is
// counted by the claims that follow; meanwhile the new limit holds, and
// nothing waits for the change: a claim and the list of queues answer.
func TestSetLimitWaitsForClaimsInFlight(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	ctx := t.Context()
	pool := pgtest.Pool(t, 2)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE `+schema+`.jobs SET version = version WHERE false`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.SetQueueLimit(ctx, "q", 1) }()
	require.Eventually(t, func() bool {
		var limit int
		err := pool.QueryRow(ctx, `SELECT coalesce(max(queue_limit), 0) FROM `+schema+`.queues WHERE name = 'q'`).Scan(&limit)
		return err == nil && limit == 1
	}, 10*time.Second, 5*time.Millisecond, "the limit was committed")
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "a claim does not wait for the change")
	require.Equal(t, 1, queueLimit(t, s, "q"))
	select {
	case err := <-done:
		require.Failf(t, "the change returned while a write of jobs was in flight", "err %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.Fail(t, "the change did not return once the write in flight ended")
	}
}

// TestSetLimitCtxEndsWhileWaiting: a change of a limit whose ctx ends
// while it waits for a write of jobs in flight returns the ctx's error,
// saying that the setting holds, and it does: the store lists it.
func TestSetLimitCtxEndsWhileWaiting(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	ctx := t.Context()
	tx, err := pgtest.Pool(t, 1).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE `+schema+`.jobs SET version = version WHERE false`)
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = s.SetQueueLimit(sctx, "q", 2)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "the setting holds")
	require.Equal(t, 2, queueLimit(t, s, "q"))
}

// queueLimit returns the limit of queue as s lists it.
func queueLimit(t *testing.T, s *pgstore.Store, queue string) int {
	t.Helper()
	qs, err := s.Queues(t.Context())
	require.NoError(t, err)
	for _, q := range qs {
		if q.Queue == queue {
			return q.Limit
		}
	}
	return 0
}

// TestOpenUpgradesToQueues: a schema of version 5, the release before
// queues, holding jobs written by that program, is upgraded by Open: its
// jobs are in the default queue, counted by queue, claimable by a worker
// of that queue, and a pause holds for them.
func TestOpenUpgradesToQueues(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	require.NoError(t, pgstore.MigrateTo(ctx, pool, schema, 5))
	_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs
		(id, kind, state, priority, run_at, attempt, updated_at, doc)
		SELECT lpad(i::text, 26, '0'), 'old', 'queued', 0, now(), 0, now(),
			convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8')
		FROM generate_series(1, 3) i`)
	require.NoError(t, err)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	defer s.Close()
	requireStatsExact(t, s, pool, "the upgrade")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]map[jobstore.State]int{jobstore.DefaultQueue: {jobstore.StateQueued: 3}}, st.Queues)
	j, err := s.Get(ctx, strings.Repeat("0", 25)+"1")
	require.NoError(t, err)
	require.Equal(t, jobstore.DefaultQueue, j.Queue)

	require.NoError(t, s.PauseQueue(ctx, jobstore.DefaultQueue))
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	require.NoError(t, s.ResumeQueue(ctx, jobstore.DefaultQueue))
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Queues: []string{jobstore.DefaultQueue}})
	require.NoError(t, err)
	require.Equal(t, jobstore.DefaultQueue, c.Queue)
	requireStatsExact(t, s, pool, "a claim after the upgrade")
}

// TestOpenUpgradesToLimits: a schema of version 6, the release before
// limits, holding jobs with partitions (kept in their doc column then), is
// upgraded by Open: a per-partition limit set after the upgrade counts the
// running job's partition, so the queued job of that partition waits and
// the other partition's job runs; a failed job of the full partition
// (its error holding a NUL, which jsonb refuses), retried, waits too, and so does one inserted afterwards by a process of
// the release before (without the column). A job whose doc does not
// decode does not stop the upgrade.
func TestOpenUpgradesToLimits(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	require.NoError(t, pgstore.MigrateTo(ctx, pool, schema, 6))
	doc := func(partition string) string {
		return `convert_to('{"partition":"` + partition + `","max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8')`
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs
		(id, kind, state, priority, run_at, attempt, worker, started_at, finished_at, updated_at, doc)
		VALUES
		('01000000000000000000000001', 'old', 'running', 0, now(), 1, 'w0', now(), NULL, now(), `+doc("a")+`),
		('01000000000000000000000002', 'old', 'queued', 0, now(), 0, '', NULL, NULL, now(), `+doc("a")+`),
		('01000000000000000000000003', 'old', 'queued', 0, now(), 0, '', NULL, NULL, now(), `+doc("b")+`),
		('01000000000000000000000004', 'old', 'failed', 0, now(), 3, 'w0', now(), now(), now(),
			convert_to('{"partition":"a","last_error":"nul \\u0000 in it","max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8')),
		('01000000000000000000000005', 'old', 'canceled', 0, now(), 0, '', NULL, now(), now(),
			'\xff'::bytea || convert_to('"partition"', 'UTF8'))`)
	require.NoError(t, err)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	requireStatsExact(t, s, pool, "the upgrade")
	require.NoError(t, s.SetPartitionLimit(ctx, jobstore.DefaultQueue, 1))
	got, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, "01000000000000000000000003", got.ID, "partition a runs a job already")
	require.Equal(t, "b", got.Partition)
	_, err = s.Retry(ctx, "01000000000000000000000004")
	require.NoError(t, err)
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "the retried job of partition a waits, as the queued one does")

	// A job inserted as the release before inserts it, without the
	// partition column, gets it from its doc.
	_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.jobs (id, kind, state, priority, run_at, attempt, updated_at, doc)
		VALUES ('01000000000000000000000006', 'old', 'queued', 0, now(), 0, now(), `+doc("a")+`)`)
	require.NoError(t, err)
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "a job of partition a inserted by the release before waits too")
	var partition string
	require.NoError(t, pool.QueryRow(ctx, `SELECT partition FROM `+schema+`.jobs WHERE id = '01000000000000000000000006'`).Scan(&partition))
	require.Equal(t, "a", partition)
}
