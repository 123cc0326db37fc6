package pgstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
)

// cols are the columns every read of a whole job selects, in the order
// scanRow expects.
const cols = `id, key, kind, queue, state, priority, run_at, attempt, worker, started_at, updated_at,
	finished_at, cancel_requested, session, waited, version, payload, result, doc, tags, meta,
	after, after_any, batch, after_batch, depended`

// row is one job as stored.
type row struct {
	job jobstore.Job
	// session is the lease session of a running job (0 if none).
	session int32
	waited  bool
	version int64
	// depended says that some job names this one in its After (see
	// migration 0012): its end settles them.
	depended bool
}

// scanRow reads the columns of cols into a row, and any further columns
// into extra. A doc that does not decode
// gives an error wrapping jobstore.ErrCorrupt that names the job.
func scanRow(r pgx.Row, extra ...any) (row, error) {
	return new(rowScanner).scan(r, extra...)
}

// rowScanner reads rows of cols. A loop over many rows reuses one, so
// that the columns' destinations are allocated once, not for each row
// (every destination escapes to pgx).
type rowScanner struct {
	v    rowValues
	dest []any
}

// rowValues are the destinations of the columns of one row.
type rowValues struct {
	out                  row
	id, kind, queue      string
	state, w             string
	key                  *string
	prio, attempt        int32
	runAt, updated       time.Time
	started, finished    *time.Time
	cancelReq            bool
	session              *int32
	payload, result, doc []byte
	tags, meta           []byte
	after                []string
	batch, afterBatch    *string
}

// scan reads the columns of cols of r into a row, and any further
// columns into extra, as scanRow does.
func (sc *rowScanner) scan(r pgx.Row, extra ...any) (row, error) {
	// Every destination starts empty: the slices a row returns are its
	// own, never those of the row before.
	sc.v = rowValues{}
	v := &sc.v
	j := &v.out.job
	if sc.dest == nil {
		sc.dest = []any{&v.id, &v.key, &v.kind, &v.queue, &v.state, &v.prio, &v.runAt, &v.attempt, &v.w,
			&v.started, &v.updated, &v.finished, &v.cancelReq, &v.session, &v.out.waited, &v.out.version,
			&v.payload, &v.result, &v.doc, &v.tags, &v.meta, &v.after, &j.AfterAny, &v.batch, &v.afterBatch,
			&v.out.depended}
	}
	dest := sc.dest
	if len(extra) > 0 {
		dest = append(dest[:len(dest):len(dest)], extra...)
	}
	if err := r.Scan(dest...); err != nil {
		return v.out, err
	}
	var d docFields
	if err := json.Unmarshal(v.doc, &d); err != nil {
		return v.out, &corruptError{id: v.id, column: "doc", err: err}
	}
	if len(v.tags) > 0 {
		if err := json.Unmarshal(v.tags, &j.Tags); err != nil {
			return v.out, &corruptError{id: v.id, column: "tags", err: err}
		}
	}
	if len(v.meta) > 0 {
		if err := json.Unmarshal(v.meta, &j.Meta); err != nil {
			return v.out, &corruptError{id: v.id, column: "meta", err: err}
		}
	}
	j.Partition = d.Partition
	j.MaxAttempts, j.Timeout, j.CreatedAt, j.LastError, j.History = d.MaxAttempts, d.Timeout, d.CreatedAt.UTC(), d.LastError, d.History
	j.ID, j.Kind, j.Queue, j.State, j.Worker = v.id, v.kind, v.queue, jobstore.State(v.state), v.w
	j.Key = ""
	if v.key != nil {
		j.Key = *v.key
	}
	j.Priority, j.Attempt = int(v.prio), int(v.attempt)
	j.RunAt, j.UpdatedAt = v.runAt.UTC(), v.updated.UTC()
	j.StartedAt, j.FinishedAt = timeOrZero(v.started), timeOrZero(v.finished)
	j.CancelRequested = v.cancelReq
	j.Payload, j.Result = nilIfEmpty(v.payload), nilIfEmpty(v.result)
	j.After = nil
	if len(v.after) > 0 {
		j.After = v.after
	}
	j.Batch, j.AfterBatch = "", ""
	if v.batch != nil {
		j.Batch = *v.batch
	}
	if v.afterBatch != nil {
		j.AfterBatch = *v.afterBatch
	}
	if v.session != nil {
		v.out.session = *v.session
	}
	return v.out, nil
}

// corruptError is scanRow's error for a doc, tags or meta column that
// does not decode. It unwraps to jobstore.ErrCorrupt.
type corruptError struct {
	id, column string
	err        error
}

