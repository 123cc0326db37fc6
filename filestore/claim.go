package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Claim hands the most urgent due queued job that req accepts to
// req.Worker. The job is chosen from the in-memory candidate set; the
// claim itself takes the job's lease lock (held until Complete), then its
// record lock, re-reads the record and renames it from queued/ to
// claimed/. Of processes racing for one job exactly one rename succeeds;
// the others move on to the next candidate.
func (s *Store) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	if err := s.enter(ctx, "claim"); err != nil {
		return jobstore.Job{}, err
	}
	if s.trustErr != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: claim: %w", s.trustErr)
	}
	if err := req.Validate(); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: claim: %w", err)
	}
	s.watch()
	s.mu.Lock()
	seq := s.signals.Seq()
	s.claimer = true
	s.mu.Unlock()
	if _, err := s.refreshCands(); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: claim: scan queue: %w", err)
	}
	tried := make(map[string]bool)
	rescanned := false
	// A job that cannot be claimed (a link or another user's file planted
	// as its lease lock, a full disk) must not stop the claims of every
	// other job: up to maxClaimErrors such jobs are skipped, and the last
	// error is returned only if no job could be claimed.
	const maxClaimErrors = 8
	var claimErr error
	nerr := 0
	// busy is set when a due job's lease was held by someone else: another
	// claimant, or a Complete or a recovery that is putting it back in the
	// queue. That holder's release makes no event, so ask to be called
	// again shortly rather than at the next poll.
	busy := false
	// lockBusy lists due jobs skipped because another process (or
	// goroutine) held their record lock: a holder that is stopped must not
	// keep this claim from the other jobs. Once no other job is claimable,
	// they are tried again with a short wait (see recordLockPatience).
	var lockBusy []string
	for {
		if err := ctx.Err(); err != nil {
			return jobstore.Job{}, err
		}
		now := time.Now()
		id, next := s.pick(req, now, tried)
		if id == "" && !rescanned && s.noCands() {
			// An empty set may only mean lost events: look at queued/
			// itself once (cheap when it is empty too) before saying no.
			rescanned = true
			s.mu.Lock()
			s.rescan = true
			s.mu.Unlock()
			if n, err := s.refreshCands(); err == nil && n > 0 {
				continue
			}
		}
		if id == "" && len(lockBusy) > 0 {
			j, ok, err := s.claimBusy(ctx, lockBusy, req)
			lockBusy = nil
			if ok || err != nil {
				return j, err
			}
			busy = true
			continue
		}
		if id == "" && claimErr != nil {
			return jobstore.Job{}, claimErr
		}
		if id == "" {
			var soon time.Time
			if busy {
				soon = time.Now().Add(leaseRetry)
				if next.IsZero() || soon.Before(next) {
					next = soon
				}
			}
			s.mu.Lock()
			s.signals.NoJob(seq)
			if busy {
				// For callers that do not read NextRunAt: AwaitWork
				// returns then too.
				s.busyRetry = soon
			}
			s.mu.Unlock()
			return jobstore.Job{}, fmt.Errorf("filestore: claim: %w", &jobstore.NoJobError{NextRunAt: next, Since: seq})
		}
		tried[id] = true
		j, ok, err := s.claimOne(ctx, id, req, now, false)
		if errors.Is(err, errLeaseBusy) {
			busy = true
			continue
		}
		if errors.Is(err, errRecordBusy) {
			lockBusy = append(lockBusy, id)
			continue
		}
		if errors.Is(err, jobstore.ErrClosed) {
			return jobstore.Job{}, err
		}
		if err != nil {
			claimErr = fmt.Errorf("filestore: claim %s: %w", id, err)
			if nerr++; nerr >= maxClaimErrors || ctx.Err() != nil {
				return jobstore.Job{}, claimErr
			}
			s.log.Warn("filestore: cannot claim a job; trying the next one", "id", id, "err", err)
			continue
		}
		if ok {
			return j, nil
		}
	}
}

// claimBusy tries again the jobs Claim skipped because their record lock
// was held, this time waiting for each lock, all of them together for at
// most recordLockPatience: a lock held longer than that is held by a
// stopped or hung process, and its jobs are left for a later Claim. It
// returns an error only for ctx.
func (s *Store) claimBusy(ctx context.Context, ids []string, req jobstore.ClaimRequest) (jobstore.Job, bool, error) {
	wctx, cancel := context.WithTimeout(ctx, recordLockPatience)
	defer cancel()
	for _, id := range ids {
		j, ok, err := s.claimOne(wctx, id, req, time.Now(), true)
		if ok {
			return j, true, nil
		}
		if err := ctx.Err(); err != nil {
			return jobstore.Job{}, false, err
		}
		if errors.Is(err, jobstore.ErrClosed) {
			return jobstore.Job{}, false, err
		}
		if err != nil && !errors.Is(err, errLeaseBusy) && wctx.Err() == nil {
			s.log.Warn("filestore: cannot claim a job; trying the next one", "id", id, "err", err)
		}
		if wctx.Err() != nil {
			break
		}
	}
	return jobstore.Job{}, false, nil
}

// recordLockPatience is how long Claim, recovery and the repair at Open
// wait in all for record locks that were busy when first tried, before
// they leave those jobs for later. A record lock is held for a read, or a
// write and an fsync: a wait longer than this means a holder that is
// stopped or hung.
const recordLockPatience = 100 * time.Millisecond

// errRecordBusy is claimOne's answer, without wait, when another holder
// has the job's record lock.
var errRecordBusy = errors.New("record lock held elsewhere")

