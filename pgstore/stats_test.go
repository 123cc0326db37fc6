package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/pgstore"
)

// rowsQuerier is a pool or a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// tableCounts counts the jobs of schema by kind and state from the jobs
// table itself, in the form of jobstore.Stats.
func tableCounts(ctx context.Context, t *testing.T, db rowsQuerier, schema string) (map[jobstore.State]int, map[string]map[jobstore.State]int) {
	t.Helper()
	return groupCounts(ctx, t, db, `SELECT kind, state, count(*) FROM `+schema+`.jobs GROUP BY kind, state`)
}

// deltaCounts sums the count deltas of schema as Stats does.
func deltaCounts(ctx context.Context, t *testing.T, db rowsQuerier, schema string) (map[jobstore.State]int, map[string]map[jobstore.State]int) {
	t.Helper()
	return groupCounts(ctx, t, db, `SELECT kind, state, sum(n)::bigint FROM `+schema+`.counts
		GROUP BY kind, state HAVING sum(n) <> 0`)
}

// groupCounts runs sql, which selects kind, state and a number, and
// gathers its rows as Stats does.
func groupCounts(ctx context.Context, t *testing.T, db rowsQuerier, sql string) (map[jobstore.State]int, map[string]map[jobstore.State]int) {
	t.Helper()
	st := jobstore.Stats{Counts: map[jobstore.State]int{}, Kinds: map[string]map[jobstore.State]int{}}
	for _, state := range jobstore.States() {
		st.Counts[state] = 0
	}
	rows, err := db.Query(ctx, sql)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n int
		require.NoError(t, rows.Scan(&kind, &state, &n))
		st.Counts[jobstore.State(state)] += n
		st.AddKind(kind, jobstore.State(state), n)
	}
	require.NoError(t, rows.Err())
	return st.Counts, st.Kinds
}

// requireStatsExact fails unless Stats gives the counts of the jobs table.
func requireStatsExact(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, step string) {
	t.Helper()
	st, err := s.Stats(t.Context())
	require.NoError(t, err, step)
	counts, kinds := tableCounts(t.Context(), t, pool, s.Schema())
	require.Equal(t, counts, st.Counts, "counts after %s", step)
	require.Equal(t, kinds, st.Kinds, "counts by kind after %s", step)
	_, queues := groupCounts(t.Context(), t, pool, `SELECT queue, state, count(*) FROM `+s.Schema()+`.jobs GROUP BY queue, state`)
	require.Equal(t, queues, st.Queues, "counts by queue after %s", step)
}