func (e *corruptError) Error() string {
	return fmt.Sprintf("%s: job %s: %s column: %v", jobstore.ErrCorrupt, e.id, e.column, e.err)
}

func (e *corruptError) Unwrap() error { return jobstore.ErrCorrupt }

func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func nilIfEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

// usec returns t cut to the microsecond, the precision of timestamptz, in
// UTC, so that what a call returns is what a later read returns.
func usec(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Microsecond).UTC()
}

// trimTimes cuts every time of j to the microsecond.
func trimTimes(j jobstore.Job) jobstore.Job {
	for _, t := range []*time.Time{&j.RunAt, &j.CreatedAt, &j.UpdatedAt, &j.StartedAt, &j.FinishedAt} {
		*t = usec(*t)
	}
	return j
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nullKey is the key (or partition), or NULL for none.
func nullKey(k string) any {
	if k == "" {
		return nil
	}
	return k
}

// docFields are the fields of a job that have no column of their own: the
// doc column holds their JSON, under the names of jobstore.Job's JSON form.
// A doc written by an earlier version of pgstore holds the whole job: the
// fields that have columns are ignored when it is read, since the columns
// win (a claim changes only them). TestDocFieldsCoverJob fails when jobstore.Job gains a
// field that is neither a column nor here.
type docFields struct {
	Partition   string                   `json:"partition,omitempty"`
	MaxAttempts int                      `json:"max_attempts"`
	Timeout     time.Duration            `json:"timeout_ns,omitempty"`
	CreatedAt   time.Time                `json:"created_at"`
	LastError   string                   `json:"last_error,omitempty"`
	History     []jobstore.AttemptRecord `json:"history,omitempty"`
}

// encodeDoc returns the doc column of j: the JSON of its docFields.
func encodeDoc(j jobstore.Job) ([]byte, error) {
	return json.Marshal(docFields{
		Partition:   j.Partition,
		MaxAttempts: j.MaxAttempts,
		Timeout:     j.Timeout,
		CreatedAt:   j.CreatedAt,
		LastError:   j.LastError,
		History:     j.History,
	})
}

// labels returns the tags and meta columns of j: the JSON of each, or
// NULL for none. They are columns of their own, not in doc, so that a
// process of the release before, which rewrites doc without them, keeps
// them; a job's tags and metadata never change after its submit.
func labels(j jobstore.Job) (tags, meta *string, err error) {
	if len(j.Tags) > 0 {
		b, err := json.Marshal(j.Tags)
		if err != nil {
			return nil, nil, err
		}
		t := string(b)
		tags = &t
	}
	if len(j.Meta) > 0 {
		b, err := json.Marshal(j.Meta)
		if err != nil {
			return nil, nil, err
		}
		m := string(b)
		meta = &m
	}
	return tags, meta, nil
}

// nullBytes is b, or NULL for none.
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}