// errLeaseBusy is claimOne's answer when another holder has the job's
// lease: the job may become claimable the moment that holder lets go.
var errLeaseBusy = errors.New("lease held elsewhere")

// leaseRetry is how soon Claim asks to be called again (through
// NoJobError.NextRunAt) after it skipped a due job whose lease was held.
const leaseRetry = 5 * time.Millisecond

// pick returns the best due candidate req accepts that is not in tried,
// or "" and the earliest RunAt among accepted candidates not yet due.
func (s *Store) pick(req jobstore.ClaimRequest, now time.Time, tried map[string]bool) (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cands.pick(req, now, tried)
}

// claimOne tries to claim candidate id. It returns ok=false, with no
// error, when the job is not claimable after all (someone else holds or
// took it, it is not due, or it is gone); the candidate set is corrected.
//
// Without wait it does not wait for the record lock: it returns
// errRecordBusy if another holder has it.
func (s *Store) claimOne(ctx context.Context, id string, req jobstore.ClaimRequest, now time.Time, wait bool) (jobstore.Job, bool, error) {
	s.claiming.RLock()
	defer s.claiming.RUnlock()
	if s.isClosed() {
		return jobstore.Job{}, false, fmt.Errorf("filestore: claim: %w", jobstore.ErrClosed)
	}
	lp := s.leasePath(id)
	// Lease before record, always: the lease is what tells other processes
	// this claimant is alive, so it is held before the job is visible in
	// claimed/.
	h, ok, err := tryLease(s, lp)
	if err != nil {
		return jobstore.Job{}, false, err
	}
	if !ok {
		return jobstore.Job{}, false, errLeaseBusy
	}
	claimed := false
	defer func() {
		if !claimed {
			releaseLease(lp, h)
		}
	}()
	var unlock func()
	if wait {
		unlock, err = s.lockJob(ctx, id)
	} else {
		var got bool
		unlock, got, err = s.tryLockJob(id)
		if err == nil && !got {
			return jobstore.Job{}, false, errRecordBusy
		}
	}
	if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrCorrupt) {
		s.dropCand(id)
		return jobstore.Job{}, false, nil
	}
	if err != nil {
		return jobstore.Job{}, false, err
	}
	defer unlock()
	rec, err := s.readJob(id, true)
	if err != nil {
		s.dropCand(id)
		if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrCorrupt) {
			if errors.Is(err, jobstore.ErrCorrupt) {
				s.log.Warn("filestore: skipping corrupt record", "err", err)
			}
			return jobstore.Job{}, false, nil
		}
		return jobstore.Job{}, false, err
	}
	if rec.dir != dirQueued || rec.Job.State != jobstore.StateQueued {
		s.dropCand(id)
		return jobstore.Job{}, false, nil
	}
	if !rec.Job.Due(now) || !req.Accepts(rec.Job.Kind) {
		s.mu.Lock()
		s.cands.set(id, candOf(rec.Job))
		s.mu.Unlock()
		return jobstore.Job{}, false, nil
	}
	j, err := jobstore.ApplyClaim(rec.Job, req.Worker, now)
	if err != nil {
		return jobstore.Job{}, false, err
	}
	// The claim is a note in the lease file, then the rename: the record
	// itself is not rewritten, so a claim creates no file and makes no
	// fsync. Readers (all under the record lock) see a record in claimed/
	// that still says queued as running, as the note says. The note is
	// never fsynced; the rename is made durable by this Store's claim
	// flusher a moment later (claimflush.go), so that a power cut during
	// the attempt leaves the record in claimed/ and recovery counts the
	// attempt from that alone if the note is lost (recoverOne): a job whose
	// attempts bring the machine down ends failed after MaxAttempts
	// (TestPowerCutCountsAttempt).
	note, err := json.Marshal(claimNote{Rev: rec.Rev, Worker: req.Worker, ClaimedAt: now.UTC()})
	if err != nil {
		return jobstore.Job{}, false, err
	}
	if err := s.fs.Overwrite(lp, note); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("write claim note: %w", err)
	}
	if err := s.fs.Rename(s.recordPath(dirQueued, id), s.recordPath(dirClaimed, id)); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("move to claimed/: %w", err)
	}
	// Last, right before the lease is set: a Close that began before this
	// check releases only leases set before it. Its caller will not run the
	// job, so put it back unchanged (the note only counts in claimed/), and
	// durably, as the claim may have been made durable already by another
	// claim's flush: left in claimed/ after a power cut, the job would have
	// an attempt counted that never ran (TestUnclaimThenPowerCut).
	if s.isClosed() {
		err := s.fs.Rename(s.recordPath(dirClaimed, id), s.recordPath(dirQueued, id))
		if err == nil {
			if err = s.durable.dir(dirQueued); err == nil {
				err = s.durable.dir(dirClaimed)
			}
		}
		if err != nil {
			// Left in claimed/ with the lease released: recovered like a
			// dead worker's job.
			s.log.Warn("filestore: claim interrupted by Close; the job is left to recovery", "id", id, "err", err)
		}
		return jobstore.Job{}, false, fmt.Errorf("filestore: claim: %w", jobstore.ErrClosed)
	}
	s.dropCand(id)
	setLease(h, j.Lease())
	claimed = true
	s.noteClaim()
	return j, true, nil
}

// noCands reports whether the candidate set is empty.
func (s *Store) noCands() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cands.len() == 0
}

func (s *Store) dropCand(id string) {
	s.mu.Lock()
	s.cands.del(id)
	s.mu.Unlock()
}
