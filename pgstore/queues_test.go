package pgstore_test

import (
	"strings"
	"testing"

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
