package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.DependencyReader = (*Store)(nil)

// depQueries are the statements of dependencies and batches (migration
// 0012; see settle.go for how the end of a job settles its dependents).
type depQueries struct {
	// insert inserts the jobs of a submit that names dependencies or
	// batches, each in the state its plan gave it.
	insert string
	// flag marks the jobs $1 as depended on, under their row lock, and
	// counts a version of those it changes; share then holds the jobs $1
	// FOR SHARE and returns their states as of that lock.
	flag, share string
	// batchRow makes the row of batch $1; lockShared and lockExclusive
	// take its lock and say whether it is closed; members lists the jobs
	// of the batch; closeBatches closes the batches $1.
	batchRow, lockShared, lockExclusive, members, closeBatches string
	// lockDependents locks the waiting jobs that name one of $1, and
	// depStates returns, in a later statement, by dependent, the first of
	// $1 it names and states of its dependencies that have not succeeded
	// (NULL for a job that no longer exists). lockWaiting and
	// waitingStates do the same for the waiting jobs $1.
	lockDependents, depStates  string
	lockWaiting, waitingStates string
	// dependents and batchInfo are the reads of DependencyReader;
	// waitingOn, lockJob and delete Delete's of a job others name;
	// lockBatches and dropBatches remove the rows of emptied batches;
	// pruneHeld and deleteHeld Prune's of jobs others name; sweep finds
	// waiting jobs to settle, and emptyBatches the batches left without
	// jobs (sweepWaiting).
	dependents, batchInfo      string
	waitingOn, lockJob, delete string
	lockBatches, dropBatches   string
	pruneHeld, deleteHeld      string
	sweep, emptyBatches        string
}

