package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// pruneBatch is how many jobs one transaction of Prune deletes: small
// transactions keep row locks and WAL bursts short on a busy table.
const pruneBatch = 1000

// Get returns the job with the given ID. Returns an error wrapping
// jobstore.ErrInvalidID for a malformed ID and jobstore.ErrNotFound for an
// unknown one.
func (s *Store) Get(ctx context.Context, id string) (jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: get: %w", err)
	}
	if err := s.check(ctx, "get"); err != nil {
		return jobstore.Job{}, err
	}
	r, err := s.getRow(ctx, s.pool, id)
	if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrCorrupt) {
		return jobstore.Job{}, fmt.Errorf("pgstore: get: %w", err)
	}
	if err != nil {
		return jobstore.Job{}, s.fail(ctx, "get", err)
	}
	return r.job, nil
}

// GetByKey returns the job whose Key is key, through the unique index of
// keys, or an error wrapping jobstore.ErrNotFound if none. Returns an
// error wrapping jobstore.ErrInvalidInput for an empty or invalid key.
func (s *Store) GetByKey(ctx context.Context, key string) (jobstore.Job, error) {
	if err := jobstore.ValidateLookupKey(key); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: get by key: %w", err)
	}
	if err := s.check(ctx, "get by key"); err != nil {
		return jobstore.Job{}, err
	}
	r, err := scanRow(s.pool.QueryRow(ctx, s.q.byKey, key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return jobstore.Job{}, fmt.Errorf("pgstore: get by key: no job with key %q: %w", key, jobstore.ErrNotFound)
	case errors.Is(err, jobstore.ErrCorrupt):
		return jobstore.Job{}, fmt.Errorf("pgstore: get by key: %w", err)
	case err != nil:
		return jobstore.Job{}, s.fail(ctx, "get by key", err)
	}
	return r.job, nil
}

// List returns one page of the jobs that match opts, in ID order as
// opts.Order says, and the cursor of the next page, reading the primary key
// or the index of the state or kind it filters on. A row whose doc column
// does not decode is skipped and reported in Page.Errors. Returns an error
// wrapping jobstore.ErrInvalidInput for invalid options.
func (s *Store) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	opts, err := opts.Normalize()
	if err != nil {
		return jobstore.Page{}, fmt.Errorf("pgstore: list: %w", err)
	}
	if err := s.check(ctx, "list"); err != nil {
		return jobstore.Page{}, err
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(opts.States) > 0 {
		states := make([]string, len(opts.States))
		for i, st := range opts.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+")")
	}
	if opts.Kind != "" {
		where = append(where, "kind = "+arg(opts.Kind))
	}
	if opts.Queue != "" {
		where = append(where, "queue = "+arg(opts.Queue))
	}
	if opts.Tag != "" {
		where = append(where, "tags ? "+arg(opts.Tag))
	}
	order := "DESC"
	if opts.Order == jobstore.OldestFirst {
		order = "ASC"
	}
	if opts.Cursor != "" {
		op := "<"
		if opts.Order == jobstore.OldestFirst {
			op = ">"
		}
		where = append(where, "id "+op+" "+arg(opts.Cursor))
	}
	limit := arg(opts.Limit + 1)
	running, others := listParts(opts)
	sql := listSQL(s.q.schema+`.jobs`, where, order, limit, running, others)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return jobstore.Page{}, s.fail(ctx, "list", err)
	}
	defer rows.Close()
	// PageBuilder cuts the page at opts.Limit jobs or opts.MaxBytes, like
	// every store; the row after the last one fetched tells that more exist.
	b := storekit.NewPageBuilder(opts)
	var errs []error
	var sc rowScanner
	for rows.Next() {
		r, err := sc.scan(rows)
		if _, ok := errors.AsType[*corruptError](err); ok {
			errs = append(errs, fmt.Errorf("pgstore: list: %w", err))
			continue
		}
		if err != nil {
			return jobstore.Page{}, s.fail(ctx, "list", err)
		}
		if !b.Add(r.job) {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return jobstore.Page{}, s.fail(ctx, "list", err)
	}
	page := b.Page()
	page.Errors = errs
	return page, nil
}