// queries holds the statements of one schema.
type queries struct {
	schema     string // quoted
	chanWork   string // notification channel: a job may have become claimable
	chanJob    string // notification channel: job <payload> changed
	chanLog    string // notification channel: job <payload>'s log grew
	get        string
	insert     string
	byKey      string
	byKeys     string
	insertMany string
	// insertManyNew is insertMany for jobs without keys.
	insertManyNew string
	importMany    string
	// importBatches makes the batches of imported jobs.
	importBatches string
	presentIDs    string
	claim         string
	claimKinds    string
	claimQueues   string
	claimMany     string
	manyKind      string
	manyKinds     string
	manyQueues    string
	nextDue       string
	nextKinds     string
	nextQueues    string
	update        string
	// completeMany is update for many rows at once, without notifyJob.
	completeMany string
	markWaited   string
	appendLog    string
	watch        string
	prune        string
	// deleteJob deletes one finished job that no job names; it returns
	// the state of the job if there is one, whether others name it,
	// whether it deleted it, and its batches.
	deleteJob    string
	counts       string
	compact      string
	vacuumCounts string
	// earliest is the earliest RunAt of the queued jobs; earliestByKind
	// that of each kind of $1 that has queued jobs.
	earliest        string
	earliestByKind  string
	earliestByQueue string
	// The queues' settings (queues.go).
	queueSettings string
	pauseQueue    string
	resumeQueue   string
	// Limits and rates (limits.go): the limited queues; the changes of a
	// setting; the locks and claims of a claim that may take a limited
	// queue's job, by the request's shape; when a limited queue's next
	// job may start.
	limitedList     string
	jobWriters      string
	stillRunning    string
	limitQueue      string
	limitPartitions string
	rateQueue       string
	lockLimited     string
	waitLimited     string
	limitedAll      string
	limitedKinds    string
	limitedByQueue  string
	nextLimited     string
	announce        string
	newSession      string
	renew           string
	findDead        string
	rescue          string
	running         string
	// The registry of workers (workers.go).
	registerWorker   string
	workers          string
	unregisterWorker string
	endedWorkers     string
	// Dependencies and batches (deps.go, settle.go).
	deps depQueries
	// Schedules (schedules.go).
	addSchedule, putSchedule, schedules, getSchedule string
	pauseSchedule, removeSchedule, recordTick        string
}

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	t := s + ".jobs"
	q := queries{schema: s, chanWork: schema + ".work", chanJob: schema + ".job", chanLog: schema + ".log"}
	q.get = `SELECT ` + cols + ` FROM ` + t + ` WHERE id = $1`
	q.insert = `INSERT INTO ` + t + ` (id, key, kind, queue, partition, state, priority, run_at, attempt, updated_at, payload, doc, tags, meta)
		VALUES ($1, $2, $3, $9, $10, 'queued', $4, $5, 0, $6, $7, $8, $11::jsonb, $12::jsonb)
		ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
		RETURNING id`
	q.byKey = `SELECT ` + cols + ` FROM ` + t + ` WHERE key = $1`
	q.byKeys = `SELECT ` + cols + ` FROM ` + t + ` WHERE key = ANY($1)`
	q.insertMany = `INSERT INTO ` + t + ` (id, key, kind, queue, partition, state, priority, run_at, attempt, updated_at, payload, doc, tags, meta)
		SELECT id, key, kind, queue, partition, 'queued', priority, run_at, 0, updated_at, payload, doc, tags::jsonb, meta::jsonb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::timestamptz[], $7::bytea[], $8::bytea[], $9::text[], $10::text[], $11::text[], $12::text[])
			AS u(id, key, kind, priority, run_at, updated_at, payload, doc, queue, partition, tags, meta)
		ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
		RETURNING id`
	q.insertManyNew = `INSERT INTO ` + t + ` (id, kind, queue, partition, state, priority, run_at, attempt, updated_at, payload, doc, tags, meta)
		SELECT id, kind, queue, partition, 'queued', priority, run_at, 0, updated_at, payload, doc, tags::jsonb, meta::jsonb
		FROM unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[], $6::bytea[], $7::bytea[], $8::text[], $9::text[], $10::text[], $11::text[])
			AS u(id, kind, priority, run_at, updated_at, payload, doc, queue, partition, tags, meta)`
	// announce notifies the work channel ($1) in a transaction that does
	// not wait for its commit to be flushed (see announceWork).
	q.announce = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, '')`
	// importMany inserts whole jobs of another store, skipping those whose
	// ID (or key) is taken.
	q.importMany = `INSERT INTO ` + t + ` (id, key, kind, state, priority, run_at, attempt, worker, started_at, updated_at,
			finished_at, cancel_requested, payload, result, doc, queue, partition, tags, meta,
			after, after_any, batch, after_batch, depended)
		SELECT id, key, kind, state, priority, run_at, attempt, worker, started_at, updated_at,
			finished_at, cancel_requested, payload, result, doc, queue, partition, tags::jsonb, meta::jsonb,
			string_to_array(after, ','), after_any, batch, after_batch, depended
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::int[], $8::text[],
			$9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::bool[], $13::bytea[], $14::bytea[], $15::bytea[], $16::text[], $17::text[], $18::text[], $19::text[],
			$20::text[], $21::bool[], $22::text[], $23::text[], $24::bool[])
			AS u(id, key, kind, state, priority, run_at, attempt, worker, started_at, updated_at,
			finished_at, cancel_requested, payload, result, doc, queue, partition, tags, meta,
			after, after_any, batch, after_batch, depended)
		ON CONFLICT DO NOTHING
		RETURNING id`
	// importBatches makes the rows of the batches of imported jobs ($1),
	// closed if they have callbacks ($2).
	q.importBatches = `INSERT INTO ` + s + `.batches AS b (name, closed)
		SELECT name, bool_or(closed) FROM unnest($1::text[], $2::bool[]) AS u(name, closed) GROUP BY name
		ON CONFLICT (name) DO UPDATE SET closed = true WHERE EXCLUDED.closed AND NOT b.closed`
	q.presentIDs = `SELECT coalesce(array_agg(id), '{}') FROM ` + t + ` WHERE id = ANY($1)`
	// A claim does not wait for its commit to be flushed (the setting
	// applies to its own transaction only): a claim lost in a crash of
	// the server leaves the job queued, as if it had not happened, and its
	// claimant has lost its lease session with the crash. Claim guards
	// against the one thing that could follow (see its comment).
	//
	// With kinds, the candidates are the first few due jobs of each kind,
	// each list read in order from the index of its kind; the best of them
	// that no one else holds is locked. An index scan in claim order reads
	// only what it returns, however many jobs the table holds (and the
	// planner, given a filter on kind, might otherwise choose a scan of
	// every queued job and a sort).
	//
	// A claim binds the job to the claimant's lease session only while
	// that session lives: its row is there and not found dead, and its
	// advisory lock is held (by the lease connection: this transaction
	// cannot take it). The session's row is locked FOR KEY SHARE, so a
	// recovery that deletes it waits for the claim to commit and then
	// queues the job again, or goes first, and the claim finds no session
	// and claims nothing. Without that, a claim made just after the lease
	// connection died would hand out a lease that is already lost, or
	// leave its job running under a session that no recovery will look at
	// again. The lock is tried once per statement (an uncorrelated
	// subquery), not once per job claimed: each try is a look-up in the
	// server's shared lock table.
	ss := s + ".sessions"
	// A paused queue's jobs are passed over, whatever the request: the
	// list of paused queues is read by the claim's own statement, so a
	// claim that begins after a pause committed sees it. So are a limited
	// queue's (limits.go): only the claims that count its jobs take them.
	notHeld := `queue <> ALL(ARRAY(` + heldBack(s+`.queues`) + `))`
	claim := func(pick, ns string) string {
		return `WITH async AS (SELECT set_config('synchronous_commit', 'off', true) AS off),
		live AS (SELECT id FROM ` + ss + `
			WHERE id = $2 AND dead_since IS NULL AND expires_at >= now()
			FOR KEY SHARE)
		UPDATE ` + t + ` SET state = 'running', attempt = attempt + 1, worker = $1, session = $2,
			started_at = $3, updated_at = $3, cancel_requested = false, version = version + 1
		WHERE id = (` + pick + `)
		AND (SELECT off FROM async) IS NOT NULL
		AND EXISTS (SELECT 1 FROM live)
		AND (SELECT NOT pg_try_advisory_xact_lock(` + ns + `::int, $2))
		RETURNING ` + cols
	}
	q.claim = claim(`SELECT id FROM `+t+`
		WHERE state = 'queued' AND run_at <= $3 AND `+notHeld+`
		ORDER BY priority DESC, run_at, id
		LIMIT 1
		FOR UPDATE SKIP LOCKED`, "$4")
	q.claimKinds = claim(`SELECT j.id FROM `+t+` j
		WHERE j.id IN (
			SELECT c.id FROM unnest($4::text[]) AS k(kind),
			LATERAL (SELECT id FROM `+t+`
				WHERE state = 'queued' AND kind = k.kind AND run_at <= $3 AND `+notHeld+`
				ORDER BY priority DESC, run_at, id
				LIMIT 8) c)
		AND j.state = 'queued' AND j.run_at <= $3
		ORDER BY j.priority DESC, j.run_at, j.id
		LIMIT 1
		FOR UPDATE OF j SKIP LOCKED`, "$5")
	// With queues ($4), and kinds ($5, none for any), the candidates are
	// read from the claim index of each queue that is not paused.
	q.claimQueues = claim(`SELECT j.id FROM `+t+` j
		WHERE j.id IN (
			SELECT c.id FROM unnest($4::text[]) AS qq(queue),
			LATERAL (SELECT id FROM `+t+`
				WHERE state = 'queued' AND queue = qq.queue AND run_at <= $3
				AND (cardinality($5::text[]) = 0 OR kind = ANY($5::text[]))
				ORDER BY priority DESC, run_at, id
				LIMIT 8) c
			WHERE qq.`+notHeld+`)
		AND j.state = 'queued' AND j.run_at <= $3
		ORDER BY j.priority DESC, j.run_at, j.id
		LIMIT 1
		FOR UPDATE OF j SKIP LOCKED`, "$6")
	// claimMany claims up to $4 jobs ($5 with kinds, $4 the kinds) in one
	// statement, as claim does one, only under a live session ($2, its
	// lock in the space $5, $6 with kinds): the candidates are picked and locked
	// in claim order first, then updated.
	claimMany := func(pick, ns string) string {
		return `WITH async AS (SELECT set_config('synchronous_commit', 'off', true) AS off),
		live AS (SELECT id FROM ` + ss + `
			WHERE id = $2 AND dead_since IS NULL AND expires_at >= now()
			FOR KEY SHARE),
		picked AS (` + pick + `)
		UPDATE ` + t + ` SET state = 'running', attempt = attempt + 1, worker = $1, session = $2,
			started_at = $3, updated_at = $3, cancel_requested = false, version = version + 1
		FROM picked
		WHERE id = picked.pid
		AND (SELECT off FROM async) IS NOT NULL
		AND EXISTS (SELECT 1 FROM live)
		AND (SELECT NOT pg_try_advisory_xact_lock(` + ns + `::int, $2))
		RETURNING ` + qualified(cols, t)
	}
	q.claimMany = claimMany(`SELECT id AS pid FROM `+t+`
		WHERE state = 'queued' AND run_at <= $3 AND `+notHeld+`
		ORDER BY priority DESC, run_at, id
		LIMIT $4
		FOR UPDATE SKIP LOCKED`, "$5")
	// manyKind is manyKinds for one kind ($4), a runner's usual request:
	// the locks are taken in the scan of the kind's claim index, so that
	// jobs that another claim holds are passed over and the next ones
	// taken, up to $5, rather than leaving the batch short.
	q.manyKind = claimMany(`SELECT id AS pid FROM `+t+`
		WHERE state = 'queued' AND kind = $4 AND run_at <= $3 AND `+notHeld+`
		ORDER BY priority DESC, run_at, id
		LIMIT $5
		FOR UPDATE SKIP LOCKED`, "$6")
	q.manyKinds = claimMany(`SELECT j.id AS pid FROM `+t+` j
		WHERE j.id IN (
			SELECT c.id FROM unnest($4::text[]) AS k(kind),
			LATERAL (SELECT id FROM `+t+`
				WHERE state = 'queued' AND kind = k.kind AND run_at <= $3 AND `+notHeld+`
				ORDER BY priority DESC, run_at, id
				LIMIT greatest(8, $5)) c)
		AND j.state = 'queued' AND j.run_at <= $3
		ORDER BY j.priority DESC, j.run_at, j.id
		LIMIT $5
		FOR UPDATE OF j SKIP LOCKED`, "$6")
	// manyQueues is claimQueues for up to $6 jobs, its lock in the space $7.
	q.manyQueues = claimMany(`SELECT j.id AS pid FROM `+t+` j
		WHERE j.id IN (
			SELECT c.id FROM unnest($4::text[]) AS qq(queue),
			LATERAL (SELECT id FROM `+t+`
				WHERE state = 'queued' AND queue = qq.queue AND run_at <= $3
				AND (cardinality($5::text[]) = 0 OR kind = ANY($5::text[]))
				ORDER BY priority DESC, run_at, id
				LIMIT greatest(8, $6)) c
			WHERE qq.`+notHeld+`)
		AND j.state = 'queued' AND j.run_at <= $3
		ORDER BY j.priority DESC, j.run_at, j.id
		LIMIT $6
		FOR UPDATE OF j SKIP LOCKED`, "$7")
	// After a claim that found nothing: the earliest RunAt of the
	// queued jobs (but a limited queue's: see nextLimited), whether the
	// session $1 (its lock in the space $2) still lives, and the limited
	// queues.
	sessionLive := `EXISTS (SELECT 1 FROM ` + ss + ` WHERE id = $1 AND dead_since IS NULL AND expires_at >= now())
		AND NOT pg_try_advisory_xact_lock($2::int, $1)`
	q.earliest = earliestRunAt(t, "")
	q.earliestByKind = `SELECT k.kind, e.run_at FROM unnest($1::text[]) AS k(kind),
		LATERAL (` + earliestRunAt(t, "kind = k.kind") + `) e WHERE e.run_at IS NOT NULL`
	q.earliestByQueue = `SELECT qq.queue, e.run_at FROM unnest($1::text[]) AS qq(queue),
		LATERAL (` + earliestRunAt(t, "queue = qq.queue") + `) e WHERE e.run_at IS NOT NULL`
	// The next jobs of paused queues are not work to wait for.
	limited := limitedNames(s + `.queues`)
	q.nextDue = `SELECT (` + earliestRunAt(t, notHeld) + `), ` + sessionLive + `, ` + limited
	q.nextKinds = `SELECT (SELECT min(e.run_at) FROM unnest($3::text[]) AS k(kind),
		LATERAL (` + earliestRunAt(t, "kind = k.kind AND "+notHeld) + `) e), ` + sessionLive + `, ` + limited
	q.nextQueues = `SELECT (SELECT min(e.run_at) FROM unnest($3::text[]) AS qq(queue),
		LATERAL (` + earliestRunAt(t, "queue = qq.queue AND (cardinality($4::text[]) = 0 OR kind = ANY($4::text[]))") + `) e
		WHERE qq.` + notHeld + `), ` + sessionLive + `, ` + limited
	// A job of a queue with a concurrency limit that stops running frees
	// a place in it: the write notifies the work channel, which wakes the
	// workers waiting for one in every process. (Ending a job of a queue
	// with a rate only frees nothing.)
	slotsFreed := `queue IN (SELECT name FROM ` + s + `.queues WHERE queue_limit > 0 OR per_partition > 0)`
	// update writes a job read at version $2 back, notifying the work
	// channel if it is now queued or frees a place of a limit, and the job channel if $14 says so or
	// it reached a terminal state while a Wait watches it.
	q.update = `WITH u AS (
		UPDATE ` + t + ` SET state = $3, priority = $4, run_at = $5, attempt = $6, worker = $7,
			started_at = $8, updated_at = $9, finished_at = $10, cancel_requested = $11,
			session = CASE WHEN $3 = 'running' THEN session END,
			result = $12, doc = $13, version = version + 1
		WHERE id = $1 AND version = $2
		RETURNING ` + cols + `),
	nw AS (SELECT pg_notify($15, '') FROM u WHERE state = 'queued' OR (state <> 'running' AND ` + slotsFreed + `)),
	nj AS (SELECT pg_notify($16, id) FROM u
		WHERE $14 OR (waited AND state IN ('succeeded', 'failed', 'canceled')))
	SELECT ` + cols + `, (SELECT count(*) FROM nw), (SELECT count(*) FROM nj) FROM u`
	// completeMany writes many jobs, each read at the version given with
	// it, back in one statement, notifying as update does (a completion
	// does not ask for the job channel: its own store's watchers learn of
	// it directly). It returns only what the writer does not know of each
	// row written: its ID, new version, waited flag and payload (which a
	// held lease does not keep); decoding whole rows back cost a fifth of
	// a work-off's client CPU.
	q.completeMany = `WITH v AS (
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::int[],
			$7::text[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::bool[], $12::bytea[], $13::bytea[])
			AS v(id, version, state, priority, run_at, attempt, worker, started_at, updated_at, finished_at,
				cancel_requested, result, doc)),
	u AS (
		UPDATE ` + t + ` SET state = v.state, priority = v.priority, run_at = v.run_at, attempt = v.attempt,
			worker = v.worker, started_at = v.started_at, updated_at = v.updated_at, finished_at = v.finished_at,
			cancel_requested = v.cancel_requested,
			session = CASE WHEN v.state = 'running' THEN ` + t + `.session END,
			result = v.result, doc = v.doc, version = ` + t + `.version + 1
		FROM v
		WHERE ` + t + `.id = v.id AND ` + t + `.version = v.version
		RETURNING ` + t + `.id, ` + t + `.state, ` + t + `.version, ` + t + `.waited, ` + t + `.payload, ` + t + `.queue),
	nw AS (SELECT pg_notify($14, '') FROM u WHERE state = 'queued' OR (state <> 'running' AND ` + slotsFreed + `)),
	nj AS (SELECT pg_notify($15, id) FROM u WHERE waited AND state IN ('succeeded', 'failed', 'canceled'))
	SELECT id, version, waited, payload, (SELECT count(*) FROM nw), (SELECT count(*) FROM nj) FROM u`
	q.markWaited = `UPDATE ` + t + ` SET waited = true WHERE id = $1 RETURNING ` + cols
	// A chunk of a log notifies the log channel if someone follows the
	// job (see Logs.WatchLog): the share lock on the job's row orders the
	// chunk with the follower's mark, which takes the row lock.
	q.appendLog = `WITH j AS (SELECT waited FROM ` + t + ` WHERE id = $1 FOR SHARE),
	ins AS (INSERT INTO ` + s + `.logs (id, "offset", data) VALUES ($1, $2, $3))
	SELECT pg_notify($4, $1) FROM j WHERE waited`
	q.watch = `SELECT state, worker, attempt, cancel_requested FROM ` + t + ` WHERE id = $1`
	// A prune locks the jobs it deletes in ID order and passes over those
	// another transaction holds: two prunes at once (of two processes)
	// that took the same jobs in different orders were a deadlock, which
	// the server broke by failing one of them. A job passed over is
	// deleted by the prune that holds it, or by the next.
	//
	// A job that a waiting job names is kept. The candidates that others
	// name at all (depended) are not deleted here but returned, for
	// pruneHeld to lock and look at again in a statement of their own
	// (see deps.go); so are the batches of the jobs deleted, whose rows
	// may go with them.
	q.prune = `WITH c AS (
		SELECT id, depended FROM ` + t + ` j
		WHERE finished_at < $1 AND state = ANY($3::text[])
		AND NOT (depended AND EXISTS (SELECT 1 FROM ` + t + ` w WHERE w.after @> ARRAY[j.id] AND w.state = 'waiting'))
		ORDER BY id
		LIMIT $2
		FOR UPDATE SKIP LOCKED),
	d AS (DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM c WHERE NOT depended) RETURNING batch, after_batch)
	SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), ARRAY(SELECT id FROM c WHERE depended ORDER BY id),
		ARRAY(SELECT DISTINCT b FROM d, LATERAL (VALUES (d.batch), (d.after_batch)) AS v(b) WHERE b IS NOT NULL)`
	q.deleteJob = `WITH d AS (
		DELETE FROM ` + t + ` WHERE id = $1 AND state IN ('succeeded', 'failed', 'canceled') AND NOT depended
		RETURNING batch, after_batch)
	SELECT j.state, j.depended, EXISTS (SELECT 1 FROM d), (SELECT batch FROM d), (SELECT after_batch FROM d)
	FROM ` + t + ` j WHERE j.id = $1`
	// counts sums the count deltas that the triggers on jobs append (see
	// migration 0004): a table of a few rows per (kind, state) after a
	// compaction, however many jobs there are.
	c := s + ".counts"
	q.counts = `SELECT queue, kind, state, sum(n)::bigint FROM ` + c + ` GROUP BY queue, kind, state HAVING sum(n) <> 0`
	// compact replaces the count deltas by their sums, unless each pair
	// has one row already. The DELETE removes only the rows of its
	// snapshot, and of those only the ones no concurrent compaction
	// deleted first (it waits for that one's row locks, then skips the
	// rows it deleted): each delta is summed by exactly one compaction,
	// and rows appended meanwhile stay for the next. It returns the rows
	// deleted and the rows written.
	q.compact = `WITH d AS (
		DELETE FROM ` + c + `
		WHERE (SELECT count(*) > count(DISTINCT (queue, kind, state)) FROM ` + c + `)
		RETURNING queue, kind, state, n),
	ins AS (
		INSERT INTO ` + c + ` (queue, kind, state, n)
		SELECT queue, kind, state, sum(n) FROM d GROUP BY queue, kind, state HAVING sum(n) <> 0
		RETURNING 1)
	SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM ins)`
	q.vacuumCounts = `VACUUM (SKIP_LOCKED) ` + c
	// The queues' settings. A pause is an upsert committed with the
	// session's synchronous_commit, as a claim's statement reads it; a
	// resume notifies the work channel ($2) in its transaction, so that
	// waiting workers of every process claim again.
	qs := s + ".queues"
	q.queueSettings = `SELECT name, paused, queue_limit, per_partition, rate_n, rate_per_us FROM ` + qs + `
		WHERE paused OR ` + limitedCond
	q.pauseQueue = `INSERT INTO ` + qs + ` (name, paused) VALUES ($1, true)
		ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = now() WHERE NOT ` + qs + `.paused`
	q.resumeQueue = `WITH u AS (
		UPDATE ` + qs + ` SET paused = false, updated_at = now() WHERE name = $1 AND paused RETURNING 1)
	SELECT pg_notify($2, '') FROM u`

	// A new session: a fresh id, locked at once on this connection.
	q.newSession = `INSERT INTO ` + ss + ` (id, host, pid, backend_pid, expires_at)
		SELECT n.id, $1, $2, pg_backend_pid(), now() + make_interval(secs => $3)
		FROM (SELECT nextval('` + s + `.session_ids')::int AS id) n
		WHERE pg_try_advisory_lock($4::int, n.id)
		RETURNING id, backend_pid`
	// A renewal fails once the session expired or was recovered. It
	// returns the server process it ran on, which must be the session's.
	q.renew = `UPDATE ` + ss + ` SET expires_at = now() + make_interval(secs => $2)
		WHERE id = $1 AND expires_at >= now() AND dead_since IS NULL
		RETURNING pg_backend_pid()`
	// findDead marks the sessions whose advisory lock is free (their
	// connection is gone) and lists those whose jobs are due for
	// recovery: expired, or dead for the grace $2 (seconds).
	q.findDead = `WITH mark AS (
		UPDATE ` + ss + ` SET dead_since = now()
		WHERE dead_since IS NULL AND pg_try_advisory_xact_lock($1::int, id)
		RETURNING id)
	SELECT id FROM ` + ss + ` WHERE expires_at < now() OR dead_since <= now() - make_interval(secs => $2)
	UNION
	SELECT id FROM mark WHERE $2 = 0`
	// rescue ends a session found dead, unless another store did first.
	q.rescue = `DELETE FROM ` + ss + `
		WHERE id = $1 AND (expires_at < now() OR dead_since <= now() - make_interval(secs => $2))
		RETURNING id`
	w := s + ".workers"
	// A session is alive while its advisory lock is held (this
	// transaction cannot take it) and its lease is renewed. A dead
	// session's lock is taken for the statement only; a recovery pass
	// that looks at that moment finds the session busy and takes it on
	// its next pass.
	alive := func(id string) string {
		return `EXISTS (SELECT 1 FROM ` + ss + ` WHERE id = ` + id + ` AND dead_since IS NULL
			AND expires_at >= now() AND NOT pg_try_advisory_xact_lock($1::int, id))`
	}
	// registerWorker takes an id whose worker's session is dead; it
	// returns nothing if a live one holds it.
	q.registerWorker = `INSERT INTO ` + w + ` AS w (id, session, token, info) VALUES ($2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET session = EXCLUDED.session, token = EXCLUDED.token, info = EXCLUDED.info
		WHERE (w.token = EXCLUDED.token OR NOT ` + alive("w.session") + `)
		RETURNING id`
	q.workers = `SELECT w.info FROM ` + w + ` w WHERE ` + alive("w.session") + ` ORDER BY w.id`
	q.unregisterWorker = `DELETE FROM ` + w + ` WHERE id = $1 AND token = $2`
	// endedWorkers reads the workers that ended since $2 (workers_ended),
	// and those whose session is dead but not recovered yet, as ended
	// when it was found dead (else now); and forgets the ends before $3.
	we := s + ".workers_ended"
	q.endedWorkers = `WITH forget AS (DELETE FROM ` + we + ` WHERE ended_at < $3)
		SELECT info, ended_at FROM ` + we + ` WHERE ended_at >= $2
		UNION ALL
		SELECT w.info, coalesce(x.dead_since, least(x.expires_at, now())) FROM ` + w + ` w JOIN ` + ss + ` x ON x.id = w.session
		WHERE NOT ` + alive("w.session") + ` AND coalesce(x.dead_since, least(x.expires_at, now())) >= $2`
	q.running = `SELECT ` + cols + ` FROM ` + t + ` WHERE session = $1 AND state = 'running' FOR UPDATE`
	q.deps = newDepQueries(s, t)
	limitQueries(&q, s, t)
	scheduleQueries(&q, s)
	return q
}

// earliestRunAt returns a query of the earliest RunAt of the queued jobs
// of table t (a row with NULL if none) that meet the condition cond, if it
// is not empty. It reads a claim index (jobs_claim; jobs_claim_kind when
// cond names a kind, jobs_claim_queue when it names a queue), whose entries are in the order priority
// descending, then RunAt: the first entry of each priority holds that
// priority's earliest RunAt, so it visits two entries per priority in use,
// however many jobs are queued. Priorities lie between -1000 and 1000.
func earliestRunAt(t, cond string) string {
	queued := `state = 'queued'`
	if cond != "" {
		queued += ` AND ` + cond
	}
	return `WITH RECURSIVE p(priority) AS (
		(SELECT priority FROM ` + t + ` WHERE ` + queued + ` ORDER BY priority DESC LIMIT 1)
		UNION ALL
		SELECT (SELECT priority FROM ` + t + ` WHERE ` + queued + ` AND priority < p.priority
			ORDER BY priority DESC LIMIT 1)
		FROM p WHERE p.priority IS NOT NULL)
	SELECT min((SELECT run_at FROM ` + t + ` WHERE ` + queued + ` AND priority = p.priority
		ORDER BY priority DESC, run_at LIMIT 1)) AS run_at
	FROM p WHERE p.priority IS NOT NULL`
}

// qualified returns the column list cols with each column prefixed by
// table, for a statement where another relation has an "id" too.
func qualified(cols, table string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