func newDepQueries(s, t string) depQueries {
	var q depQueries
	q.insert = `INSERT INTO ` + t + ` (id, key, kind, queue, partition, state, priority, run_at, attempt, updated_at,
			finished_at, payload, doc, tags, meta, after, after_any, batch, after_batch, depended)
		SELECT id, key, kind, queue, partition, state, priority, run_at, 0, updated_at,
			finished_at, payload, doc, tags::jsonb, meta::jsonb, string_to_array(after, ','), after_any, batch, after_batch, depended
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::timestamptz[],
			$9::timestamptz[], $10::timestamptz[], $11::bytea[], $12::bytea[], $13::text[], $14::text[], $15::text[],
			$16::bool[], $17::text[], $18::text[], $19::bool[])
			AS u(id, key, kind, queue, partition, state, priority, run_at, updated_at, finished_at, payload, doc, tags, meta,
			after, after_any, batch, after_batch, depended)
		ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
		RETURNING id`
	// The flag counts a version, so that a write that read the job before
	// it (without the flag) fails its version check and reads it again.
	// Both lock in ID order, as every statement that locks several jobs.
	q.flag = `UPDATE ` + t + ` SET depended = true, version = version + 1
		WHERE id IN (SELECT id FROM ` + t + ` WHERE id = ANY($1) AND NOT depended ORDER BY id FOR NO KEY UPDATE)`
	q.share = `SELECT id, state FROM ` + t + ` WHERE id = ANY($1) ORDER BY id FOR SHARE`
	b := s + `.batches`
	q.batchRow = `INSERT INTO ` + b + ` (name) VALUES ($1) ON CONFLICT DO NOTHING`
	q.lockShared = `SELECT closed FROM ` + b + ` WHERE name = $1 FOR SHARE`
	q.lockExclusive = `SELECT closed FROM ` + b + ` WHERE name = $1 FOR UPDATE`
	q.members = `SELECT id FROM ` + t + ` WHERE batch = $1 ORDER BY id`
	q.closeBatches = `UPDATE ` + b + ` SET closed = true WHERE name = ANY($1) AND NOT closed`
	// The states an end's settling reads are few however many jobs a
	// dependent waits for: of each dependent, the first dependency that
	// decides it (one that has not ended; without after_any, one that
	// failed, was canceled or is gone), looked for from the one after the
	// dependency that ended on, in the order of after and round
	// (storekit.Settle's walk, which stops there too), and none if all
	// ended; the state of the one that ended is the writer's to know. Ends
	// in the order of after (a batch's jobs claimed first in, first out)
	// find the next one pending at once. after is unnested in the select
	// list, which yields one element at a time (unnest in FROM would make
	// them all first), and each one's state is a subquery of its own, so
	// that the walk is not reordered by a join and stops at the first that
	// decides.
	// The waiting jobs are locked without their after and payload, which
	// settling does not need: a callback of a large batch is locked at
	// every end of a job of the batch.
	locked := strings.Replace(strings.Replace(cols, "after, after_any", "NULL::text[], after_any", 1),
		"payload,", "NULL::bytea,", 1)
	q.lockDependents = `SELECT ` + locked + ` FROM ` + t + ` WHERE after && $1::text[] AND state = 'waiting' ORDER BY id FOR UPDATE`
	q.depStates = `SELECT c.id, c.after[p.pos], x.dep, x.state FROM ` + t + ` c
		CROSS JOIN LATERAL (SELECT coalesce(min(array_position(c.after, e)), 1) AS pos FROM unnest($1::text[]) AS e) p
		LEFT JOIN LATERAL (
			SELECT y.dep, y.state FROM (
				SELECT z.dep, (SELECT d.state FROM ` + t + ` d WHERE d.id = z.dep) AS state
				FROM (SELECT unnest(c.after[p.pos + 1:] || c.after[:p.pos - 1]) AS dep) z
				OFFSET 0) y
			WHERE y.state IS DISTINCT FROM 'succeeded'
			AND (NOT c.after_any OR y.state IN ('waiting', 'queued', 'running'))
			LIMIT 1) x ON true
		WHERE c.after && $1::text[] AND c.state = 'waiting'`
	// A sweep's or an import's settling reads every dependency that has
	// not succeeded, in the order of after.
	q.lockWaiting = `SELECT ` + locked + ` FROM ` + t + ` WHERE id = ANY($1) AND state = 'waiting' ORDER BY id FOR UPDATE`
	q.waitingStates = `SELECT c.id, NULL::text, a.dep, d.state FROM ` + t + ` c
		CROSS JOIN LATERAL unnest(c.after) WITH ORDINALITY AS a(dep, i)
		LEFT JOIN ` + t + ` d ON d.id = a.dep
		WHERE c.id = ANY($1) AND c.state = 'waiting' AND d.state IS DISTINCT FROM 'succeeded'
		ORDER BY c.id, a.i`
	q.dependents = `SELECT ` + cols + ` FROM ` + t + ` WHERE after @> ARRAY[$1::text] ORDER BY id`
	q.batchInfo = `SELECT (SELECT closed FROM ` + b + ` WHERE name = $1),
		ARRAY(SELECT id FROM ` + t + ` WHERE after_batch = $1 ORDER BY id),
		(SELECT json_object_agg(state, n) FROM (SELECT state, count(*) AS n FROM ` + t + ` WHERE batch = $1 GROUP BY state) x)`
	q.waitingOn = `SELECT id FROM ` + t + ` WHERE after @> ARRAY[$1::text] AND state = 'waiting' ORDER BY id LIMIT 1`
	q.lockJob = `SELECT state FROM ` + t + ` WHERE id = $1 FOR UPDATE`
	q.delete = `DELETE FROM ` + t + ` WHERE id = $1 RETURNING batch, after_batch`
	// A batch's row goes once its jobs are all gone: locked first, so that
	// the submits that hold it have committed, then their jobs looked for
	// in a later statement, which sees them.
	q.lockBatches = `SELECT name FROM ` + b + ` WHERE name = ANY($1) ORDER BY name FOR UPDATE`
	q.dropBatches = `DELETE FROM ` + b + ` x WHERE name = ANY($1)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE batch = x.name)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE after_batch = x.name)`
	q.emptyBatches = `SELECT name FROM ` + b + ` x
		WHERE NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE batch = x.name)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE after_batch = x.name)`
	// Finished jobs that others name are pruned in two statements: locked
	// first, then deleted unless a waiting job names them, in a statement
	// that sees every submit that named them before the lock.
	q.pruneHeld = `SELECT id FROM ` + t + ` WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED`
	q.deleteHeld = `DELETE FROM ` + t + ` j WHERE id = ANY($1)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` w WHERE w.after @> ARRAY[j.id] AND w.state = 'waiting')
		RETURNING batch, after_batch`
	// sweep reads a page of waiting jobs in ID order after $1 (at most $2)
	// from the state index, and returns the last ID read and those whose
	// dependencies say they should not wait: all ended, or (without
	// after_any) one failed, was canceled or is gone.
	q.sweep = `WITH page AS (
		SELECT id, after, after_any FROM ` + t + ` WHERE state = 'waiting' AND id > $1 ORDER BY id LIMIT $2)
	SELECT (SELECT max(id) FROM page), ARRAY(SELECT p.id FROM page p WHERE
		NOT EXISTS (SELECT 1 FROM unnest(p.after) AS a(dep) JOIN ` + t + ` d ON d.id = a.dep
			WHERE d.state NOT IN ('succeeded', 'failed', 'canceled'))
		OR (NOT p.after_any AND EXISTS (SELECT 1 FROM unnest(p.after) AS a(dep) LEFT JOIN ` + t + ` d ON d.id = a.dep
			WHERE d.state IS NULL OR d.state IN ('failed', 'canceled')))
		ORDER BY p.id)`
	return q
}

// dbtx is what runs statements: the store's pool, or a transaction.
type dbtx interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// inTx runs f in a transaction of db (a savepoint if db is one already),
// again if it fails with a deadlock or serialization failure.
func inTx(ctx context.Context, db dbtx, f func(pgx.Tx) error) error {
	for try := 0; ; try++ {
		err := pgx.BeginFunc(ctx, db, f)
		if err == nil || !isRetryable(err) || try == 5 {
			return err
		}
	}
}

// lockDeps marks the jobs ids as depended on and holds them FOR SHARE
// until tx ends, and returns their states as of the lock; a job that does
// not exist is absent. A job that ends while tx holds it waits for tx, and
// settles the waiting jobs tx made (they name it) once tx has committed; a
// job that ended before is seen ended here. Two statements, one round
// trip.
func (s *Store) lockDeps(ctx context.Context, tx pgx.Tx, ids []string) (map[string]jobstore.State, error) {
	out := make(map[string]jobstore.State, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	b := &pgx.Batch{}
	b.Queue(s.q.deps.flag, ids)
	b.Queue(s.q.deps.share, ids)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rs, err := br.Query()
	if err != nil {
		return nil, err
	}
	for rs.Next() {
		var id, st string
		if err := rs.Scan(&id, &st); err != nil {
			rs.Close()
			return nil, err
		}
		out[id] = jobstore.State(st)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	return out, br.Close()
}

// lockBatch holds the row of batch name until tx ends, FOR UPDATE if
// exclusive (a callback's submit) and FOR SHARE otherwise (a member's),
// making the row if there is none, and reports whether the batch is
// closed.
func (s *Store) lockBatch(ctx context.Context, tx pgx.Tx, name string, exclusive bool) (bool, error) {
	lock := s.q.deps.lockShared
	if exclusive {
		lock = s.q.deps.lockExclusive
	}
	for try := 0; ; try++ {
		b := &pgx.Batch{}
		b.Queue(s.q.deps.batchRow, name)
		b.Queue(lock, name)
		br := tx.SendBatch(ctx, b)
		_, err := br.Exec()
		var closed bool
		if err == nil {
			err = br.QueryRow().Scan(&closed)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, pgx.ErrNoRows) && try < 5 {
			continue // its jobs were all pruned, and its row with them, meanwhile
		}
		return closed, err
	}
}

// members returns the IDs of the jobs of batch name, in ID order.
func (s *Store) members(ctx context.Context, tx pgx.Tx, name string) ([]string, error) {
	rs, err := tx.Query(ctx, s.q.deps.members, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rs, pgx.RowTo[string])
}

// Dependents returns the jobs that name id in their After, oldest first,
// through the index of the after column. It implements
// jobstore.DependencyReader. Returns an error wrapping
// jobstore.ErrInvalidID for a malformed ID.
func (s *Store) Dependents(ctx context.Context, id string) ([]jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return nil, fmt.Errorf("pgstore: dependents: %w", err)
	}
	if err := s.check(ctx, "dependents"); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, s.q.deps.dependents, id)
	if err != nil {
		return nil, s.fail(ctx, "dependents", err)
	}
	defer rs.Close()
	var out []jobstore.Job
	var sc rowScanner
	for rs.Next() {
		r, err := sc.scan(rs)
		if errors.Is(err, jobstore.ErrCorrupt) {
			return nil, fmt.Errorf("pgstore: dependents: %w", err)
		}
		if err != nil {
			return nil, s.fail(ctx, "dependents", err)
		}
		out = append(out, r.job)
	}
	if err := rs.Err(); err != nil {
		return nil, s.fail(ctx, "dependents", err)
	}
	return out, nil
}

// Batch returns the named batch and the states of its jobs, in one
// statement. It implements jobstore.DependencyReader. Returns an error
// wrapping jobstore.ErrInvalidInput for an invalid name and
// jobstore.ErrNotFound for a batch without jobs.
func (s *Store) Batch(ctx context.Context, name string) (jobstore.BatchInfo, error) {
	if err := jobstore.ValidateBatchName(name); err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("pgstore: batch: %w", err)
	}
	if err := s.check(ctx, "batch"); err != nil {
		return jobstore.BatchInfo{}, err
	}
	var (
		closed    *bool
		callbacks []string
		states    []byte
	)
	if err := s.pool.QueryRow(ctx, s.q.deps.batchInfo, name).Scan(&closed, &callbacks, &states); err != nil {
		return jobstore.BatchInfo{}, s.fail(ctx, "batch", err)
	}
	info := jobstore.BatchInfo{Name: name, States: map[jobstore.State]int{}, Callbacks: callbacks}
	if len(states) > 0 {
		if err := json.Unmarshal(states, &info.States); err != nil {
			return jobstore.BatchInfo{}, fmt.Errorf("pgstore: batch %s: %w", name, err)
		}
	}
	for _, n := range info.States {
		info.Total += n
	}
	if info.Total == 0 && len(callbacks) == 0 {
		return jobstore.BatchInfo{}, fmt.Errorf("pgstore: %w", storekit.NoBatch(name))
	}
	if len(info.Callbacks) == 0 {
		info.Callbacks = nil
	}
	info.Closed = (closed != nil && *closed) || len(callbacks) > 0
	return info, nil
}

// batchNames collects the batch names of deleted jobs (the batch and
// after_batch columns a DELETE returned) into names.
func batchNames(names map[string]bool, batch, afterBatch *string) {
	for _, b := range []*string{batch, afterBatch} {
		if b != nil {
			names[*b] = true
		}
	}
}

// dropBatches removes the rows of the batches names whose jobs are all
// gone, after a prune or a delete. A submit to one of them meanwhile waits
// for the row lock, then makes the row again.
func (s *Store) dropBatches(ctx context.Context, names map[string]bool) error {
	if len(names) == 0 {
		return nil
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	slices.Sort(list)
	return inTx(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(s.q.deps.lockBatches, list)
		b.Queue(s.q.deps.dropBatches, list)
		return tx.SendBatch(ctx, b).Close()
	})
}

// joinIDs is the after column of a job as insert takes it: the IDs joined
// by commas (an ID has none), or NULL for none.
func joinIDs(ids []string) *string {
	if len(ids) == 0 {
		return nil
	}
	v := strings.Join(ids, ",")
	return &v
}

// nullString is s, or NULL for "".
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