// listParts says which parts of the jobs table a List with opts reads
// apart, each through its own index (see migration 0013): the running jobs
// (through jobs_session) and the others (through jobs_state or jobs_kind).
// It returns none when the list reads neither index (no state and no kind
// to filter on): the list then reads the primary key.
func listParts(opts jobstore.ListOptions) (running, others bool) {
	if len(opts.States) == 0 {
		return opts.Kind != "", opts.Kind != ""
	}
	for _, st := range opts.States {
		if st == jobstore.StateRunning {
			running = true
		} else {
			others = true
		}
	}
	return running, others
}

// listSQL returns the statement of a List page from table t: the rows that
// meet where, in ID order (order, ASC or DESC), up to limit (a parameter).
// The indexes of states and kinds leave running jobs out, so a list that
// reads them says so (state <> 'running', which lets the planner use them)
// and reads the running jobs (if running) in a part of its own; each part
// stops at limit, and the two are merged in ID order.
func listSQL(t string, where []string, order, limit string, running, others bool) string {
	one := func(extra string) string {
		w := where
		if extra != "" {
			w = append(slices.Clip(where), extra)
		}
		sql := `SELECT ` + cols + ` FROM ` + t
		if len(w) > 0 {
			sql += ` WHERE ` + strings.Join(w, " AND ")
		}
		return sql + ` ORDER BY id ` + order + ` LIMIT ` + limit
	}
	switch {
	case running && others:
		return `SELECT * FROM ((` + one(`state = 'running'`) + `) UNION ALL (` + one(`state <> 'running'`) + `)) u
			ORDER BY id ` + order + ` LIMIT ` + limit
	case running:
		return one(`state = 'running'`)
	case others:
		return one(`state <> 'running'`)
	}
	return one("")
}

// Stats counts the jobs in each state, and of each kind in each state, and
// reports the RunAt of the longest-waiting due queued job. Its cost does
// not grow with the number of jobs kept: the counts are the sums of a small
// table of deltas that triggers on the jobs table append to in the
// transaction of every write (one row per kind and state a statement
// changed) and that the stores compact every second, and the due time is
// read from the claim index. The counts are exact as of one instant, as
// a count of the jobs table would be (BenchmarkStats; the conformance
// suite's Stats tests; TestProcessesStatsExact).
func (s *Store) Stats(ctx context.Context) (jobstore.Stats, error) {
	if err := s.check(ctx, "stats"); err != nil {
		return jobstore.Stats{}, err
	}
	st := jobstore.Stats{Counts: make(map[jobstore.State]int), Kinds: make(map[string]map[jobstore.State]int), Queues: make(map[string]map[jobstore.State]int)}
	for _, state := range jobstore.States() {
		st.Counts[state] = 0
	}
	rows, err := s.pool.Query(ctx, s.q.counts)
	if err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var queue, kind, state string
		var n int
		if err := rows.Scan(&queue, &kind, &state, &n); err != nil {
			return jobstore.Stats{}, s.fail(ctx, "stats", err)
		}
		st.Counts[jobstore.State(state)] += n
		st.AddKind(kind, jobstore.State(state), n)
		st.AddQueue(queue, jobstore.State(state), n)
	}
	if err := rows.Err(); err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	var earliest *time.Time
	if err := s.pool.QueryRow(ctx, s.q.earliest).Scan(&earliest); err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	// The earliest RunAt of all queued jobs is the longest-waiting due
	// job's if any is due; then each kind's and each queue's, read from
	// their claim indexes.
	now := time.Now()
	if earliest == nil || earliest.After(now) {
		return st, nil
	}
	st.OldestQueuedAt = earliest.UTC()
	var kinds []string
	for kind, counts := range st.Kinds {
		if counts[jobstore.StateQueued] > 0 {
			kinds = append(kinds, kind)
		}
	}
	rows, err = s.pool.Query(ctx, s.q.earliestByKind, kinds)
	if err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var at time.Time
		if err := rows.Scan(&kind, &at); err != nil {
			return jobstore.Stats{}, s.fail(ctx, "stats", err)
		}
		if !at.After(now) {
			if st.OldestQueuedByKind == nil {
				st.OldestQueuedByKind = make(map[string]time.Time)
			}
			st.OldestQueuedByKind[kind] = at.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	var queues []string
	for queue, counts := range st.Queues {
		if counts[jobstore.StateQueued] > 0 {
			queues = append(queues, queue)
		}
	}
	rows, err = s.pool.Query(ctx, s.q.earliestByQueue, queues)
	if err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var queue string
		var at time.Time
		if err := rows.Scan(&queue, &at); err != nil {
			return jobstore.Stats{}, s.fail(ctx, "stats", err)
		}
		if !at.After(now) {
			if st.OldestQueuedByQueue == nil {
				st.OldestQueuedByQueue = make(map[string]time.Time)
			}
			st.OldestQueuedByQueue[queue] = at.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return jobstore.Stats{}, s.fail(ctx, "stats", err)
	}
	return st, nil
}

