package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

// TestStalledQueueLockDelaysOnlyItsQueue: a transaction that holds a
// limited queue's lock and stalls (as a claim whose client was cut off
// halfway through sending it would) delays a claim of that queue's jobs by
// at most lockWait, after which the claim says to try again soon; a job
// of another queue is claimed meanwhile, without waiting; and once the lock is
// free, the queue's job is claimed.
func TestStalledQueueLockDelaysOnlyItsQueue(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t, 4)
	s, err := Open(ctx, pool, &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.SetQueueLimit(ctx, "q", 2))
	limited, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "q"})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(($1::bigint << 32) | (hashtext('q')::bigint & 4294967295))`, int64(s.ns))
	require.NoError(t, err)

	began := time.Now()
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	waited := time.Since(began)
	var nj *jobstore.NoJobError
	require.ErrorAs(t, err, &nj, "a claim of a queue whose lock is held elsewhere claims nothing")
	require.GreaterOrEqual(t, waited, lockWait, "the claim waited for the lock before it gave up")
	require.Less(t, waited, 50*lockWait, "the claim gave up waiting (a loaded machine may add to lockWait)")
	require.WithinDuration(t, time.Now(), nj.NextRunAt, time.Second, "the claim says to try again soon")
	t.Logf("a claim of a queue whose lock stalled returned after %s", waited)

	other, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "other"})
	require.NoError(t, err)
	began = time.Now()
	got, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	// Only a claim that found nothing else waits for a lock.
	require.Equal(t, other.ID, got.ID, "another queue's job is claimed while the lock is held")
	t.Logf("a claim of another queue's job meanwhile took %s", time.Since(began))

	require.NoError(t, tx.Rollback(ctx))
	got, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, limited.ID, got.ID)
}
