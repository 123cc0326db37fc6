package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

// TestClaimRefusesDeadSession: a claim made under a lease session whose
// connection the server has already closed, before the store's keeper
// noticed (as after pg_terminate_backend of every connection of a worker,
// with a claim in flight on a fresh pool connection), claims nothing: the
// job stays queued, and the next Claim runs it under a new session. Were
// the claim to go through, its lease would be lost at once, and if the
// dead session had already been recovered, the job would stay running
// with no live process holding it and no recovery ever looking at it.
func TestClaimRefusesDeadSession(t *testing.T) {
	for _, tc := range []struct {
		name      string
		recovered bool // another store already recovered the session's jobs
	}{
		{name: "connection gone, not yet found dead"},
		{name: "session already recovered", recovered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			schema := pgtest.Schema(t)
			pool := pgtest.Pool(t, 4)
			// No background recovery: the test says when it happens.
			s, err := Open(ctx, pool, &Options{Schema: schema, RecoverInterval: time.Hour, LeaseGrace: -1})
			require.NoError(t, err)
			defer s.Close()
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "work"})
			require.NoError(t, err)

			sess, err := s.session(ctx)
			require.NoError(t, err)
			var backend int
			require.NoError(t, pool.QueryRow(ctx, `SELECT backend_pid FROM `+s.q.schema+`.sessions WHERE id = $1`, sess.id).Scan(&backend))
			var ended bool
			// With a timeout, pg_terminate_backend returns once the
			// backend is gone, and with it the session's advisory lock.
			require.NoError(t, pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, backend).Scan(&ended))
			require.True(t, ended)
			if tc.recovered {
				require.NoError(t, s.recoverDead(ctx))
				var n int
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+s.q.schema+`.sessions WHERE id = $1`, sess.id).Scan(&n))
				require.Zero(t, n, "the dead session was not recovered")
			}

			req := jobstore.ClaimRequest{Worker: "w"}
			_, err = s.claim(ctx, req, sess)
			require.ErrorIs(t, err, errSessionDead)
			got, err := s.Get(ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateQueued, got.State)
			require.Zero(t, got.Attempt)

			got, err = s.Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, j.ID, got.ID)
			require.Equal(t, 1, got.Attempt)
			var session int32
			var live bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT j.session, EXISTS (SELECT 1 FROM `+s.q.schema+`.sessions s WHERE s.id = j.session)
				FROM `+s.q.schema+`.jobs j WHERE j.id = $1`, j.ID).Scan(&session, &live))
			require.NotEqual(t, sess.id, session)
			require.True(t, live, "the job runs under a session that does not exist")
			done, err := s.Complete(ctx, got.Lease(), jobstore.Succeeded(nil))
			require.NoError(t, err)
			require.Equal(t, jobstore.StateSucceeded, done.State)
		})
	}
}

// TestClaimsUseGenericPlan checks that each of the four claim statements
// (one job or a batch, any kind or some kinds) runs on the generic plan of
// its prepared statement from its first call, never planned again per
// call: the server's pg_prepared_statements counts the plans each
// connection made.
func TestClaimsUseGenericPlan(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t, 4)
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	specs := make([]jobstore.Spec, 80)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	_, err = s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	const calls = 8 // more than the 5 custom plans the server makes before it may choose
	all, kinds := jobstore.ClaimRequest{Worker: "w"}, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k"}}
	twoKinds := jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k", "other"}}
	for range calls {
		_, err := s.Claim(ctx, all)
		require.NoError(t, err)
		_, err = s.Claim(ctx, kinds)
		require.NoError(t, err)
		_, err = s.ClaimBatch(ctx, all, 2)
		require.NoError(t, err)
		_, err = s.ClaimBatch(ctx, kinds, 2)
		require.NoError(t, err)
		_, err = s.ClaimBatch(ctx, twoKinds, 2)
		require.NoError(t, err)
	}
	plans := map[string][2]int64{} // statement: generic, custom
	conns := pool.AcquireAllIdle(ctx)
	require.NotEmpty(t, conns)
	for _, c := range conns {
		rows, err := c.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
			WHERE statement LIKE 'WITH async%SKIP LOCKED%'`)
		require.NoError(t, err)
		for rows.Next() {
			var stmt string
			var generic, custom int64
			require.NoError(t, rows.Scan(&stmt, &generic, &custom))
			p := plans[stmt]
			plans[stmt] = [2]int64{p[0] + generic, p[1] + custom}
		}
		require.NoError(t, rows.Err())
		c.Release()
	}
	require.Len(t, plans, 5, "the five claim statements")
	for stmt, p := range plans {
		assert.Zero(t, p[1], "custom plans of %s", stmt)
		assert.GreaterOrEqual(t, p[0], int64(calls), "generic plans of %s", stmt)
	}
}

// TestClaimBatchOfOneKindPassesOverHeldJobs: a batch claim of one kind
// takes its locks in the scan of the kind's claim index, so jobs that
// another transaction holds (another process's claim in flight) are passed
// over and the batch is filled with the next ones in claim order, rather
// than coming back short.
func TestClaimBatchOfOneKindPassesOverHeldJobs(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t, 4)
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	specs := make([]jobstore.Spec, 20)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k", Priority: len(specs) - i} // claim order is submit order
	}
	subs, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	ids := make([]string, len(subs))
	for i, sub := range subs {
		ids[i] = sub.Job.ID
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+s.q.schema+`.jobs WHERE id = ANY($1) FOR UPDATE`, []string{ids[0], ids[1], ids[3]})
	require.NoError(t, err)

	got, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k"}}, 8)
	require.NoError(t, err)
	var gotIDs []string
	for _, j := range got {
		gotIDs = append(gotIDs, j.ID)
	}
	want := []string{ids[2], ids[4], ids[5], ids[6], ids[7], ids[8], ids[9], ids[10]}
	require.Equal(t, want, gotIDs)
}
