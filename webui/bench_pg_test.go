package webui_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/pgstore"
)

// BenchmarkUIPostgres is BenchmarkUI on a PostgreSQL store (pgstore) of
// the same $JOBDIR_BENCH_UI_JOBS jobs, seeded the same way through the
// store's API into a schema of its own, which is dropped at the end. It
// needs the server of JOBDIR_TEST_POSTGRES and is skipped without one:
//
//	go test -run '^$' -bench UIPostgres -benchtime 20x ./webui
func BenchmarkUIPostgres(b *testing.B) {
	pgtest.Require(b)
	start := time.Now()
	uiPGOnce.Do(func() { uiPGEnv = buildUIPostgres() })
	e := uiPGEnv
	if e.err != nil {
		b.Fatal(e.err)
	}
	if d := time.Since(start); d > time.Second {
		b.Logf("seeded a PostgreSQL store of %d jobs in %s", benchJobs(), d.Round(time.Second))
	}
	runUIBench(b, e)
}

var (
	uiPGOnce sync.Once
	uiPGEnv  uiBench
	// uiPGSchema is the schema BenchmarkUIPostgres made, dropped by
	// closeUIPostgres.
	uiPGSchema string
	uiPGPool   *pgxpool.Pool
)

func buildUIPostgres() (e uiBench) {
	ctx := context.Background()
	pool, err := pgtest.NewPool(ctx, 8)
	if err != nil {
		e.err = err
		return e
	}
	uiPGPool = pool
	uiPGSchema = fmt.Sprintf("jobdir_t%d_uibench", time.Now().Unix())
	if e.store, e.err = pgstore.Open(ctx, pool, &pgstore.Options{Schema: uiPGSchema}); e.err != nil {
		return e
	}
	if e.job, e.err = seedUIBench(ctx, e.store); e.err != nil {
		return e
	}
	if _, e.err = pool.Exec(ctx, `VACUUM ANALYZE `+uiPGSchema+`.jobs`); e.err != nil {
		return e
	}
	return e.signIn()
}

// closeUIPostgres closes BenchmarkUIPostgres's store and drops its schema.
func closeUIPostgres() {
	if uiPGEnv.store != nil {
		_ = uiPGEnv.store.Close()
	}
	if uiPGPool != nil {
		uiPGPool.Close()
	}
	if uiPGSchema == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if pool, err := pgtest.NewPool(ctx, 1); err == nil {
		_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+uiPGSchema+` CASCADE`)
		pool.Close()
	}
}
