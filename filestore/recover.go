package filestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// recoverDead looks at every job in claimed/ (the running set, not the
// history) and recovers those whose lease is free, which means the
// process that claimed them is gone: the kernel released its lock when it
// died. Leases this process holds are in the lease table, so they are never
// mistaken for dead. Without repair it only reports.
//
// A job whose record lock stays busy (see patience) is left for the next
// pass. A job that cannot be recovered is logged, reported as a
// ProblemUnrecoverable, and skipped; recoverDead returns an error only
// when it cannot list claimed/ or ctx ends.
func (s *Store) recoverDead(ctx context.Context, repair bool) ([]Problem, error) {
	ids, _, err := s.listDir(dirClaimed)
	if err != nil {
		return nil, err
	}
	p := newPatience()
	var probs []Problem
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return probs, err
		}
		prob, err := s.recoverOne(ctx, id, repair, p)
		if err != nil {
			if ctx.Err() != nil {
				return probs, ctx.Err()
			}
			// One job that cannot be recovered (its lease file a link or
			// another user's, a full disk) must not strand the others:
			// report it and go on. The next pass tries it again.
			s.log.Warn("filestore: recovery: cannot recover a job; skipping it", "id", id, "err", err)
			probs = append(probs, Problem{Kind: ProblemUnrecoverable, ID: id, Path: s.recordPath(dirClaimed, id),
				Detail: "cannot tell whether its worker is alive, or cannot recover it: " + err.Error()})
			continue
		}
		if prob != nil {
			probs = append(probs, *prob)
		}
	}
	return probs, nil
}

func (s *Store) recoverOne(ctx context.Context, id string, repair bool, p *patience) (*Problem, error) {
	h, ok, err := tryLease(s, id)
	if err != nil || !ok {
		return nil, err // held: its worker is alive
	}
	// A job that recovery ends (its attempts used up) settles the jobs
	// that wait for it, once its locks are released (deferred first, so
	// run last).
	var ended *jobstore.Job
	defer func() {
		if ended != nil {
			s.afterEnd(ctx, *ended)
		}
	}()
	defer releaseLease(h)
	unlock, ok, err := p.lock(ctx, func(ctx context.Context) (func(), error) { return s.lockFor(ctx, id, repair) })
	if err != nil {
		return nil, err
	}
	if !ok {
		s.log.Info("filestore: recovery: a dead worker's job is locked by another process; left for the next pass", "id", id)
		return nil, nil
	}
	defer unlock()
	f, err := s.locate(id)
	if err != nil {
		return nil, err
	}
	if !f.ok {
		if repair && len(f.corrupt) == 0 {
			s.dropLeaseFile(id) // pruned since claimed/ was listed
		}
		return nil, nil // corrupt copies are Fsck's to report
	}
	rec := f.rec
	if repair {
		s.removeStale(f)
	}
	if rec.dir != dirClaimed {
		return nil, nil // finished or moved meanwhile
	}
	prob := &Problem{Kind: ProblemDeadWorker, ID: id, Path: s.recordPath(dirClaimed, id)}
	switch {
	case rec.Job.State == jobstore.StateRunning:
		prob.Detail = fmt.Sprintf("worker %q died during attempt %d", rec.Job.Worker, rec.Job.Attempt)
		if !repair {
			return prob, nil
		}
		j, err := storekit.ApplyRecover(rec.Job, time.Now())
		if err != nil {
			return nil, err
		}
		if _, err := s.store(rec, j, true); err != nil {
			return nil, err
		}
		s.log.Warn("filestore: recovered the job of a dead worker", "id", id, "worker", rec.Job.Worker, "attempt", rec.Job.Attempt, "state", j.State)
		s.setCand(j)
		if j.State.Terminal() {
			ended = &j
		}
	case rec.Job.State == jobstore.StateQueued:
		// Claimed, but the claim note that says by whom is lost: the note
		// is never fsynced, the rename into claimed/ is (before the job
		// runs), so this is what a power cut during an attempt leaves. The
		// attempt counts, as a dead worker's does: a job whose attempts
		// bring the machine down ends failed after MaxAttempts. (A format
		// 2 claimant, which renamed and then rewrote the record, leaves
		// this too if it died between the two; its attempt counts as well.)
		prob.Detail = fmt.Sprintf("claimed for attempt %d, whose worker is not known (its claim note was lost in a crash)", rec.Job.Attempt+1)
		if !repair {
			return prob, nil
		}
		now := time.Now()
		// It was due when it was claimed, whatever the clock says now.
		j, err := storekit.ApplyClaim(rec.Job, lostWorker, maxTime(now, rec.Job.RunAt))
		if err == nil {
			j, err = storekit.ApplyRecover(j, now)
		}
		if err != nil {
			return nil, err
		}
		if _, err := s.store(rec, j, true); err != nil {
			return nil, err
		}
		s.log.Warn("filestore: recovered a job whose claim note was lost in a crash; its attempt counts", "id", id, "attempt", j.Attempt, "state", j.State)
		s.setCand(j)
		if j.State.Terminal() {
			ended = &j
		}
	default:
		// A move out of claimed/ was interrupted: finish it, unchanged.
		prob.Detail = fmt.Sprintf("record in claimed/ says %s", rec.Job.State)
		if !repair {
			return prob, nil
		}
		to := dirOf(rec.Job.State)
		if err := s.fs.Rename(rec.recordPathIn(s), s.recordPath(to, id)); err != nil {
			return nil, err
		}
		if err := s.durable.dir(to); err != nil {
			return nil, err
		}
		s.setCand(rec.Job)
	}
	prob.Repaired = true
	return prob, nil
}

// lostWorker is the worker recorded for an attempt whose claim note was
// lost, so that its claimant is not known.
const lostWorker = "(unknown)"

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (r record) recordPathIn(s *Store) string { return s.recordPath(r.dir, r.Job.ID) }
