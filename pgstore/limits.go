package pgstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobdir/jobdir/jobstore"
)

// Limits and rates of queues (SetQueueLimit, SetPartitionLimit,
// SetQueueRate). A job holds a place in its queue's limit, and in its
// partition's, while it is running in the database: the limits count
// running rows, which a worker's death ends through the recovery of its
// lease session, as it ends the lease. A rate counts the starts of the
// queue in the table queue_starts, on the database's clock.
//
// A claim that may take a limited queue's job runs two statements in one
// transaction, sent in one round trip (claimLimitedOnce): the first tries
// the transaction-level advisory lock of each limited queue the request
// accepts, and leaves the names of those it got in a setting of the
// transaction; the second, whose snapshot is taken after those locks were
// granted, and so sees every claim of those queues that committed before,
// counts their running jobs, partitions and starts, and claims in claim
// order among the jobs of the queues that are not limited and of the
// limited queues it holds, as many of each limited queue's as it has
// room for. A queue whose lock another claim holds is passed over, as a
// row another claim holds is (SKIP LOCKED); only a claim that found
// nothing else waits for such a lock, for at most lockWait, so that the
// claims that meet at a busy queue take turns rather than poll. Only
// claims of limited queues take the locks; the fast path (claimFast,
// claimManyFast) passes over every limited queue's jobs.

// limitedCond is true for a row of the queues table that limits its
// queue.
const limitedCond = `(queue_limit > 0 OR per_partition > 0 OR rate_n > 0)`

// limitedNames is an array of the names of the limited queues of the
// queues table qs, sorted.
func limitedNames(qs string) string {
	return `ARRAY(SELECT name FROM ` + qs + ` WHERE ` + limitedCond + ` ORDER BY name)`
}

// heldBack selects the names of the queues of qs whose jobs a claim of one
// statement passes over: the paused ones, and the limited ones, which only
// the claims that count them take.
func heldBack(qs string) string {
	return `SELECT name FROM ` + qs + ` WHERE paused OR ` + limitedCond
}

// claimQueuesSetting is the setting of a claim's transaction that names
// the limited queues whose locks it holds, separated by commas (a queue
// name has none).
const claimQueuesSetting = `jobdir.claim_queues`

