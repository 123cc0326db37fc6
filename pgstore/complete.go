package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// maxCompleteBatch is the most completions one statement writes.
const maxCompleteBatch = 500

// completeFlushers is how many batches of completions a store writes at
// once; completeLinger is how long a flusher waits before it takes what
// waits, so that the completions of handlers that end together share a
// statement. One flusher writes what came while its last statement ran:
// under load the batches grow with the statement's time, rather than
// splitting between statements that would share the server's CPU. (A
// runner's handlers do not wait for their outcomes' writes, so a longer
// wait here costs them nothing; two flushers and 1 ms made batches of
// 40 to 50 jobs in a two-process work-off, this 105 to 122, and 11% more
// jobs a second with 8% less client CPU per job.)
const (
	completeFlushers = 1
	completeLinger   = 2 * time.Millisecond
)

// Complete ends the attempt that lease holds with outcome o and returns the
// updated job. The write is fenced: it happens only if the job is still
// running the lease's attempt for the lease's worker. It is durable when
// Complete returns: the outcomes of the attempts this store claimed are
// written together with the others that wait at that moment, in one
// statement (one commit), and each Complete returns once that commit is
// done. Returns an error wrapping jobstore.ErrNotHeld if lease no longer
// holds the job (also when this store lost the lease session it claimed
// the job under, see ErrLeaseLost), jobstore.ErrNotFound if there is no
// such job, and jobstore.ErrPayloadTooLarge if o.Result exceeds the
// payload limit.
func (s *Store) Complete(ctx context.Context, lease jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	if err := lease.Validate(); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: complete: %w", err)
	}
	if o.Error == "" {
		if err := jobstore.ValidatePayload(o.Result, s.opts.MaxPayload); err != nil {
			return jobstore.Job{}, fmt.Errorf("pgstore: complete %s: result: %w", lease.ID, err)
		}
	}
	if err := s.check(ctx, "complete"); err != nil {
		return jobstore.Job{}, err
	}
	s.mu.Lock()
	h, mine := s.held[lease]
	s.mu.Unlock()
	if mine && h.sess.isLost() {
		s.forget(lease)
		return jobstore.Job{}, fmt.Errorf("pgstore: complete %s: %w: %w", lease.ID, jobstore.ErrNotHeld, h.sess.lostError())
	}
	if mine && h.claimed.version != 0 && !h.claimed.depended {
		// The row as the claim left it: if it did not change since (a
		// cancel, a recovery, a submit that names it), the batch's
		// conditional statement completes it. A job that others name
		// takes the path below, whose write settles them (settle.go).
		j, err := storekit.ApplyOutcome(h.claimed.job, lease, o, usec(time.Now()), s.opts.Backoff)
		if err == nil {
			nr, err := s.completeClaimed(ctx, *h.claimed, j)
			if err == nil {
				s.forget(lease)
				s.signalJob(lease.ID)
				if nr.job.State == jobstore.StateQueued {
					s.signalWork()
				}
				return nr.job, nil
			}
			if !errors.Is(err, errConflict) {
				return jobstore.Job{}, s.fail(ctx, "complete", err)
			}
		}
	}
	j, err := s.change(ctx, "complete", lease.ID, func(r row, now time.Time) (jobstore.Job, bool, bool, error) {
		j, err := storekit.ApplyOutcome(r.job, lease, o, now, s.opts.Backoff)
		// A WatchCancel in another process learns of the end of a lease
		// it did not hand out only through a notification.
		return j, true, !mine, err
	})
	if err == nil || errors.Is(err, jobstore.ErrNotHeld) || errors.Is(err, jobstore.ErrNotFound) {
		s.forget(lease)
	}
	if mine && errors.Is(err, jobstore.ErrNotHeld) {
		if lost := s.lostWith(ctx, h.sess); lost != nil {
			err = fmt.Errorf("%w: %w", err, lost)
		}
	}
	return j, err
}