// Prune deletes the terminal jobs that finished more than olderThan ago,
// in transactions of at most 1,000 jobs found through the index on
// finished_at, and returns how many it deleted. Their idempotency keys
// become free again. If ctx ends or an error stops it, the jobs deleted so
// far stay deleted, and their number is returned with the error.
func (s *Store) Prune(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.PruneStates(ctx, olderThan, nil)
}

// PruneStates is Prune limited to jobs in states; it implements
// jobstore.StatePruner.
func (s *Store) PruneStates(ctx context.Context, olderThan time.Duration, states []jobstore.State) (int, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("pgstore: prune: %w: negative age %s", jobstore.ErrInvalidInput, olderThan)
	}
	if _, err := storekit.PruneFilter(states); err != nil {
		return 0, fmt.Errorf("pgstore: prune: %w", err)
	}
	names := []string{string(jobstore.StateSucceeded), string(jobstore.StateFailed), string(jobstore.StateCanceled)}
	if len(states) > 0 {
		names = names[:0]
		for _, st := range states {
			names = append(names, string(st))
		}
	}
	if err := s.check(ctx, "prune"); err != nil {
		return 0, err
	}
	cutoff := usec(time.Now().Add(-olderThan))
	total := 0
	batches := map[string]bool{}
	defer func() {
		if err := s.dropBatches(context.WithoutCancel(ctx), batches); err != nil {
			s.opts.Logger.Warn("pgstore: prune: removing the rows of emptied batches failed; the sweep of waiting jobs tries again within a minute", "err", err)
		}
	}()
	for {
		var seen, deleted int
		var held, emptied []string
		err := s.pool.QueryRow(ctx, s.q.prune, cutoff, pruneBatch, names).Scan(&seen, &deleted, &held, &emptied)
		if err != nil {
			return total, s.fail(ctx, "prune", err)
		}
		total += deleted
		for _, b := range emptied {
			batches[b] = true
		}
		if len(held) > 0 {
			n, err := s.pruneHeld(ctx, held, batches)
			total += n
			if err != nil {
				return total, s.fail(ctx, "prune", err)
			}
		}
		if seen < pruneBatch {
			return total, nil
		}
	}
}