// countRows returns the rows of the counts table and the (kind, state)
// pairs among them.
func countRows(t *testing.T, pool *pgxpool.Pool, schema string) (rows, pairs int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT (queue, kind, state)) FROM `+schema+`.counts`).
		Scan(&rows, &pairs))
	return rows, pairs
}

// TestStatsExactAfterEveryChange: Stats gives the counts of the jobs table
// after each kind of write the store makes (submit, keyed and batch
// submits that insert fewer rows than asked, claims, completions that
// succeed, retry and fail, release, cancel, retry, Wait's mark, recovery of
// a closed store's jobs, prune with the logs it takes along, import) and
// after writes by hand (DELETE, TRUNCATE), and after compactions, which
// leave one row per (kind, state).
func TestStatsExactAfterEveryChange(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	noBackoff := func(int) time.Duration { return 0 }
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, Backoff: noBackoff,
		RecoverInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	check := func(step string) {
		t.Helper()
		requireStatsExact(t, s, pool, step)
	}
	compact := func(step string) {
		t.Helper()
		_, _, err := pgstore.CompactCounts(ctx, s)
		require.NoError(t, err)
		rows, pairs := countRows(t, pool, schema)
		require.Equal(t, pairs, rows, "one row per pair after compacting, %s", step)
		del, wrote, err := pgstore.CompactCounts(ctx, s)
		require.NoError(t, err)
		require.Zero(t, del+wrote, "a compact table is left alone")
		check(step + ", compacted")
	}
	check("nothing")

	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	_, created, err := s.Submit(ctx, jobstore.Spec{Kind: "a", Key: "k1"})
	require.NoError(t, err)
	require.True(t, created)
	_, created, err = s.Submit(ctx, jobstore.Spec{Kind: "a", Key: "k1"})
	require.NoError(t, err)
	require.False(t, created)
	check("submits")

	var specs []jobstore.Spec
	for i := range 60 {
		spec := jobstore.Spec{Kind: []string{"a", "b", "c"}[i%3], MaxAttempts: 1 + i%2}
		if i%10 == 0 {
			spec.Key = fmt.Sprintf("k%d", i%20) // k0, k10 twice each, k1 not at all
		}
		specs = append(specs, spec)
	}
	_, err = s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	_, err = s.SubmitBatch(ctx, specs[:3]) // k0 is taken: two rows of three
	require.NoError(t, err)
	check("batches")
	compact("batches")

	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	check("a claim")
	_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	check("a success")

	js, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"b", "c"}}, 12)
	require.NoError(t, err)
	require.Len(t, js, 12)
	check("a batch claim")
	var wg sync.WaitGroup
	for i, j := range js {
		wg.Go(func() {
			var err error
			switch i % 4 {
			case 0:
				_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
			case 1:
				_, err = s.Complete(ctx, j.Lease(), jobstore.Failed(errors.New("boom"))) // retried or failed
			case 2:
				err = s.Release(ctx, j.Lease())
			case 3:
				_, err = s.Cancel(ctx, j.ID)
				if err == nil {
					_, err = s.Complete(ctx, j.Lease(), jobstore.Failed(context.Canceled))
				}
			}
			require.NoError(t, err)
		})
	}
	wg.Wait()
	check("completions, releases and cancels")

	page, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: 5})
	require.NoError(t, err)
	for _, j := range page.Jobs {
		_, err := s.Cancel(ctx, j.ID)
		require.NoError(t, err)
	}
	check("cancels of queued jobs")
	page, err = s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateFailed, jobstore.StateCanceled}})
	require.NoError(t, err)
	require.NotEmpty(t, page.Jobs)
	for _, j := range page.Jobs[:len(page.Jobs)/2] {
		_, err := s.Retry(ctx, j.ID)
		require.NoError(t, err)
	}
	check("retries")
	compact("retries")

	// Wait marks the row: an update that changes no kind or state.
	waited, _, err := s.Submit(ctx, jobstore.Spec{Kind: "a", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	rowsBefore, _ := countRows(t, pool, schema)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = s.Wait(wctx, waited.ID)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, rowsBefore, func() int { r, _ := countRows(t, pool, schema); return r }())
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET waited = true`)
	require.NoError(t, err)
	rowsAfter, _ := countRows(t, pool, schema)
	require.Equal(t, rowsBefore, rowsAfter, "an update that changes no kind or state appends no delta")
	check("marks")

	// A store closed while it holds jobs: another store recovers them.
	other := openStore(t, schema, nil)
	held, err := other.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "other"}, 3)
	require.NoError(t, err)
	require.Len(t, held, 3)
	check("the other store's claims")
	require.NoError(t, other.Close())
	for _, j := range held {
		// Queued again, or failed on its last attempt.
		require.Eventually(t, func() bool {
			got, err := s.Get(ctx, j.ID)
			require.NoError(t, err)
			return got.State != jobstore.StateRunning
		}, 10*time.Second, 5*time.Millisecond, "job %s not recovered", j.ID)
	}
	check("recovery")

	// Prune takes the logs along (a cascade that touches no job).
	page, err = s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateSucceeded}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	a, err := s.Logs().Append(ctx, page.Jobs[0].ID)
	require.NoError(t, err)
	_, err = a.Write([]byte("out\n"))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	check("a log")
	n, err := s.PruneStates(ctx, 0, []jobstore.State{jobstore.StateSucceeded})
	require.NoError(t, err)
	require.Positive(t, n)
	check("prune of succeeded jobs")
	n, err = s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Positive(t, n)
	check("prune")

	// Import, as jobdir copy does: jobs in every state but running.
	m := memstore.New(nil)
	defer m.Close()
	for i := range 9 {
		_, _, err := m.Submit(ctx, jobstore.Spec{Kind: []string{"a", "imported"}[i%2], MaxAttempts: 1})
		require.NoError(t, err)
	}
	for i := range 4 {
		j, err := m.Claim(ctx, jobstore.ClaimRequest{Worker: "m"})
		require.NoError(t, err)
		out := jobstore.Succeeded(nil)
		if i%2 == 1 {
			out = jobstore.Failed(errors.New("no"))
		}
		_, err = m.Complete(ctx, j.Lease(), out)
		require.NoError(t, err)
	}
	mp, err := m.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	added, err := s.Import(ctx, mp.Jobs)
	require.NoError(t, err)
	require.Equal(t, 9, added)
	added, err = s.Import(ctx, mp.Jobs)
	require.NoError(t, err)
	require.Zero(t, added)
	check("import")
	compact("import")

	// Writes by hand go through the triggers too.
	_, err = pool.Exec(ctx, `DELETE FROM `+schema+`.jobs WHERE kind = 'imported'`)
	require.NoError(t, err)
	check("a DELETE by hand")
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET kind = 'renamed' WHERE kind = 'c'`)
	require.NoError(t, err)
	check("an UPDATE of kind by hand")
	_, err = pool.Exec(ctx, `TRUNCATE `+schema+`.jobs CASCADE`)
	require.NoError(t, err)
	check("TRUNCATE")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Kinds)
}

// TestCountsCompactionsOverlap: two compactions at once each sum only the
// deltas they delete. The second, which began while the first held its
// deltas deleted but not committed, waits for it, skips what it deleted,
// and sums only the deltas appended meanwhile: no delta is counted twice
// or lost.
func TestCountsCompactionsOverlap(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	// No compaction by the store itself meanwhile.
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	submit := func(n int) {
		for range n {
			_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
		}
	}
	submit(3)
	tx1, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx1.Rollback(ctx)
	del, wrote, err := pgstore.CompactCountsIn(ctx, s, tx1)
	require.NoError(t, err)
	require.Equal(t, [2]int64{3, 1}, [2]int64{del, wrote})
	submit(2) // appended while the first compaction is open

	tx2, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx2.Rollback(ctx)
	var pid int
	require.NoError(t, tx2.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	type result struct{ del, wrote int64 }
	done := make(chan result, 1)
	go func() {
		d, w, err := pgstore.CompactCountsIn(ctx, s, tx2)
		if err != nil {
			t.Error(err)
		}
		done <- result{d, w}
	}()
	require.Eventually(t, func() bool {
		var blocked bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, pid).Scan(&blocked))
		return blocked
	}, 10*time.Second, 5*time.Millisecond, "the second compaction does not wait for the first")
	require.NoError(t, tx1.Commit(ctx))
	r := <-done
	require.Equal(t, result{2, 1}, r, "the second compaction sums the deltas appended meanwhile only")
	require.NoError(t, tx2.Commit(ctx))

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, st.Counts[jobstore.StateQueued])
	requireStatsExact(t, s, pool, "two compactions")
	rows, _ := countRows(t, pool, schema)
	require.Equal(t, 2, rows)
}

// TestOpenUpgradesCountsFromVersion3: Open upgrades a schema of version 3
// that holds jobs in every state, while a program of that version goes on
// inserting jobs, and Stats counts them all: the migration seeds the
// counts from the rows there and the triggers count every write after.
func TestOpenUpgradesCountsFromVersion3(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	require.NoError(t, pgstore.MigrateTo(ctx, pool, schema, 3))
	insert := func(from, n int) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs
			(id, kind, state, priority, run_at, attempt, worker, started_at, updated_at, finished_at, doc)
			SELECT lpad(i::text, 26, '0'), 'old' || (i % 3), s, 0, now(), 1, 'seed', now(), now(),
				CASE WHEN s IN ('succeeded', 'failed', 'canceled') THEN now() END,
				convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8')
			FROM generate_series($1::int, $1::int + $2::int - 1) i,
				LATERAL (SELECT (ARRAY['queued','running','succeeded','failed','canceled'])[1 + i % 5] AS s) st`, from, n)
		return err
	}
	require.NoError(t, insert(0, 10_000))

	// An old program goes on inserting while the new one upgrades.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var inserted int
	wg.Go(func() {
		for next := 10_000; ; next += 7 {
			select {
			case <-stop:
				return
			default:
			}
			if err := insert(next, 7); err != nil {
				t.Error(err)
				return
			}
			inserted += 7
		}
	})
	time.Sleep(20 * time.Millisecond)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	defer s.Close()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d jobs inserted by hand while the schema was upgraded", inserted)

	var v int
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(version) FROM `+schema+`.migrations`).Scan(&v))
	require.Equal(t, pgstore.SchemaVersion(), v)
	requireStatsExact(t, s, pool, "the upgrade")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	total := 0
	for _, n := range st.Counts {
		total += n
	}
	require.Equal(t, 10_000+inserted, total)

	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	_, err = s.Prune(ctx, 0)
	require.NoError(t, err)
	requireStatsExact(t, s, pool, "changes after the upgrade")
}

// churn is the role of a child of TestProcessesStatsExact: for the
// duration childKey names, it submits, claims, completes (succeeding,
// failing to a retry or for good), releases, cancels, retries and prunes
// jobs of a few kinds at random, and meanwhile compacts the counts in a
// loop; then it prints "churned <writes> <compactions that deleted rows>".
// It may be killed holding jobs.
func churn(ctx context.Context, s *pgstore.Store, worker string) error {
	d, err := time.ParseDuration(os.Getenv(childKey))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var compactions int
	compacted := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			del, _, err := pgstore.CompactCounts(ctx, s)
			if err != nil && ctx.Err() == nil {
				compacted <- err
				return
			}
			if del > 0 {
				compactions++
			}
			time.Sleep(time.Millisecond)
		}
		compacted <- nil
	}()
	rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	kinds := []string{"a", "b", "c"}
	spec := func() jobstore.Spec {
		return jobstore.Spec{Kind: kinds[rnd.IntN(len(kinds))], MaxAttempts: 1 + rnd.IntN(2)}
	}
	writes := 0
	for ctx.Err() == nil {
		var err error
		switch op := rnd.IntN(10); {
		case op < 2:
			_, _, err = s.Submit(ctx, spec())
		case op < 3:
			specs := make([]jobstore.Spec, 1+rnd.IntN(30))
			for i := range specs {
				specs[i] = spec()
				if rnd.IntN(4) == 0 {
					specs[i].Key = fmt.Sprintf("key-%d", rnd.IntN(200))
				}
			}
			_, err = s.SubmitBatch(ctx, specs)
		case op < 8:
			var js []jobstore.Job
			js, err = s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: worker}, 1+rnd.IntN(4))
			for _, j := range js {
				if err != nil {
					break
				}
				switch rnd.IntN(6) {
				case 0, 1:
					_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
				case 2:
					_, err = s.Complete(ctx, j.Lease(), jobstore.Failed(errors.New("boom")))
				case 3:
					err = s.Release(ctx, j.Lease())
				case 4:
					if _, err = s.Cancel(ctx, j.ID); err == nil {
						_, err = s.Complete(ctx, j.Lease(), jobstore.Failed(context.Canceled))
					}
				case 5:
					// Held until the process ends: a killed child leaves
					// it to recovery, a live one completes it at the end.
					defer s.Complete(context.Background(), j.Lease(), jobstore.Succeeded(nil))
				}
			}
			if errors.Is(err, jobstore.ErrNoJob) {
				err = nil
			}
		case op < 9:
			var page jobstore.Page
			page, err = s.List(ctx, jobstore.ListOptions{States: []jobstore.State{
				jobstore.StateQueued, jobstore.StateFailed, jobstore.StateCanceled}, Limit: 2})
			for _, j := range page.Jobs {
				if err != nil {
					break
				}
				if j.State == jobstore.StateQueued {
					_, err = s.Cancel(ctx, j.ID)
				} else {
					_, err = s.Retry(ctx, j.ID)
				}
				// Another process may have changed it first.
				if errors.Is(err, jobstore.ErrInvalidTransition) || errors.Is(err, jobstore.ErrNotFound) {
					err = nil
				}
			}
		default:
			_, err = s.Prune(ctx, 50*time.Millisecond)
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		writes++
	}
	if err := <-compacted; err != nil {
		return err
	}
	fmt.Printf("churned %d %d\n", writes, compactions)
	return nil
}

// TestProcessesStatsExact: while three processes change jobs at random
// and compact the counts in a loop, and one of them is SIGKILLed holding
// jobs (which the others recover), the counts summed from the deltas equal
// a count of the jobs table in every snapshot the test reads (both in one
// REPEATABLE READ transaction); afterwards Stats equals the table's count.
func TestProcessesStatsExact(t *testing.T) {
	const n, d = 3, 4 * time.Second
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: 100 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }})
	start := time.Now().Add(2 * time.Second)
	var kids []*testproc.Proc
	for range n {
		kids = append(kids, startChild(t, schema, "churn", childKey+"="+d.String(),
			childStart+"="+strconv.FormatInt(start.UnixNano(), 10)))
	}
	time.Sleep(time.Until(start))
	killAt := start.Add(d / 2)
	killed := false
	checks := 0
	for time.Since(start) < d+time.Second {
		if !killed && time.Now().After(killAt) {
			require.NoError(t, kids[0].Signal(syscall.SIGKILL))
			killed = true
		}
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		wantCounts, wantKinds := tableCounts(ctx, t, tx, schema)
		gotCounts, gotKinds := deltaCounts(ctx, t, tx, schema)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, wantCounts, gotCounts, "counts in one snapshot, check %d", checks)
		require.Equal(t, wantKinds, gotKinds, "counts by kind in one snapshot, check %d", checks)
		checks++
	}
	require.Error(t, kids[0].Wait(ctx), "the killed child")
	for _, c := range kids[1:] {
		out := c.Lines(t)
		require.Len(t, out, 1)
		t.Logf("child: %s", out[0])
		var writes, compactions int
		_, err := fmt.Sscanf(out[0], "churned %d %d", &writes, &compactions)
		require.NoError(t, err)
		// Enough that the snapshots met writes in flight; a loaded machine
		// (CI with other packages' tests beside) made 99 in one run.
		require.Greater(t, writes, 20)
		require.Greater(t, compactions, 10)
	}
	t.Logf("%d snapshots checked", checks)
	// The killed child's jobs come back (or fail, on their last attempt).
	require.Eventually(t, func() bool {
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		return st.Counts[jobstore.StateRunning] == 0
	}, 10*time.Second, 10*time.Millisecond, "the killed child's jobs were not recovered")
	requireStatsExact(t, s, pool, "the processes' changes")
	_, _, err := pgstore.CompactCounts(ctx, s)
	require.NoError(t, err)
	requireStatsExact(t, s, pool, "the last compaction")
}

// TestCountsTableStaysSmall: a compaction that deletes many deltas is
// followed by a vacuum of their table, so that the space of the deltas it
// deleted is used again: under a steady load of writes the table does not
// grow with a minute of dead rows (autovacuum looks once a minute by
// default), which every Stats would read.
func TestCountsTableStaysSmall(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	size := func() int64 {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_relation_size($1)`, schema+".counts").Scan(&n))
		return n
	}
	const rounds = 8
	var sizes []int64
	var began time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&began))
	for range rounds {
		// 20,000 deltas that sum to nothing, as many writes would leave.
		_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.counts (kind, state, n)
			SELECT 'k', 'queued', CASE WHEN i % 2 = 0 THEN 1 ELSE -1 END FROM generate_series(1, 20000) i`)
		require.NoError(t, err)
		require.NoError(t, pgstore.CompactAndVacuum(ctx, s))
		sizes = append(sizes, size())
	}
	t.Logf("counts table after each round of 20,000 deltas: %v bytes", sizes)
	if sizes[rounds-1] >= 2*sizes[0] {
		// No vacuum removes rows that a snapshot older than their
		// deletion may still see: the database is shared.
		var pids []int32
		rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL AND xact_start < $1`, began)
		require.NoError(t, err)
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		require.NoError(t, err)
		if len(pids) > 0 {
			t.Skipf("transactions of other sessions (pids %v), older than the deltas, keep vacuum from removing them", pids)
		}
	}
	require.Less(t, sizes[rounds-1], 2*sizes[0], "the table grows with the deltas deleted")
	rows, pairs := countRows(t, pool, schema)
	require.Equal(t, [2]int{1, 1}, [2]int{rows, pairs})
	requireStatsExact(t, s, pool, "the compactions and vacuums")
}