// completion is one Complete waiting for the batch that writes it.
type completion struct {
	// gone is closed when the caller's ctx ends.
	gone <-chan struct{}
	// j is the job to write over the row as the claim left it, which
	// was at version from, under the lease session session, with key,
	// kind and depended as they were (they do not change): only what a
	// written row takes from the claimed one, not the whole row.
	j         jobstore.Job
	from      int64
	session   int32
	key, kind string
	depended  bool
	// err is errConflict if the row changed since the claim, or the
	// error of the batch; done is closed once the write is settled.
	err  error
	done chan struct{}
	// wrote says that the batch's statement wrote the row, at version,
	// with the waited flag and the payload it found.
	wrote   bool
	version int64
	waited  bool
	payload []byte
}

// finish settles c with err (nil: its row was written) and tells its
// caller.
func (c *completion) finish(err error) {
	c.err = err
	close(c.done)
}

// written is the row that c's write left: the job c wrote over the rest
// of the row it read (key and kind do not change), at the version, with
// the waited flag and the payload the statement returned, and with no
// lease session, as the job is no longer running.
func (c *completion) written() row {
	r := row{job: c.j, session: c.session, version: c.version, waited: c.waited, depended: c.depended}
	r.job.Payload, r.job.Key, r.job.Kind = nilIfEmpty(c.payload), c.key, c.kind
	r.job.Result = nilIfEmpty(c.j.Result)
	if r.job.State != jobstore.StateRunning {
		r.session = 0
	}
	return r
}

// completeClaimed writes j over the row r that this store's claim left, if
// the row has not changed since (its version), as write does, and returns
// the row as written, or errConflict. The writes of concurrent calls are
// grouped: a flusher goroutine (up to completeFlushers at once) waits
// completeLinger, writes whatever waits in one statement, then what came
// meanwhile, and so on, so that the completions of many workers cost one
// round trip and one commit. A call waits for the commit
// of its own write; if ctx ends before its batch is written, its write is
// left out.
func (s *Store) completeClaimed(ctx context.Context, r row, j jobstore.Job) (row, error) {
	c := &completion{gone: ctx.Done(), j: trimTimes(j), from: r.version, session: r.session,
		key: r.job.Key, kind: r.job.Kind, depended: r.depended, done: make(chan struct{})}
	s.mu.Lock()
	if s.isClosed() {
		s.mu.Unlock()
		return row{}, errStoreClosed
	}
	s.completing = append(s.completing, c)
	if s.flushing < completeFlushers {
		s.flushing++
		s.wg.Add(1)
		go s.flushCompletions()
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		if c.err != nil {
			return row{}, c.err
		}
		return c.written(), nil
	case <-ctx.Done():
		return row{}, ctx.Err()
	}
}

