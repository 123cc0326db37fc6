package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.BatchClaimer = (*Store)(nil)

// ClaimBatch claims up to max due queued jobs that req accepts in one
// statement, as Claim claims one: the candidates are picked from the claim
// index in claim order and locked with FOR UPDATE SKIP LOCKED, then moved
// to running in this store's lease session. It returns them in claim
// order, or a *jobstore.NoJobError as Claim does when none is due.
func (s *Store) ClaimBatch(ctx context.Context, req jobstore.ClaimRequest, max int) ([]jobstore.Job, error) {
	if err := storekit.ValidateClaimBatch(max); err != nil {
		return nil, fmt.Errorf("pgstore: claim batch: %w", err)
	}
	if max == 1 {
		j, err := s.Claim(ctx, req)
		if err != nil {
			return nil, err
		}
		return []jobstore.Job{j}, nil
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: claim batch: %w", err)
	}
	if err := s.check(ctx, "claim batch"); err != nil {
		return nil, err
	}
	var jobs []jobstore.Job
	err := s.underLiveSession(ctx, "claim batch", func(sess *session) error {
		var err error
		jobs, err = s.claimBatch(ctx, req, max, sess)
		return err
	})
	return jobs, err
}

// claimBatch is ClaimBatch under the lease session sess. It returns
// errSessionDead, and claims nothing, if sess is dead in the database.
func (s *Store) claimBatch(ctx context.Context, req jobstore.ClaimRequest, max int, sess *session) ([]jobstore.Job, error) {
	s.mu.Lock()
	seq, from := s.signals.Seq(), s.notePointLocked()
	s.mu.Unlock()
	now := usec(time.Now())
	lim := s.acceptedLimited(req)
	var got []row
	var corrupt, err error
	if len(lim) > 0 {
		got, corrupt, err = s.claimLimited(ctx, req, max, lim, sess, now)
	} else {
		got, corrupt, err = s.claimManyFast(ctx, req, max, sess, now)
	}
	if err != nil {
		return nil, s.fail(ctx, "claim batch", err)
	}
	slices.SortFunc(got, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.job.Priority, a.job.Priority), a.job.RunAt.Compare(b.job.RunAt), cmp.Compare(a.job.ID, b.job.ID))
	})
	jobs := make([]jobstore.Job, 0, len(got))
	for i := range got {
		r := &got[i]
		job := r.job
		r.job.Payload = nil // the held row keeps no payload
		if old, dup := s.hold(r, sess, from); dup {
			// As in Claim: a lease that a crash of the server undid and
			// this claim repeated is used up, not handed out twice.
			if err := s.burn(ctx, *r, old); err != nil {
				s.opts.Logger.Warn("pgstore: using up a repeated lease failed; recovery will", "job", r.job.ID, "err", err)
			}
			continue
		}
		jobs = append(jobs, job)
	}
	switch {
	case len(jobs) > 0:
		return jobs, nil
	case len(got) > 0:
		return s.claimBatch(ctx, req, max, sess) // every one was burned: claim again
	case corrupt != nil:
		return nil, fmt.Errorf("pgstore: claim batch: %w", corrupt)
	}
	err = s.noJob(ctx, "claim batch", req, now, seq, sess, lim)
	if errors.Is(err, errLimitsChanged) {
		return s.claimBatch(ctx, req, max, sess)
	}
	return nil, err
}

// claimManyFast is the claim of up to max jobs when req accepts no
// limited queue: one statement, of the request's shape. The connection
// goes back to the pool before it returns, so that what follows (a burn,
// a claim again, noJob) can take one.
func (s *Store) claimManyFast(ctx context.Context, req jobstore.ClaimRequest, max int, sess *session, now time.Time) (got []row, corrupt, err error) {
	var br pgx.BatchResults
	switch {
	case len(req.Queues) > 0:
		br, err = s.onGenericPlan(ctx, s.q.manyQueues, req.Worker, sess.id, now, req.Queues, kindsOrNone(req.Kinds), max, s.ns)
	case len(req.Kinds) == 0:
		br, err = s.onGenericPlan(ctx, s.q.claimMany, req.Worker, sess.id, now, max, s.ns)
	case len(req.Kinds) == 1:
		br, err = s.onGenericPlan(ctx, s.q.manyKind, req.Worker, sess.id, now, req.Kinds[0], max, s.ns)
	default:
		br, err = s.onGenericPlan(ctx, s.q.manyKinds, req.Worker, sess.id, now, req.Kinds, max, s.ns)
	}
	if err != nil {
		return nil, nil, err
	}
	defer br.Close() // on the error returns below
	rs, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	got, bad, err := readClaimed(rs, max)
	if err != nil {
		return nil, nil, err
	}
	if err := br.Close(); err != nil {
		return nil, nil, err
	}
	return got, s.failAllCorrupt(ctx, bad), nil
}