// pruneHeld deletes the jobs ids, finished and named by others, that no
// waiting job names, and adds their batches to batches: they are locked
// first (those another transaction holds are passed over), then deleted
// in a later statement, which sees every submit that named them before
// the lock.
func (s *Store) pruneHeld(ctx context.Context, ids []string, batches map[string]bool) (int, error) {
	n := 0
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		n = 0
		rs, err := tx.Query(ctx, s.q.deps.pruneHeld, ids)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil || len(locked) == 0 {
			return err
		}
		rs, err = tx.Query(ctx, s.q.deps.deleteHeld, locked)
		if err != nil {
			return err
		}
		for rs.Next() {
			var b, ab *string
			if err := rs.Scan(&b, &ab); err != nil {
				rs.Close()
				return err
			}
			batchNames(batches, b, ab)
			n++
		}
		return rs.Err()
	})
	return n, err
}

// Delete deletes the finished job id, with its log. It implements
// jobstore.Deleter. Returns an error wrapping jobstore.ErrNotFound for an
// unknown job, jobstore.ErrNotFinished for one that has not ended, and
// a *jobstore.DependencyError wrapping jobstore.ErrDependedOn, naming the
// waiting job, for one that a waiting job names in its After.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := jobstore.ValidateID(id); err != nil {
		return fmt.Errorf("pgstore: delete: %w", err)
	}
	if err := s.check(ctx, "delete"); err != nil {
		return err
	}
	var state string
	var depended, deleted bool
	var b, ab *string
	err := s.pool.QueryRow(ctx, s.q.deleteJob, id).Scan(&state, &depended, &deleted, &b, &ab)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: delete %s: %w", id, jobstore.ErrNotFound)
	case err != nil:
		return s.fail(ctx, "delete "+id, err)
	case !jobstore.State(state).Terminal():
		return fmt.Errorf("pgstore: delete %s: job is %s: %w", id, state, jobstore.ErrNotFinished)
	case !deleted && depended:
		// Others name it: locked, then looked at again (as pruneHeld).
		var waiting string
		err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
			waiting, b, ab = "", nil, nil
			if err := tx.QueryRow(ctx, s.q.deps.lockJob, id).Scan(&state); err != nil {
				return err
			}
			if !jobstore.State(state).Terminal() {
				return nil // retried meanwhile
			}
			err := tx.QueryRow(ctx, s.q.deps.waitingOn, id).Scan(&waiting)
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return tx.QueryRow(ctx, s.q.deps.delete, id).Scan(&b, &ab)
		})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("pgstore: delete %s: %w", id, jobstore.ErrNotFound)
		case err != nil:
			return s.fail(ctx, "delete "+id, err)
		case !jobstore.State(state).Terminal():
			return fmt.Errorf("pgstore: delete %s: job is %s: %w", id, state, jobstore.ErrNotFinished)
		case waiting != "":
			return fmt.Errorf("pgstore: delete: %w", jobstore.DependedOn(id, waiting))
		}
	}
	names := map[string]bool{}
	batchNames(names, b, ab)
	if err := s.dropBatches(ctx, names); err != nil {
		s.opts.Logger.Warn("pgstore: delete: removing the row of an emptied batch failed; the sweep of waiting jobs tries again within a minute", "err", err)
	}
	return nil
}

// Ping reports whether the database answers and the store's schema is
// there, without reading any job, so a health check's cost does not grow
// with the store. It implements jobstore.Pinger. It returns an error
// wrapping jobstore.ErrClosed after Close; a read-only (standby) server is
// an error, since no job could change there.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(ctx, "ping"); err != nil {
		return err
	}
	var (
		readOnly string
		hasTable bool
	)
	err := s.pool.QueryRow(ctx, `SELECT current_setting('transaction_read_only'), to_regclass($1) IS NOT NULL`,
		s.q.schema+".jobs").Scan(&readOnly, &hasTable)
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	if !hasTable {
		return fmt.Errorf("pgstore: ping: the table %s.jobs is gone", s.opts.Schema)
	}
	if readOnly == "on" {
		return fmt.Errorf("pgstore: ping: the server is read-only")
	}
	return nil
}
