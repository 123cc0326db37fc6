package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"
)

// goqiteSchema is goqite v0.4.0's schema_sqlite.sql, which the package
// leaves to its user to apply.
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);
`

const goqiteQueueName = "bench"

func goqiteSystem(name, label, synchronous string) *system {
	return &system{
		name:        name,
		label:       label,
		durable:     synchronous == "FULL",
		rescueAfter: "5 s (message timeout default)",
		setup: func(ctx context.Context, dir string) error {
			db, err := openSQLite(dir, "goqite.db", synchronous)
			if err != nil {
				return err
			}
			defer db.Close()
			if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
				return fmt.Errorf("goqite schema: %w", err)
			}
			return nil
		},
		open: func(ctx context.Context, dir string) (queue, error) {
			db, err := openSQLite(dir, "goqite.db", synchronous)
			if err != nil {
				return nil, err
			}
			return &goqiteQueue{db: db, q: goqite.New(goqite.NewOpts{DB: db, Name: goqiteQueueName})}, nil
		},
	}
}

type goqiteQueue struct {
	db *sql.DB
	q  *goqite.Queue
}

type goqiteBody struct {
	T int64 `json:"t"`
}

func (q *goqiteQueue) Insert(ctx context.Context, t int64) error {
	body, err := json.Marshal(goqiteBody{T: t})
	if err != nil {
		return err
	}
	_, err = jobs.Create(ctx, q.q, "bench", goqite.Message{Body: body})
	return err
}

func (q *goqiteQueue) InsertBatch(ctx context.Context, n int) error {
	body, err := json.Marshal(goqiteBody{})
	if err != nil {
		return err
	}
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for range n {
		if _, err := jobs.CreateTx(ctx, tx, q.q, "bench", goqite.Message{Body: body}); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (q *goqiteQueue) Pending(ctx context.Context) (bool, error) {
	var n int
	err := q.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM goqite WHERE queue = ?)`, goqiteQueueName).Scan(&n)
	return n != 0, err
}

func (q *goqiteQueue) Work(ctx context.Context, workers int, h handler, ready func()) error {
	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: workers, Queue: q.q})
	r.Register("bench", func(ctx context.Context, m []byte) error {
		var b goqiteBody
		if err := json.Unmarshal(m, &b); err != nil {
			return err
		}
		return h(ctx, b.T)
	})
	ready()
	r.Start(ctx) // returns when ctx ends and running jobs are done
	return nil
}

func (q *goqiteQueue) Close() error { return q.db.Close() }
