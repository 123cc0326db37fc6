package pgstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestOpenUpgradesToListIndexes: Open of a version-12 schema rebuilds the
// indexes of states and kinds without the running jobs; the jobs that the
// release before wrote list as before, by state, by kind and by both, the
// running ones among them, in ID order both ways and across pages.
func TestOpenUpgradesToListIndexes(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	require.NoError(t, pgstore.MigrateTo(ctx, pool, schema, 12))
	states := []string{"waiting", "queued", "running", "succeeded", "running", "failed", "canceled", "queued"}
	var ids []string
	for i, st := range states {
		id := "0100000000000000000000000" + string(rune('A'+i))
		ids = append(ids, id)
		kind := []string{"a", "b"}[i%2]
		_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs (id, kind, state, priority, run_at, attempt, updated_at, doc, after)
			VALUES ($1, $2, $3, 0, now() + interval '1 hour', 0, now(),
				convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8'),
				CASE WHEN $3 = 'waiting' THEN ARRAY['01000000000000000000000000'] END)`, id, kind, st)
		require.NoError(t, err)
	}
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()

	var defs []string
	rows, err := pool.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('jobs_state', 'jobs_kind') ORDER BY indexname`, schema)
	require.NoError(t, err)
	for rows.Next() {
		var d string
		require.NoError(t, rows.Scan(&d))
		defs = append(defs, d)
	}
	require.NoError(t, rows.Err())
	require.Len(t, defs, 2)
	for _, d := range defs {
		require.Contains(t, d, "WHERE (state <> 'running'::text)")
	}

	for _, tc := range []struct {
		name   string
		states []jobstore.State
		kind   string
	}{
		{name: "running", states: []jobstore.State{jobstore.StateRunning}},
		{name: "queued", states: []jobstore.State{jobstore.StateQueued}},
		{name: "queued and running", states: []jobstore.State{jobstore.StateQueued, jobstore.StateRunning}},
		{name: "kind a", kind: "a"},
		{name: "kind b", kind: "b"},
		{name: "kind b running", kind: "b", states: []jobstore.State{jobstore.StateRunning}},
		{name: "kind a, every state", kind: "a", states: jobstore.States()},
		{name: "all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for i, id := range ids {
				if (tc.kind == "" || tc.kind == []string{"a", "b"}[i%2]) &&
					(len(tc.states) == 0 || slices.Contains(tc.states, jobstore.State(states[i]))) {
					want = append(want, id)
				}
			}
			for _, order := range []jobstore.Order{jobstore.OldestFirst, jobstore.NewestFirst} {
				var got []string
				cursor := ""
				for {
					p, err := s.List(ctx, jobstore.ListOptions{States: tc.states, Kind: tc.kind, Order: order, Limit: 2, Cursor: cursor})
					require.NoError(t, err)
					for _, j := range p.Jobs {
						got = append(got, j.ID)
					}
					if p.Next == "" {
						break
					}
					cursor = p.Next
				}
				w := slices.Clone(want)
				if order == jobstore.NewestFirst {
					slices.Reverse(w)
				}
				require.Equal(t, w, got, "order %v", order)
			}
		})
	}
}
