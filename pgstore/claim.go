package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// busyRetry is how soon Claim asks to be called again (through
// NoJobError.NextRunAt) when it found nothing but a due job exists: held for
// a moment by another claim or change.
const busyRetry = 5 * time.Millisecond

// Claim moves the most urgent due queued job that req accepts to running for
// req.Worker and returns it, in one statement: the job is picked from an
// index in claim order (priority, then RunAt, then ID) and locked with FOR
// UPDATE SKIP LOCKED, so concurrent claimers in any process never wait for
// each other and never get one attempt twice. (A request that accepts a
// queue with a limit or a rate claims in two statements that count them,
// and may wait its turn at that queue's lock, for 100 ms at most; see
// limits.go.) The claim belongs to this store's lease session, which Claim
// starts (with its own connection) the first time, and again when the
// database finds the last one dead: a claim is made only under a session
// that is alive at that moment. Returns a *jobstore.NoJobError (which
// wraps jobstore.ErrNoJob) when no such job is due; its NextRunAt is the
// earliest RunAt of the accepted queued jobs (or, for a rate-limited
// queue, when its window has room), or a moment from now if a due one was
// held by someone else.
func (s *Store) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	if err := req.Validate(); err != nil {
		return jobstore.Job{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	if err := s.check(ctx, "claim"); err != nil {
		return jobstore.Job{}, err
	}
	var j jobstore.Job
	err := s.underLiveSession(ctx, "claim", func(sess *session) error {
		var err error
		j, err = s.claim(ctx, req, sess)
		return err
	})
	return j, err
}

// underLiveSession runs claim under the store's lease session and, if the
// database finds that session dead (errSessionDead: the lease connection
// died and the keeper has not seen it yet), ends it and runs claim again
// under a new one, up to three times.
func (s *Store) underLiveSession(ctx context.Context, op string, claim func(*session) error) error {
	for try := 1; ; try++ {
		sess, err := s.session(ctx)
		if err != nil {
			return s.fail(ctx, op, err)
		}
		err = claim(sess)
		if !errors.Is(err, errSessionDead) {
			return err
		}
		if sess.end(err) {
			s.opts.Logger.Warn("pgstore: lease session lost; its jobs will run elsewhere", "session", sess.id, "err", err)
		}
		if try == 3 {
			return fmt.Errorf("pgstore: %s: %w", op, err)
		}
	}
}

// errLimitsChanged is noJob's answer when it finds that a queue became
// limited, or stopped being, since the store last looked: the claim,
// which took the wrong path for that queue's jobs (see acceptedLimited),
// is made again.
var errLimitsChanged = errors.New("the queues' limits changed")

// errSessionDead is why a claim ends a lease session that the database no
// longer counts as alive.
var errSessionDead = errors.New("a claim found the session dead: its lease connection is gone")

// claim is Claim under the lease session sess. It returns errSessionDead,
// and claims nothing, if sess is dead in the database.
func (s *Store) claim(ctx context.Context, req jobstore.ClaimRequest, sess *session) (jobstore.Job, error) {
	s.mu.Lock()
	seq, from := s.signals.Seq(), s.notePointLocked()
	s.mu.Unlock()
	now := usec(time.Now())
	lim := s.acceptedLimited(req)
	var got row
	var err error
	if len(lim) > 0 {
		var rows []row
		var corrupt error
		rows, corrupt, err = s.claimLimited(ctx, req, 1, lim, sess, now)
		switch {
		case err != nil:
		case len(rows) > 0:
			got = rows[0]
		case corrupt != nil:
			return jobstore.Job{}, fmt.Errorf("pgstore: claim: %w", corrupt) // failed already
		default:
			err = pgx.ErrNoRows
		}
	} else {
		got, err = s.claimFast(ctx, req, sess, now)
	}
	switch {
	case err == nil:
		job := got.job
		got.job.Payload = nil // the held row keeps no payload
		if old, dup := s.hold(&got, sess, from); dup {
			// This worker holds this very lease from an earlier claim,
			// whose commit a crash of the server undid (claims do not
			// wait for a flush): its handler may still run and complete
			// it. Use this attempt up, so that the job's next claim has a
			// lease of its own, and claim again.
			if err := s.burn(ctx, got, old); err != nil {
				return jobstore.Job{}, s.fail(ctx, "claim", err)
			}
			return s.claim(ctx, req, sess)
		}
		return job, nil
	case errors.Is(err, jobstore.ErrCorrupt):
		return jobstore.Job{}, fmt.Errorf("pgstore: claim: %w", s.failCorrupt(ctx, err))
	case !errors.Is(err, pgx.ErrNoRows):
		return jobstore.Job{}, s.fail(ctx, "claim", err)
	}

	err = s.noJob(ctx, "claim", req, now, seq, sess, lim)
	if errors.Is(err, errLimitsChanged) {
		return s.claim(ctx, req, sess)
	}
	return jobstore.Job{}, err
}

// claimFast is the claim of one job when req accepts no limited queue: one
// statement, of the request's shape. It returns pgx.ErrNoRows if it
// claimed nothing.
func (s *Store) claimFast(ctx context.Context, req jobstore.ClaimRequest, sess *session, now time.Time) (row, error) {
	var br pgx.BatchResults
	var err error
	switch {
	case len(req.Queues) > 0:
		br, err = s.onGenericPlan(ctx, s.q.claimQueues, req.Worker, sess.id, now, req.Queues, kindsOrNone(req.Kinds), s.ns)
	case len(req.Kinds) == 0:
		br, err = s.onGenericPlan(ctx, s.q.claim, req.Worker, sess.id, now, s.ns)
	default:
		br, err = s.onGenericPlan(ctx, s.q.claimKinds, req.Worker, sess.id, now, req.Kinds, s.ns)
	}
	if err != nil {
		return row{}, err
	}
	got, err := scanRow(br.QueryRow())
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return got, err
}

// kindsOrNone is the kinds argument of the claims with queues: an empty
// array, not NULL, for any kind.
func kindsOrNone(kinds []string) []string {
	if kinds == nil {
		return []string{}
	}
	return kinds
}

// genericPlan, run first in a claim's transaction, makes the claim use
// the generic plan of its prepared statement. Left to choose, the server
// plans a claim again at every call (its due time and LIMIT are
// parameters, which make the generic plan's estimate look dearer than a
// custom plan's, though both are the same scan of the claim index), and
// that planning was about a third of a claim's time on the server. The
// setting is local to the transaction, so the pool's connections keep
// their own.
const genericPlan = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// onGenericPlan sends genericPlan and the claim statement sql in one round
// trip, as one transaction, and returns the claim's results, past
// genericPlan's. The caller closes them.
func (s *Store) onGenericPlan(ctx context.Context, sql string, args ...any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(genericPlan)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// noJob returns the error of a claim under sess that found nothing at now:
// a *jobstore.NoJobError that says when the next accepted job is due, or
// may start by its queue's rate, or errSessionDead if the database no
// longer counts sess as alive (the claim found nothing because of that).
// seq is the store's signals.Seq() when the claim began; lim the limited
// queues the claim accepted.
func (s *Store) noJob(ctx context.Context, op string, req jobstore.ClaimRequest, now time.Time, seq uint64, sess *session, lim []string) error {
	gen := s.limitedGen()
	var next *time.Time
	var live bool
	var limited []string
	var err error
	switch {
	case len(req.Queues) > 0:
		err = s.pool.QueryRow(ctx, s.q.nextQueues, sess.id, s.ns, req.Queues, kindsOrNone(req.Kinds)).Scan(&next, &live, &limited)
	case len(req.Kinds) == 0:
		err = s.pool.QueryRow(ctx, s.q.nextDue, sess.id, s.ns).Scan(&next, &live, &limited)
	default:
		err = s.pool.QueryRow(ctx, s.q.nextKinds, sess.id, s.ns, req.Kinds).Scan(&next, &live, &limited)
	}
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if !live {
		return errSessionDead
	}
	var at time.Time
	if next != nil {
		at = next.UTC()
	}
	if len(lim) > 0 {
		la, err := s.nextLimitedAt(ctx, req, lim, now)
		if err != nil {
			return s.fail(ctx, op, err)
		}
		if !la.IsZero() && (at.IsZero() || la.Before(at)) {
			at = la
		}
	}
	if s.setLimited(limited, gen) {
		// A queue became limited, or stopped being, since this store
		// last looked: the claim took the wrong path for its jobs.
		return errLimitsChanged
	}
	if !at.IsZero() && !at.After(now) {
		at = time.Now().Add(busyRetry)
	}
	s.mu.Lock()
	s.signals.NoJob(seq)
	if !at.IsZero() && (s.nextDue.IsZero() || at.Before(s.nextDue)) {
		s.nextDue = at
	}
	s.mu.Unlock()
	return fmt.Errorf("pgstore: %s: %w", op, &jobstore.NoJobError{NextRunAt: at, Since: seq})
}

// hold records the job just claimed as r (its payload left out) as held
// by this store under sess, by a claim that began at from. r is kept, not
// copied: the caller writes it no more. If this store already holds that
// very lease (dup), it records nothing and returns the session of the
// earlier claim.
func (s *Store) hold(r *row, sess *session, from notePoint) (earlier *session, dup bool) {
	lease := r.job.Lease()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.held[lease]; ok {
		return old.sess, true
	}
	s.held[lease] = heldLease{sess: sess, claimed: r, from: from}
	return nil, false
}

// burn queues again the job just claimed as r, counting the attempt, as
// the recovery of a dead worker does.
func (s *Store) burn(ctx context.Context, r row, stale *session) error {
	j, err := storekit.ApplyRecover(r.job, usec(time.Now()))
	if err != nil {
		return err
	}
	if _, err := s.write(ctx, s.pool, r, j, true); err != nil {
		return err
	}
	s.opts.Logger.Warn("pgstore: a claim repeated a lease that a crash of the server undid; attempt used up",
		"job", r.job.ID, "attempt", r.job.Attempt, "stale session", stale.id)
	return nil
}

// failCorrupt ends a claimed job whose doc column does not decode, so that
// it is not left running forever, and returns err. The end notifies the
// work channel, as the end of any running job of a limited queue does. It
// must not be called while the claim's own transaction is open (its
// results not read to the end): it waits for the job's row.
func (s *Store) failCorrupt(ctx context.Context, err error) error {
	if ce, ok := errors.AsType[*corruptError](err); ok {
		_, _ = s.pool.Exec(ctx, `WITH u AS (UPDATE `+s.q.schema+`.jobs SET state = 'failed', finished_at = now(),
			session = NULL, version = version + 1 WHERE id = $1 AND state = 'running' RETURNING 1)
			SELECT pg_notify($2, '') FROM u`, ce.id, s.q.chanWork)
	}
	return err
}

// failAllCorrupt fails the jobs of corrupt (failCorrupt), once the claim
// that read them has ended, and returns the last of them.
func (s *Store) failAllCorrupt(ctx context.Context, corrupt []error) error {
	var last error
	for _, err := range corrupt {
		last = s.failCorrupt(ctx, err)
	}
	return last
}
