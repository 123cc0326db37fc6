package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// River's fetch settings. The defaults (100 ms cooldown, 1 s poll) cap
// throughput at about 1,000 jobs/s on SQLite, whose driver has no
// LISTEN/NOTIFY; these are the tuned values that gave River its best
// figures.
const (
	riverFetchCooldown     = 10 * time.Millisecond
	riverFetchPollInterval = 100 * time.Millisecond
)

// riverArgs is the bench job for River.
type riverArgs struct {
	T int64 `json:"t"`
}

// Kind returns the River job kind.
func (riverArgs) Kind() string { return "bench" }

func riverSystem(name, label, synchronous string) *system {
	return &system{
		name:        name,
		label:       label,
		durable:     synchronous == "FULL",
		rescueAfter: "1 h (RescueStuckJobsAfter default)",
		setup: func(ctx context.Context, dir string) error {
			db, err := openSQLite(dir, "river.db", synchronous)
			if err != nil {
				return err
			}
			defer db.Close()
			m, err := rivermigrate.New(riversqlite.New(db), nil)
			if err != nil {
				return fmt.Errorf("river migrator: %w", err)
			}
			if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
				return fmt.Errorf("river migrate: %w", err)
			}
			return nil
		},
		open: func(ctx context.Context, dir string) (queue, error) {
			db, err := openSQLite(dir, "river.db", synchronous)
			if err != nil {
				return nil, err
			}
			c, err := river.NewClient(riversqlite.New(db), &river.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				db.Close()
				return nil, fmt.Errorf("river client: %w", err)
			}
			return &riverQueue{db: db, insert: c}, nil
		},
	}
}

type riverQueue struct {
	db     *sql.DB
	insert *river.Client[*sql.Tx]
}

func (q *riverQueue) Insert(ctx context.Context, t int64) error {
	_, err := q.insert.Insert(ctx, riverArgs{T: t}, nil)
	return err
}

func (q *riverQueue) InsertBatch(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverArgs{}}
	}
	_, err := q.insert.InsertMany(ctx, params)
	return err
}

func (q *riverQueue) Pending(ctx context.Context) (bool, error) {
	var n int
	err := q.db.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&n)
	return n != 0, err
}

func (q *riverQueue) Work(ctx context.Context, workers int, h handler, ready func()) error {
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(ctx context.Context, j *river.Job[riverArgs]) error {
		return h(ctx, j.Args.T)
	}))
	c, err := river.NewClient(riversqlite.New(q.db), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Workers:           w,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
	})
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

func (q *riverQueue) Close() error { return q.db.Close() }
