package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestProcessSubmitDuringCloseWakesWorker: a submit in one process that
// commits while its store is closing (it was waiting on a row lock when
// Close was called) still wakes a worker in another process, whose poll is
// a minute.
func TestProcessSubmitDuringCloseWakesWorker(t *testing.T) {
	schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: schema, PollInterval: time.Minute})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// The key, held by a transaction that the test ends once the child
	// has closed its store.
	const key = "close-race"
	blocker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(context.Background()) //nolint:errcheck
	_, err = blocker.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+`
		(id, key, kind, state, priority, run_at, attempt, updated_at, doc)
		VALUES ('blocker', $1, 'wake', 'queued', 0, now(), 0, now(), '{}')`, key)
	require.NoError(t, err)

	// The listener (which the first wait starts) is up before the claim:
	// its coming up would wake AwaitWork.
	wctx, wcancel := context.WithTimeout(ctx, time.Millisecond)
	_ = s.AwaitWork(wctx)
	wcancel()
	require.Eventually(t, func() bool { return listeners(t, schema) == 1 }, 10*time.Second, 10*time.Millisecond)
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	woke := make(chan error, 1)
	go func() { woke <- s.AwaitWork(ctx) }()

	c := startChild(t, schema, "submit-during-close", childKey+"="+key)
	require.Equal(t, "closed", c.Next(t), c.Output())
	require.NoError(t, blocker.Rollback(ctx))
	require.NoError(t, c.Wait(ctx), c.Output())
	require.Contains(t, c.Output(), "submitted true")
	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitWork did not return within 10 s of a submit that committed while its store closed")
	}
	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, key, j.Key)
}

// submitDuringClose is the child role "submit-during-close": it submits
// the key childKey names, waits until that submit waits on a lock, closes
// the store and says "closed", then says how the submit ended.
func submitDuringClose(ctx context.Context, s *pgstore.Store) error {
	type result struct {
		created bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		_, created, err := s.Submit(ctx, jobstore.Spec{Kind: "wake", Key: os.Getenv(childKey)})
		done <- result{created, err}
	}()
	conn, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for waiting := false; !waiting; {
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock')`, appName(os.Getpid())).Scan(&waiting)
		if err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		return err
	}
	fmt.Println("closed")
	r := <-done
	if r.err != nil {
		return fmt.Errorf("submit: %w", r.err)
	}
	fmt.Println("submitted", r.created)
	return nil
}