// limitQueries adds the statements of limits and rates to q, for the
// schema s (quoted) whose jobs table is t.
func limitQueries(q *queries, s, t string) {
	qs, st, ss := s+".queues", s+".queue_starts", s+".sessions"
	q.limitedList = `SELECT ` + limitedNames(qs)
	// jobWriters lists the transactions of other sessions that hold the
	// jobs table ($1) for writing; stillRunning, those of $1 that have
	// not ended (a transaction holds its virtual transaction ID's lock
	// until it ends; the IDs are not reused meanwhile).
	q.jobWriters = `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE locktype = 'relation' AND relation = $1::regclass AND mode = 'RowExclusiveLock'
		AND granted AND pid <> pg_backend_pid()`
	q.stillRunning = `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE virtualtransaction = ANY($1::text[])`
	// A setting's change: an upsert of some columns of the queue $1 (to
	// $3, and $4 for a rate's window), a notification on the work channel
	// $2, and the limited queues as the change left them.
	set := func(columns, values, assign, extra string) string {
		return `WITH u AS (
			INSERT INTO ` + qs + ` AS q (name, ` + columns + `) VALUES ($1, ` + values + `)
			ON CONFLICT (name) DO UPDATE SET ` + assign + `, updated_at = now()
			RETURNING name, ` + limitedCond + ` AS limited)` + extra + `
		SELECT ARRAY(SELECT name FROM ` + qs + ` WHERE ` + limitedCond + ` AND name <> $1
			UNION ALL SELECT name FROM u WHERE limited ORDER BY 1)
		FROM (SELECT pg_notify($2, '')) n`
	}
	q.limitQueue = set(`queue_limit`, `$3`, `queue_limit = EXCLUDED.queue_limit`, "")
	q.limitPartitions = set(`per_partition`, `$3`, `per_partition = EXCLUDED.per_partition`, "")
	q.rateQueue = set(`rate_n, rate_per_us`, `$3, $4`, `rate_n = EXCLUDED.rate_n, rate_per_us = EXCLUDED.rate_per_us`,
		`, d AS (DELETE FROM `+st+` WHERE queue = $1 AND $3 = 0)`)

	// lockLimited tries the advisory lock of each limited queue of $1
	// that is not paused, in name order, in the key space of the
	// schema's OID ($2; the lease sessions' locks are pairs of integers,
	// these one bigint); it names those it got in claimQueuesSetting and
	// counts those another claim holds. waitLimited takes them all,
	// waiting for the claims that hold them, which never wait for
	// anything but the server (a claim's statements are sent at once).
	lockKey := `($2::bigint << 32) | (hashtext(l.name)::bigint & 4294967295)`
	lock := func(try string) string {
		return `SELECT set_config('` + claimQueuesSetting + `', coalesce(string_agg(name, ',') FILTER (WHERE got), ''), true),
			count(*) FILTER (WHERE NOT got)
		FROM (SELECT l.name, ` + try + ` AS got
			FROM (SELECT name FROM ` + qs + ` WHERE name = ANY($1) AND NOT paused AND ` + limitedCond + `
				ORDER BY name OFFSET 0) l
			OFFSET 0) x`
	}
	q.lockLimited = lock(`pg_try_advisory_xact_lock(` + lockKey + `)`)
	q.waitLimited = lock(`pg_advisory_xact_lock(` + lockKey + `)::text = ''`)

	// The limited claims: $1 worker, $2 session, $3 now, $6 the most
	// jobs, $7 the lock space of sessions, and, as the request says, $4
	// its queues and $5 its kinds ('{}' for any).
	//
	// held is each limited queue whose lock the transaction holds, with
	// its room (how many more of its jobs may start now: the least of
	// its limit less its running jobs, its rate less the starts in its
	// window, and $6) and its full partitions. lc is, for each held
	// queue, its first due jobs in claim order, passing over the full
	// partitions, and of each partition only as many as it has room for;
	// lk keeps of them as many as the queue has room for. A job of a queue
	// with a rate starts at the server's clock (clk), as its start is
	// recorded (started); aged keeps a queue's starts in its window and its
	// latest N (so that a window made longer, or an N made larger, still
	// counts the starts that matter), and ahead
	// counts a start later than the clock (a clock set back) as made now,
	// so that it holds the queue for one window at most.
	kinds := `(cardinality($5::text[]) = 0 OR kind = ANY($5::text[]))`
	window := `h.rate_per_us * interval '1 microsecond'`
	limited := func(free string) string {
		return `WITH async AS (SELECT set_config('synchronous_commit', 'off', true) AS off),
		live AS (SELECT id FROM ` + ss + `
			WHERE id = $2 AND dead_since IS NULL AND expires_at >= now()
			FOR KEY SHARE),
		clk AS (SELECT clock_timestamp() AS now),
		lim AS (` + heldBack(qs) + `),
		held AS (
			SELECT h.name, h.per_partition, h.rate_n, h.rate_per_us,
				greatest(0, least($6,
					CASE WHEN h.queue_limit > 0 THEN h.queue_limit -
						(SELECT count(*) FROM ` + t + ` r WHERE r.state = 'running' AND r.queue = h.name) ELSE $6 END,
					CASE WHEN h.rate_n > 0 THEN h.rate_n -
						(SELECT count(*) FROM ` + st + ` x WHERE x.queue = h.name AND x.at > (SELECT now FROM clk) - ` + window + `) ELSE $6 END)) AS room,
				ARRAY(SELECT r.partition FROM ` + t + ` r
					WHERE h.per_partition > 0 AND r.state = 'running' AND r.queue = h.name AND r.partition IS NOT NULL
					GROUP BY r.partition HAVING count(*) >= h.per_partition) AS full_parts
			FROM ` + qs + ` h
			WHERE NOT h.paused AND ` + limitedCond + `
			AND h.name = ANY(string_to_array(current_setting('` + claimQueuesSetting + `', true), ','))),
		lc AS (
			SELECT p.id, p.queue, p.priority, p.run_at, h.room
			FROM held h, LATERAL (
				SELECT x.*, row_number() OVER (PARTITION BY x.partition ORDER BY x.priority DESC, x.run_at, x.id) AS pn
				FROM (SELECT id, queue, priority, run_at, partition FROM ` + t + `
					WHERE state = 'queued' AND queue = h.name AND run_at <= $3 AND ` + kinds + `
					AND (partition IS NULL OR partition <> ALL(h.full_parts))
					ORDER BY priority DESC, run_at, id
					LIMIT CASE WHEN h.per_partition > 0 THEN 4 * h.room ELSE h.room END) x) p
			WHERE h.per_partition = 0 OR p.partition IS NULL
			OR p.pn + (SELECT count(*) FROM ` + t + ` r
				WHERE r.state = 'running' AND r.queue = h.name AND r.partition = p.partition) <= h.per_partition),
		lk AS (
			SELECT id FROM (SELECT id, room,
				row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, id) AS qn FROM lc) z
			WHERE qn <= room),
		free AS (` + free + `),
		picked AS (
			SELECT j.id AS pid,
				CASE WHEN j.queue IN (SELECT name FROM held WHERE rate_n > 0) THEN (SELECT now FROM clk) ELSE $3 END AS at
			FROM ` + t + ` j
			WHERE j.id IN (SELECT id FROM free UNION ALL SELECT id FROM lk)
			AND j.state = 'queued' AND j.run_at <= $3
			ORDER BY j.priority DESC, j.run_at, j.id
			LIMIT $6
			FOR UPDATE OF j SKIP LOCKED),
		u AS (
			UPDATE ` + t + ` SET state = 'running', attempt = attempt + 1, worker = $1, session = $2,
				started_at = picked.at, updated_at = picked.at, cancel_requested = false, version = version + 1
			FROM picked
			WHERE id = picked.pid
			AND (SELECT off FROM async) IS NOT NULL
			AND EXISTS (SELECT 1 FROM live)
			AND (SELECT NOT pg_try_advisory_xact_lock($7::int, $2))
			RETURNING ` + qualified(cols, t) + `),
		started AS (
			INSERT INTO ` + st + ` (queue, at)
			SELECT u.queue, (SELECT now FROM clk) FROM u WHERE u.queue IN (SELECT name FROM held WHERE rate_n > 0)),
		aged AS (
			DELETE FROM ` + st + ` x USING held h
			WHERE x.queue = h.name AND h.rate_n > 0 AND x.at <= (SELECT now FROM clk) - ` + window + `
			AND x.at < (SELECT y.at FROM ` + st + ` y
				WHERE y.queue = h.name ORDER BY y.at DESC OFFSET greatest(h.rate_n - 1, 0) LIMIT 1)),
		ahead AS (
			UPDATE ` + st + ` x SET at = (SELECT now FROM clk) FROM held h
			WHERE x.queue = h.name AND h.rate_n > 0 AND x.at > (SELECT now FROM clk))
		SELECT ` + cols + ` FROM u`
	}
	notLim := `queue <> ALL(ARRAY(SELECT name FROM lim))`
	q.limitedAll = limited(`SELECT id FROM ` + t + `
		WHERE state = 'queued' AND run_at <= $3 AND ` + notLim + ` AND cardinality($5::text[]) = 0 AND cardinality($4::text[]) = 0
		ORDER BY priority DESC, run_at, id
		LIMIT $6`)
	q.limitedKinds = limited(`SELECT c.id FROM unnest($5::text[]) AS k(kind),
		LATERAL (SELECT id FROM ` + t + `
			WHERE state = 'queued' AND kind = k.kind AND run_at <= $3 AND ` + notLim + `
			ORDER BY priority DESC, run_at, id
			LIMIT $6) c
		WHERE cardinality($4::text[]) = 0`)
	q.limitedByQueue = limited(`SELECT c.id FROM unnest($4::text[]) AS qq(queue),
		LATERAL (SELECT id FROM ` + t + `
			WHERE state = 'queued' AND queue = qq.queue AND run_at <= $3 AND ` + kinds + `
			ORDER BY priority DESC, run_at, id
			LIMIT $6) c
		WHERE qq.queue <> ALL(ARRAY(SELECT name FROM lim))`)

	// nextLimited is, of the limited queues $1 that are not paused, the
	// earliest time one of their queued jobs of the kinds $2 may start,
	// in the clock of $3 (the claimant's now): its RunAt, or later, when
	// the queue's rate window has room again. Queues whose limit is
	// reached, and full partitions, are left out: the end of a running
	// job notifies.
	q.nextLimited = `SELECT min(n.at) FROM (
		SELECT CASE WHEN rs.nth IS NULL THEN e.run_at
			ELSE greatest(e.run_at, $3::timestamptz + (least(rs.nth, c.now) + l.rate_per_us * interval '1 microsecond' - c.now)) END AS at
		FROM ` + qs + ` l
		CROSS JOIN (SELECT clock_timestamp() AS now) c
		CROSS JOIN LATERAL (SELECT ARRAY(SELECT r.partition FROM ` + t + ` r
			WHERE l.per_partition > 0 AND r.state = 'running' AND r.queue = l.name AND r.partition IS NOT NULL
			GROUP BY r.partition HAVING count(*) >= l.per_partition) AS parts) fp
		CROSS JOIN LATERAL (` + earliestRunAt(t, "queue = l.name AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[])) AND (partition IS NULL OR partition <> ALL(fp.parts))") + `) e
		LEFT JOIN LATERAL (SELECT x.at AS nth FROM ` + st + ` x
			WHERE l.rate_n > 0 AND x.queue = l.name AND x.at > c.now - l.rate_per_us * interval '1 microsecond'
			ORDER BY x.at DESC OFFSET greatest(l.rate_n - 1, 0) LIMIT 1) rs ON true
		WHERE l.name = ANY($1) AND NOT l.paused AND ` + limitedCond + ` AND e.run_at IS NOT NULL
		AND (l.queue_limit = 0 OR (SELECT count(*) FROM ` + t + ` r WHERE r.state = 'running' AND r.queue = l.name) < l.queue_limit)) n`
}

