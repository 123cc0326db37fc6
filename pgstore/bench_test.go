package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// BenchmarkClaimAmongFinished measures a claim and its completion in a
// store that also holds 1,000 or 1,000,000 finished jobs, as a store that
// prunes rarely does: the claim reads an index of queued jobs only, so its
// cost must not grow with the finished ones (the target is within 1.5×).
//
//	go test -run '^$' -bench ClaimAmongFinished -benchtime 3000x -count 6 ./pgstore
//
// Seeding the large store takes about a minute; each size is seeded once
// per process and dropped at the end.
func BenchmarkClaimAmongFinished(b *testing.B) {
	pgtest.Require(b)
	for _, n := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("finished=%d", n), func(b *testing.B) {
			s, pool := seededStore(b, n)
			ctx := context.Background()
			// Queue what the loop claims, plus a backlog of 100.
			for left := b.N + 100; left > 0; left -= jobstore.MaxBatch {
				specs := make([]jobstore.Spec, min(left, jobstore.MaxBatch))
				for i := range specs {
					specs[i] = jobstore.Spec{Kind: "bench"}
				}
				_, err := s.SubmitBatch(ctx, specs)
				require.NoError(b, err)
			}
			_, err := pool.Exec(ctx, `ANALYZE `+s.Schema()+`.jobs`)
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "bench", Kinds: []string{"bench"}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// Leave only the seeded jobs for the next run of this size.
			_, err = pool.Exec(ctx, `DELETE FROM `+s.Schema()+`.jobs WHERE kind = 'bench'`)
			require.NoError(b, err)
		})
	}
}

var seeded = map[int]string{}

// seededStore returns a store whose schema holds n succeeded jobs, seeded
// once per process with one INSERT.
func seededStore(b *testing.B, n int) (*pgstore.Store, *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(b, 4)
	schema, ok := seeded[n]
	if !ok {
		// Not pgtest.Schema: the schema outlives this sub-benchmark's
		// runs, and is dropped when the benchmark ends.
		schema = fmt.Sprintf("jobdir_t%d_seed%d", time.Now().Unix(), n)
		seeded[n] = schema
		s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema})
		require.NoError(b, err)
		require.NoError(b, s.Close())
		start := time.Now()
		_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.jobs
			(id, kind, state, priority, run_at, attempt, worker, started_at, updated_at, finished_at, doc)
			SELECT lpad(i::text, 26, '0'), 'seed', 'succeeded', 0, t, 1, 'seed', t, t, t,
				convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8')
			FROM generate_series(1, $1) i, (SELECT now() - interval '1 day' AS t) c`, n)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, `VACUUM ANALYZE `+schema+`.jobs`)
		require.NoError(b, err)
		b.Logf("seeded %d finished jobs in %v", n, time.Since(start).Round(time.Millisecond))
	}
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, pool
}

// dropSeeded drops the schemas seededStore made; TestMain calls it.
func dropSeeded() {
	for _, schema := range seeded {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		pool, err := pgtest.NewPool(ctx, 1)
		if err == nil {
			_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
			pool.Close()
		}
		cancel()
	}
}

// BenchmarkStats measures Stats in a store that holds 1,000 or 1,000,000
// succeeded jobs and a few queued ones: it sums the compacted count deltas
// and reads the claim index, so its cost must not grow with the jobs kept.
// The sub-benchmark scan is, for comparison, the count of the jobs table
// that Stats read before migration 4.
//
//	go test -run '^$' -bench 'Stats' -benchtime 200x ./pgstore
func BenchmarkStats(b *testing.B) {
	pgtest.Require(b)
	for _, n := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s, pool := seededStore(b, n)
			ctx := context.Background()
			specs := make([]jobstore.Spec, 10)
			for i := range specs {
				specs[i] = jobstore.Spec{Kind: fmt.Sprintf("bench%d", i%3)}
			}
			_, err := s.SubmitBatch(ctx, specs)
			require.NoError(b, err)
			_, _, err = pgstore.CompactCounts(ctx, s)
			require.NoError(b, err)
			b.Run("stats", func(b *testing.B) {
				for range b.N {
					st, err := s.Stats(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if st.Counts[jobstore.StateSucceeded] < n {
						b.Fatalf("Stats counts %d succeeded jobs, want %d or more", st.Counts[jobstore.StateSucceeded], n)
					}
				}
			})
			b.Run("scan", func(b *testing.B) {
				for range b.N {
					if _, err := pool.Exec(ctx, `SELECT kind, state, count(*) FROM `+s.Schema()+`.jobs GROUP BY kind, state`); err != nil {
						b.Fatal(err)
					}
				}
			})
			_, err = pool.Exec(ctx, `DELETE FROM `+s.Schema()+`.jobs WHERE kind LIKE 'bench%'`)
			require.NoError(b, err)
		})
	}
}
