package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/jobdir/jobdir/pgstore"
)

// envPostgres holds the DSN of the PostgreSQL server of the pgstore and
// River PG systems (-postgres), for the children, which inherit it.
const envPostgres = "JOBDIR_BENCH_POSTGRES"

// defaultPostgres is the server when -postgres is not given: the local
// socket, database "test".
const defaultPostgres = "host=/var/run/postgresql dbname=test"

// The PostgreSQL systems that issue 13's targets compare.
const (
	pgstoreSystemName = "jobdir-pg"
	riverPGSystemName = "river-pg"
)

// pgPoolSize is every PostgreSQL system's pool, per process.
const pgPoolSize = 20

func pgDSN() string {
	if d := os.Getenv(envPostgres); d != "" {
		return d
	}
	return defaultPostgres
}

// pgSchema is the schema of the store in dir: one per store directory, so
// that no run touches another's schemas (or a test's).
func pgSchema(dir string) string {
	h := fnv.New64a()
	h.Write([]byte(dir))
	return fmt.Sprintf("jobdir_bench_%016x", h.Sum64())
}

func pgPool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(pgDSN())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = pgPoolSize
	return pgxpool.NewWithConfig(ctx, cfg)
}

// dropSchema drops the schema of the store in dir.
func dropSchema(ctx context.Context, dir string) error {
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{pgSchema(dir)}.Sanitize()+` CASCADE`)
	return err
}

func pgstoreSystem() *system {
	return &system{
		name:     pgstoreSystemName,
		label:    "jobdir pgstore",
		jobdir:   true,
		durable:  true,
		pg:       true,
		teardown: dropSchema,
		setup: func(ctx context.Context, dir string) error {
			q, err := openPGStore(ctx, dir)
			if err != nil {
				return err
			}
			return q.Close()
		},
		open: func(ctx context.Context, dir string) (queue, error) { return openPGStore(ctx, dir) },
	}
}

func openPGStore(ctx context.Context, dir string) (*jobdirQueue, error) {
	pool, err := pgPool(ctx)
	if err != nil {
		return nil, err
	}
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: pgSchema(dir)})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &jobdirQueue{store: s, close: func() error {
		err := s.Close()
		pool.Close()
		return err
	}}, nil
}

// riverPGSystem is River on PostgreSQL (riverpgxv5), with its defaults or,
// if tuned, the fetch settings that gave River its best figures on SQLite.
func riverPGSystem(name, label string, tuned bool) *system {
	return &system{
		name:        name,
		label:       label,
		durable:     true,
		rescueAfter: "1 h (RescueStuckJobsAfter default)",
		teardown:    dropSchema,
		pg:          true,
		setup: func(ctx context.Context, dir string) error {
			pool, err := pgPool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			schema := pgSchema(dir)
			if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
				return err
			}
			m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
			if err != nil {
				return fmt.Errorf("river migrator: %w", err)
			}
			if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
				return fmt.Errorf("river migrate: %w", err)
			}
			return nil
		},
		open: func(ctx context.Context, dir string) (queue, error) {
			pool, err := pgPool(ctx)
			if err != nil {
				return nil, err
			}
			schema := pgSchema(dir)
			// The inserting client gets the same fetch settings as the
			// working one: River limits a client's insert notifications to
			// one per FetchCooldown and queue, so a tuned worker fed by an
			// untuned inserter would still be woken at most every 100 ms.
			cfg := &river.Config{Logger: slog.New(slog.DiscardHandler), Schema: schema}
			riverPGTune(cfg, tuned)
			c, err := river.NewClient(riverpgxv5.New(pool), cfg)
			if err != nil {
				pool.Close()
				return nil, fmt.Errorf("river client: %w", err)
			}
			return &riverPGQueue{pool: pool, insert: c, schema: schema, tuned: tuned}, nil
		},
	}
}

// riverPGTune sets the tuned fetch settings on cfg if tuned, and leaves
// River's defaults otherwise. Every client of the tuned system, inserting or
// working, gets them, as in an application with one configuration.
func riverPGTune(cfg *river.Config, tuned bool) {
	if tuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = riverFetchCooldown, riverFetchPollInterval
	}
}

type riverPGQueue struct {
	pool   *pgxpool.Pool
	insert *river.Client[pgx.Tx]
	schema string
	tuned  bool
}

func (q *riverPGQueue) Insert(ctx context.Context, t int64) error {
	_, err := q.insert.Insert(ctx, riverArgs{T: t}, nil)
	return err
}

func (q *riverPGQueue) InsertBatch(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverArgs{}}
	}
	_, err := q.insert.InsertMany(ctx, params)
	return err
}

func (q *riverPGQueue) Pending(ctx context.Context) (bool, error) {
	var pending bool
	err := q.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{q.schema}.Sanitize()+
		`.river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&pending)
	return pending, err
}

func (q *riverPGQueue) Work(ctx context.Context, workers int, h handler, ready func()) error {
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(ctx context.Context, j *river.Job[riverArgs]) error {
		return h(ctx, j.Args.T)
	}))
	cfg := &river.Config{
		Logger:  slog.New(slog.DiscardHandler),
		Schema:  q.schema,
		Workers: w,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
	}
	riverPGTune(cfg, q.tuned)
	c, err := river.NewClient(riverpgxv5.New(q.pool), cfg)
	if err != nil {
		return fmt.Errorf("river worker client: %w", err)
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("river start: %w", err)
	}
	ready()
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("river stop: %w", err)
	}
	return nil
}

func (q *riverPGQueue) Close() error {
	q.pool.Close()
	return nil
}
