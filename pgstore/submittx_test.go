package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

// TestSubmitTx: a job submitted in the caller's transaction exists for no
// one else until that transaction commits, together with the caller's own
// row; a worker waiting in another store is woken by the commit; a
// rollback leaves no job, and its key free.
func TestSubmitTx(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	other := openListening(t, schema, 0) // polls once a minute: only a notification wakes it
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t, 2)
	_, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "orders"}.Sanitize()+` (id text PRIMARY KEY)`)
	require.NoError(t, err)
	orders := pgx.Identifier{schema, "orders"}.Sanitize()

	_, err = other.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	// A worker that looks for the job at every wake-up, as a runner does:
	// a wake-up may be spurious (the listener's start is one), the job's
	// arrival by a notification is not.
	woke := make(chan error, 1)
	go func() {
		for {
			if err := other.AwaitWork(ctx); err != nil {
				woke <- err
				return
			}
			if _, err := other.GetByKey(ctx, "ship-o1"); err == nil {
				woke <- nil
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return listeners(t, schema) == 1 }, 10*time.Second, 10*time.Millisecond)

	tx := begin(t, pool)
	_, err = tx.Exec(ctx, `INSERT INTO `+orders+` VALUES ('o1')`)
	require.NoError(t, err)
	j, created, err := s.SubmitTx(ctx, tx, jobstore.Spec{Kind: "order.ship", Key: "ship-o1"})
	require.NoError(t, err)
	require.True(t, created)
	_, err = other.Get(ctx, j.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound, "not before the commit")
	_, err = other.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	select {
	case err := <-woke:
		t.Errorf("the waiting worker found the job before the commit (%v)", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))

	require.NoError(t, <-woke, "the commit's notification wakes a waiting worker, which finds the job, within 30 s (its poll is a minute)")
	got, err := other.GetByKey(ctx, "ship-o1")
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
	c, err := other.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, j.ID, c.ID)

	// A key a committed job holds: that job, not a new one.
	tx = begin(t, pool)
	again, created, err := s.SubmitTx(ctx, tx, jobstore.Spec{Kind: "order.ship", Key: "ship-o1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, j.ID, again.ID)
	require.NoError(t, tx.Rollback(ctx))

	// A rollback takes the caller's row and the job back.
	tx = begin(t, pool)
	_, err = tx.Exec(ctx, `INSERT INTO `+orders+` VALUES ('o2')`)
	require.NoError(t, err)
	lost, _, err := s.SubmitTx(ctx, tx, jobstore.Spec{Kind: "order.ship", Key: "ship-o2"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = other.Get(ctx, lost.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+orders).Scan(&n))
	require.Equal(t, 1, n)
	_, created, err = other.Submit(ctx, jobstore.Spec{Kind: "order.ship", Key: "ship-o2"})
	require.NoError(t, err)
	require.True(t, created, "the key of a rolled-back job is free")

	// Invalid input runs no statement: the transaction goes on.
	tx = begin(t, pool)
	_, _, err = s.SubmitTx(ctx, tx, jobstore.Spec{Kind: "bad kind!"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, err = tx.Exec(ctx, `INSERT INTO `+orders+` VALUES ('o3')`)
	require.NoError(t, err, "the transaction is not aborted")
	require.NoError(t, tx.Commit(ctx))
	_, _, err = s.SubmitTx(ctx, nil, jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

// TestSubmitBatchTx: a batch in the caller's transaction, keys shared with
// committed jobs and within the batch, exists only once it commits, and
// not at all after a rollback.
func TestSubmitBatchTx(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	other := openStore(t, schema, nil)
	ctx := t.Context()
	pool := pgtest.Pool(t, 2)
	held, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "held"})
	require.NoError(t, err)
	specs := []jobstore.Spec{{Kind: "k", Key: "a"}, {Kind: "k", Key: "held"}, {Kind: "k"}, {Kind: "k", Key: "a"}}

	tx := begin(t, pool)
	out, err := s.SubmitBatchTx(ctx, tx, specs)
	require.NoError(t, err)
	require.Len(t, out, 4)
	require.True(t, out[0].Created)
	require.False(t, out[1].Created)
	require.Equal(t, held.ID, out[1].Job.ID)
	require.True(t, out[2].Created)
	require.False(t, out[3].Created)
	require.Equal(t, out[0].Job.ID, out[3].Job.ID)
	_, err = other.GetByKey(ctx, "a")
	require.ErrorIs(t, err, jobstore.ErrNotFound, "not before the commit")
	require.NoError(t, tx.Commit(ctx))
	got, err := other.GetByKey(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, out[0].Job.ID, got.ID)
	_, err = other.Get(ctx, out[2].Job.ID)
	require.NoError(t, err)

	tx = begin(t, pool)
	out, err = s.SubmitBatchTx(ctx, tx, []jobstore.Spec{{Kind: "k", Key: "b"}, {Kind: "k"}})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	for _, r := range out {
		_, err := other.Get(ctx, r.Job.ID)
		require.ErrorIs(t, err, jobstore.ErrNotFound)
	}
	_, err = s.SubmitBatchTx(ctx, nil, specs)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

// begin starts a transaction that the test's cleanup rolls back, if it is
// still open: a failed test must not leave it holding locks when the pool
// closes.
func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