// claimLimited claims up to max jobs that req accepts, under sess, by the
// claim of limited queues: lim are the limited queues req accepts, whose
// locks it tries. If it claims nothing while another claim held one of
// those locks, it claims again, waiting for them: claims that meet each
// other at a busy queue take turns, rather than poll. It returns the rows
// claimed, in no order, and the error of a row whose doc column does not
// decode (its job failed).
func (s *Store) claimLimited(ctx context.Context, req jobstore.ClaimRequest, max int, lim []string, sess *session, now time.Time) (got []row, corrupt, err error) {
	got, corrupt, busy, err := s.claimLimitedOnce(ctx, s.q.lockLimited, req, max, lim, sess, now)
	if err != nil || len(got) > 0 || corrupt != nil || busy == 0 {
		return got, corrupt, err
	}
	got, corrupt, _, err = s.claimLimitedOnce(ctx, s.q.waitLimited, req, max, lim, sess, now)
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == lockNotAvailable {
		// A claim held a queue's lock past lockWait: its transaction
		// stalled (its client cut off halfway through sending it, say).
		// Nothing was claimed; noJob says to try again soon.
		return nil, nil, nil
	}
	return got, corrupt, err
}

// lockNotAvailable is the SQLSTATE of a lock not granted within
// lock_timeout.
const lockNotAvailable = "55P03"

