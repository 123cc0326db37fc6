package pgstore_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
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
	ctx := t.Context()
	var children []*testproc.Proc
	for range 2 {
		c := startChild(t, schema, "claim-starts")
		require.Equal(t, "ready", c.Next(t))
		children = append(children, c)
	}
	submitFor := func(queue string, d time.Duration) (last jobstore.Job) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: queue})
			require.NoError(t, err)
			last = j
			time.Sleep(time.Millisecond)
		}
		return last
	}
	submitFor("p", 200*time.Millisecond)
	require.NoError(t, s.PauseQueue(ctx, "p"))
	paused := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { submitFor("other", 300*time.Millisecond) })
	submitFor("p", 300*time.Millisecond)
	wg.Wait()
	resuming := time.Now()
	require.NoError(t, s.ResumeQueue(ctx, "p"))
	resumed := time.Now()
	last := submitFor("p", 50*time.Millisecond)
	_, err := s.Wait(ctx, last.ID)
	require.NoError(t, err)
	for range children {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "stop", Queue: "control"})
		require.NoError(t, err)
	}

	var before, during, after int
	first := time.Duration(-1)
	for _, c := range children {
		for _, l := range c.Lines(t) {
			f := strings.Fields(l)
			require.Len(t, f, 4, "line %q", l)
			ns, err := strconv.ParseInt(f[3], 10, 64)
			require.NoError(t, err)
			at := time.Unix(0, ns)
			switch {
			case f[2] == "other" && at.After(paused) && at.Before(resuming):
				during++
			case f[2] != "p":
			case !at.After(paused):
				before++
			default:
				require.False(t, at.Before(resuming), "job %s of the paused queue started %s after the pause returned", f[1], at.Sub(paused))
				after++
				if d := at.Sub(resumed); first < 0 || d < first {
					first = d
				}
			}
		}
	}
	t.Logf("queue p: %d jobs started before the pause, %d after the resume; the other queue: %d started during the pause; the first start %s after the resume returned",
		before, after, during, first)
	require.Positive(t, before)
	require.Positive(t, during, "the other queue ran while p was paused")
	require.Positive(t, after)
	require.Less(t, first, time.Second, "the workers started the queue's jobs again soon after the resume")
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