// flushCompletions writes the waiting completions in batches until none
// waits. A batch holds one completion per job; another completion of the
// same job (a second Complete of one lease at once) waits for the next.
func (s *Store) flushCompletions() {
	defer s.wg.Done()
	ctx, cancel := s.untilClosed()
	defer cancel()
	for {
		time.Sleep(completeLinger)
		s.mu.Lock()
		var batch, rest []*completion
		ids := make(map[string]bool, len(s.completing))
		for _, c := range s.completing {
			if len(batch) == maxCompleteBatch || ids[c.j.ID] {
				rest = append(rest, c)
				continue
			}
			ids[c.j.ID] = true
			batch = append(batch, c)
		}
		s.completing = rest
		if len(batch) == 0 {
			s.flushing--
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.writeCompletions(ctx, batch)
	}
}

// writeCompletions writes batch in one statement and tells each completion
// its result.
func (s *Store) writeCompletions(ctx context.Context, batch []*completion) {
	live := batch[:0]
	for _, c := range batch {
		select {
		case <-c.gone:
			c.finish(context.Canceled) // the caller returned already
			continue
		default:
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// In ID order, as every statement that locks several jobs locks them,
	// so that this one and a submit naming some of them do not deadlock.
	slices.SortFunc(live, func(a, b *completion) int { return cmp.Compare(a.j.ID, b.j.ID) })
	n := len(live)
	var (
		rows       = newWrites(n)
		encodeErrs = make([]error, n)
		writeErr   error
	)
	for k, c := range live {
		if err := rows.set(k, c.j, c.from); err != nil {
			encodeErrs[k] = err
			continue // no such id in the statement: its version is 0
		}
	}
	ctx, cancel := context.WithTimeout(ctx, detachedTimeout)
	defer cancel()
	byID := make(map[string]*completion, len(live))
	for _, c := range live {
		byID[c.j.ID] = c
	}
	write := func() error {
		for _, c := range live {
			c.wrote = false
		}
		rs, err := s.pool.Query(ctx, s.q.completeMany, rows.args(s.q.chanWork, s.q.chanJob)...)
		if err != nil {
			return err
		}
		defer rs.Close()
		// The destinations escape to pgx: one set serves every row (pgx
		// gives each row's payload a slice of its own).
		var (
			id      string
			version int64
			waited  bool
			payload []byte
			nw, nj  int64
		)
		dest := []any{&id, &version, &waited, &payload, &nw, &nj}
		for rs.Next() {
			if err := rs.Scan(dest...); err != nil {
				return err
			}
			c := byID[id]
			if c == nil {
				return fmt.Errorf("a batch of completions wrote job %s, which it did not hold", id)
			}
			c.wrote, c.version, c.waited, c.payload = true, version, waited, payload
		}
		rs.Close()
		return rs.Err()
	}
	for try := 0; ; try++ {
		// A deadlock undoes the whole statement: write it again.
		writeErr = write()
		if !isRetryable(writeErr) || try == 3 {
			break
		}
	}
	for k, c := range live {
		switch {
		case encodeErrs[k] != nil:
			c.finish(encodeErrs[k])
		case writeErr != nil:
			c.finish(writeErr)
		case !c.wrote:
			c.finish(errConflict)
		default:
			c.finish(nil)
		}
	}
}

// writes are the arrays of the columns that the completeMany statement
// writes, a row of jobs at each index.
type writes struct {
	ids, states, workers []string
	versions             []int64
	prios, attempts      []int32
	runAts, updated      []time.Time
	started, finished    []pgtype.Timestamptz
	cancels              []bool
	results, docs        [][]byte
}

func newWrites(n int) *writes {
	return &writes{
		ids: make([]string, n), states: make([]string, n), workers: make([]string, n),
		versions: make([]int64, n),
		prios:    make([]int32, n), attempts: make([]int32, n),
		runAts: make([]time.Time, n), updated: make([]time.Time, n),
		started: make([]pgtype.Timestamptz, n), finished: make([]pgtype.Timestamptz, n),
		cancels: make([]bool, n),
		results: make([][]byte, n), docs: make([][]byte, n),
	}
}

// set puts job j, fenced by version, at index k.
func (w *writes) set(k int, j jobstore.Job, version int64) error {
	doc, err := encodeDoc(j)
	if err != nil {
		return err
	}
	w.ids[k], w.versions[k], w.states[k] = j.ID, version, string(j.State)
	w.prios[k], w.runAts[k], w.attempts[k], w.workers[k] = int32(j.Priority), j.RunAt, int32(j.Attempt), j.Worker
	w.started[k] = pgtype.Timestamptz{Time: j.StartedAt, Valid: !j.StartedAt.IsZero()}
	w.updated[k] = j.UpdatedAt
	w.finished[k] = pgtype.Timestamptz{Time: j.FinishedAt, Valid: !j.FinishedAt.IsZero()}
	w.cancels[k] = j.CancelRequested
	if len(j.Result) > 0 {
		w.results[k] = j.Result
	}
	w.docs[k] = doc
	return nil
}

// args returns the statement's arguments, the notification channels last.
func (w *writes) args(chanWork, chanJob string) []any {
	return []any{w.ids, w.versions, w.states, w.prios, w.runAts, w.attempts, w.workers,
		w.started, w.updated, w.finished, w.cancels, w.results, w.docs, chanWork, chanJob}
}