// lockWait bounds how long a claim waits for each limited queue's lock
// (a claim that accepts several busy queues may wait that long for each),
// which another claim holds for the few milliseconds of its
// transaction: a transaction that stalls while it holds one (its client
// cut off halfway through sending it) delays the other claims of that
// queue by at most this much at a time, never the claims of other queues.
const lockWait = 100 * time.Millisecond

// claimLimitedOnce is one claim of claimLimited, whose statement lock
// takes the queues' locks, and reports how many of them it found busy.
func (s *Store) claimLimitedOnce(ctx context.Context, lock string, req jobstore.ClaimRequest, max int, lim []string, sess *session, now time.Time) (got []row, corrupt error, busy int, err error) {
	b := &pgx.Batch{}
	b.Queue(genericPlan)
	if lock == s.q.waitLimited {
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(lockWait.Milliseconds(), 10))
	}
	b.Queue(lock, lim, int64(s.ns))
	kinds := kindsOrNone(req.Kinds)
	switch {
	case len(req.Queues) > 0:
		b.Queue(s.q.limitedByQueue, req.Worker, sess.id, now, req.Queues, kinds, max, s.ns)
	case len(req.Kinds) > 0:
		b.Queue(s.q.limitedKinds, req.Worker, sess.id, now, []string{}, kinds, max, s.ns)
	default:
		b.Queue(s.q.limitedAll, req.Worker, sess.id, now, []string{}, kinds, max, s.ns)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close() // on the error returns below
	for range b.Len() - 2 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, 0, err
		}
	}
	var held string
	if err := br.QueryRow().Scan(&held, &busy); err != nil {
		return nil, nil, 0, err
	}
	rs, err := br.Query()
	if err != nil {
		return nil, nil, 0, err
	}
	got, bad, err := readClaimed(rs, max)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := br.Close(); err != nil {
		return nil, nil, 0, err
	}
	return got, s.failAllCorrupt(ctx, bad), busy, nil
}

// readClaimed reads the rows a claim statement of at most max jobs
// returned, and closes rs. A row whose doc column does not decode is left
// out, and its error returned in corrupt, for failAllCorrupt once the
// claim has ended.
func readClaimed(rs pgx.Rows, max int) (got []row, corrupt []error, err error) {
	defer rs.Close()
	got = make([]row, 0, max)
	var sc rowScanner
	for rs.Next() {
		r, err := sc.scan(rs)
		if errors.Is(err, jobstore.ErrCorrupt) {
			corrupt = append(corrupt, err)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		got = append(got, r)
	}
	return got, corrupt, rs.Err()
}

// nextLimitedAt returns the earliest time, in the clock of now, that a
// queued job of the limited queues lim that req accepts may start (zero
// if none may until a running job ends).
func (s *Store) nextLimitedAt(ctx context.Context, req jobstore.ClaimRequest, lim []string, now time.Time) (time.Time, error) {
	var at *time.Time
	if err := s.pool.QueryRow(ctx, s.q.nextLimited, lim, kindsOrNone(req.Kinds), now).Scan(&at); err != nil {
		return time.Time{}, err
	}
	if at == nil {
		return time.Time{}, nil
	}
	return at.UTC(), nil
}
