package filestore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Claim hands the most urgent due queued job that req accepts to
// req.Worker. The job is chosen from the in-memory candidate set; the
// claim itself takes the job's lease lock (held until Complete), then its
// record lock, re-reads the record and renames it from queued/ to
// claimed/. Of processes racing for one job exactly one rename succeeds;
// the others move on to the next candidate.
func (s *Store) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	jobs, err := s.claim(ctx, req, 1)
	if err != nil {
		return jobstore.Job{}, err
	}
	return jobs[0], nil
}

var _ jobstore.BatchClaimer = (*Store)(nil)

// ClaimBatch claims up to max due queued jobs that req accepts, as that
// many calls of Claim would, and returns them in claim order. Each job is
// claimed as Claim claims it (its own lease, record lock and rename), but
// up to claimParallel at once and with one look at the queue for all of
// them, so that a runner with many free slots fills them without waiting
// for one claim after another. A job whose record lock another process
// holds is left for a later call rather than waited for, unless no other
// job could be claimed. It returns an error only when it claimed no job:
// one wrapping ErrNoJob when none is due.
func (s *Store) ClaimBatch(ctx context.Context, req jobstore.ClaimRequest, max int) ([]jobstore.Job, error) {
	if err := storekit.ValidateClaimBatch(max); err != nil {
		return nil, fmt.Errorf("filestore: claim batch: %w", err)
	}
	return s.claim(ctx, req, max)
}

// claim claims up to want jobs for req, at most claimParallel of them at
// once, and returns them in claim order; an error only when it claimed
// none. Claim and ClaimBatch are this with want 1 and want max.
func (s *Store) claim(ctx context.Context, req jobstore.ClaimRequest, want int) ([]jobstore.Job, error) {
	if err := s.enter(ctx, "claim"); err != nil {
		return nil, err
	}
	if s.trustErr != nil {
		return nil, fmt.Errorf("filestore: claim: %w", s.trustErr)
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("filestore: claim: %w", err)
	}
	s.watch()
	s.mu.Lock()
	seq := s.signals.Seq()
	s.claimer = true
	s.mu.Unlock()
	s.watchEndsOnce()
	_, err := s.refreshCands()
	if err != nil {
		return nil, fmt.Errorf("filestore: claim: scan queue: %w", err)
	}
	qv, err := s.queues()
	if err != nil {
		return nil, fmt.Errorf("filestore: claim: %w", err)
	}
	if (len(qv.limits) > 0 || len(qv.perPartition) > 0) && !s.slotWait.Load() {
		s.slotWait.Store(true)
	}
	r := &claimRun{s: s, req: req, want: want, tried: make(map[string]bool), blocked: qv.blocked, perPartition: qv.perPartition}
	defer r.restore()
	rescanned := false
	for {
		r.run(ctx)
		if err = ctx.Err(); err == nil {
			err = r.closed
		}
		if err != nil || r.done() {
			// The jobs claimed are the caller's, whatever stopped the run.
			if len(r.jobs) > 0 {
				return r.result(), nil
			}
			return nil, err
		}
		if !rescanned && len(r.jobs) == 0 && s.noCands() {
			// An empty set may only mean lost events: look at queued/
			// itself once (cheap when it is empty too) before saying no.
			// A claim that has jobs returns them without looking: the
			// listing would delay their start (an idle runner's claim
			// finds one job and has slots left), and the next claim that
			// finds none looks.
			rescanned = true
			s.mu.Lock()
			s.rescan = true
			s.mu.Unlock()
			if n, err := s.refreshCands(); err == nil && n > 0 {
				continue
			}
		}
		if len(r.lockBusy) > 0 && len(r.jobs) == 0 {
			// Nothing else was claimable: wait a little for the jobs
			// whose record locks were busy. A batch that has jobs
			// returns them rather than wait, and leaves these for its
			// next call.
			ids := r.lockBusy
			r.lockBusy = nil
			r.jobs, err = s.claimBusy(ctx, ids, req, want)
			if len(r.jobs) > 0 {
				return r.result(), nil
			}
			if err != nil {
				return nil, err
			}
			r.busy = true
			continue
		}
		if len(r.jobs) > 0 {
			return r.result(), nil
		}
		if r.claimErr != nil {
			return nil, r.claimErr
		}
		next := r.next
		var soon time.Time
		if r.busy {
			soon = time.Now().Add(leaseRetry)
		}
		if !r.rateNext.IsZero() && (soon.IsZero() || r.rateNext.Before(soon)) {
			soon = r.rateNext
		}
		if !soon.IsZero() && (next.IsZero() || soon.Before(next)) {
			next = soon
		}
		s.mu.Lock()
		s.signals.NoJob(seq)
		if !soon.IsZero() {
			// For callers that do not read NextRunAt: AwaitWork
			// returns then too.
			s.busyRetry = soon
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("filestore: claim: %w", &jobstore.NoJobError{NextRunAt: next, Since: seq})
	}
}

// claimParallel is how many jobs one ClaimBatch claims at once. A claim
// is a dozen short system calls, each a point where the Go scheduler may
// let the claiming goroutine wait behind the handlers that are running;
// claiming several jobs at once overlaps those waits, which a single
// claim loop would add up (a runner's only claimer).
const claimParallel = 4

// maxClaimErrors is how many jobs that cannot be claimed (a link or
// another user's file planted as the lease lock, a full disk) a claim
// skips before it returns the last error: such a job must not stop the
// claims of every other job, and the error is returned only if no job
// could be claimed.
const maxClaimErrors = 8

// claimRun is the state of one Claim or ClaimBatch: the candidates it
// tried, what it claimed, and why the others were not.
type claimRun struct {
	s    *Store
	req  jobstore.ClaimRequest
	want int
	// blocked holds the queues whose jobs the run must not claim (paused,
	// or full), as last read; claimOne reads the settings again before
	// each claim.
	blocked map[string]bool
	// fullParts holds the partitions the run passes over: those it found
	// full, and those of a job someone else held (holdPartition).
	fullParts map[part]bool
	// perPartition holds the per-partition limits, as read when the run
	// began.
	perPartition map[string]int

	mu    sync.Mutex
	tried map[string]bool
	// aside holds the tried candidates that picks took off the candidate
	// set's heaps; restore gives them back.
	aside    []candItem
	inflight int
	jobs     []jobstore.Job
	next     time.Time // the earliest RunAt of accepted jobs not yet due
	// rateNext is the earliest time a rate-limited queue whose jobs the
	// run passed over has room for a start again.
	rateNext time.Time
	// busy is set when a due job's lease was held by someone else:
	// another claimant, or a Complete or a recovery that is putting it
	// back in the queue. That holder's release makes no event, so the
	// caller is asked to call again shortly rather than at the next poll.
	busy bool
	// lockBusy lists due jobs skipped because another process (or
	// goroutine) held their record lock: a holder that is stopped must
	// not keep this claim from the other jobs. Once no other job is
	// claimable, they are tried again with a short wait (see
	// recordLockPatience).
	lockBusy []string
	claimErr error
	nerr     int
	closed   error // ErrClosed, once a claim met it
}

// run claims candidates until it has want jobs or no untried candidate is
// due, with up to claimParallel goroutines when want is more than one.
func (r *claimRun) run(ctx context.Context) {
	// No more claimers than candidates: an idle Store's claim of the one
	// job just submitted, or a look that finds none, starts no goroutine.
	n := min(r.want-len(r.jobs), claimParallel, r.s.candCount())
	if n <= 1 {
		r.claimLoop(ctx)
		return
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { r.claimLoop(ctx) })
	}
	wg.Wait()
}

// claimLoop is one claimer of run.
func (r *claimRun) claimLoop(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		r.mu.Lock()
		if r.closed != nil || r.nerr >= maxClaimErrors || len(r.jobs)+r.inflight >= r.want {
			r.mu.Unlock()
			return
		}
		c, turn, n, next := r.s.pick(r.req, r.blocked, r.fullParts, r.perPartition, now, r.tried, &r.aside)
		id := c.id
		if id == "" {
			r.next = next
			r.mu.Unlock()
			return
		}
		r.tried[id] = true
		r.inflight++
		r.mu.Unlock()

		r.s.takeTurn(turn, n)
		j, ok, err := r.s.claimOne(ctx, id, r.req, now, false)
		r.s.doneTurn(turn)

		r.mu.Lock()
		r.inflight--
		switch {
		case errors.Is(err, errLeaseBusy), errors.Is(err, errSlotsBusy):
			r.busy = true
			r.holdPartition(c.c)
		case errors.Is(err, errRecordBusy):
			r.lockBusy = append(r.lockBusy, id)
			r.holdPartition(c.c)
		case errors.Is(err, errQueueBlocked):
			if qv, err := r.s.queues(); err == nil {
				r.blocked = qv.blocked
			}
		case errors.Is(err, errQueueFull):
			// Pass over the rest of the queue's jobs in this run; a slot
			// that frees wakes AwaitWork (handleEvent).
			r.blocked = maps.Clone(r.blocked)
			if r.blocked == nil {
				r.blocked = make(map[string]bool)
			}
			r.blocked[j.Queue] = true
		case errors.Is(err, errRateFull), errors.Is(err, errRateBusy):
			// Pass over the queue's jobs in this run, and have the caller
			// come back when its window has room (or soon, for a starts
			// file held elsewhere).
			r.blocked = maps.Clone(r.blocked)
			if r.blocked == nil {
				r.blocked = make(map[string]bool)
			}
			r.blocked[j.Queue] = true
			if re, ok := errors.AsType[*rateError](err); ok {
				if r.rateNext.IsZero() || re.next.Before(r.rateNext) {
					r.rateNext = re.next
				}
			} else {
				r.busy = true
			}
		case errors.Is(err, errPartitionFull):
			// Pass over the rest of the partition's jobs, likewise.
			r.skipPartition(part{j.Queue, j.Partition})
		case errors.Is(err, jobstore.ErrClosed):
			r.closed = err
		case err != nil:
			r.holdPartition(c.c) // its later jobs wait for it, as for a held lease
			r.claimErr = fmt.Errorf("filestore: claim %s: %w", id, err)
			r.nerr++
			if r.nerr < maxClaimErrors && ctx.Err() == nil {
				r.s.log.Warn("filestore: cannot claim a job; trying the next one", "id", id, "err", err)
			}
		case ok:
			r.jobs = append(r.jobs, j)
		}
		r.mu.Unlock()
	}
}

// skipPartition makes the run pass over the jobs of p. The caller holds
// r.mu.
func (r *claimRun) skipPartition(p part) {
	if r.fullParts == nil {
		r.fullParts = make(map[part]bool)
	}
	r.fullParts[p] = true
}

// holdPartition is for a candidate c that someone else held (its lease or
// its record lock): if c's queue limits its partitions, the run passes
// over the partition's later jobs rather than start one of them before
// c, so that the jobs of a partition start in claim order. The caller
// holds r.mu.
func (r *claimRun) holdPartition(c cand) {
	if c.partition != "" && r.perPartition[c.queue] > 0 {
		r.skipPartition(part{c.queue, c.partition})
	}
}

// done reports whether the run has what it wants, or must stop trying.
func (r *claimRun) done() bool {
	return len(r.jobs) >= r.want || (r.nerr >= maxClaimErrors && len(r.jobs) > 0)
}

// result returns the jobs claimed, in claim order.
func (r *claimRun) result() []jobstore.Job {
	slices.SortFunc(r.jobs, func(a, b jobstore.Job) int {
		switch {
		case storekit.ClaimOrder(a, b):
			return -1
		case storekit.ClaimOrder(b, a):
			return 1
		}
		return 0
	})
	return r.jobs
}

// claimBusy tries again the jobs a claim skipped because their record
// lock was held, this time waiting for each lock, all of them together for
// at most recordLockPatience: a lock held longer than that is held by a
// stopped or hung process, and its jobs are left for a later Claim. It
// claims up to want of them, and returns an error only for ctx or Close.
func (s *Store) claimBusy(ctx context.Context, ids []string, req jobstore.ClaimRequest, want int) ([]jobstore.Job, error) {
	wctx, cancel := context.WithTimeout(ctx, recordLockPatience)
	defer cancel()
	var jobs []jobstore.Job
	for _, id := range ids {
		if len(jobs) >= want {
			break
		}
		j, ok, err := s.claimOne(wctx, id, req, time.Now(), true)
		if ok {
			jobs = append(jobs, j)
			continue
		}
		if err := ctx.Err(); err != nil {
			return jobs, err
		}
		if errors.Is(err, jobstore.ErrClosed) {
			return jobs, err
		}
		if err != nil && !passedOver(err) && wctx.Err() == nil {
			s.log.Warn("filestore: cannot claim a job; trying the next one", "id", id, "err", err)
		}
		if wctx.Err() != nil {
			break
		}
	}
	return jobs, nil
}

// passedOver reports whether err is claimOne's answer for a job that was
// not claimable just then (held elsewhere, paused, or without room by its
// limits), rather than a failure worth a warning.
func passedOver(err error) bool {
	for _, e := range []error{errLeaseBusy, errQueueBlocked, errQueueFull, errPartitionFull, errSlotsBusy, errRateFull, errRateBusy} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
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

// errQueueBlocked is claimOne's answer when the job's queue was paused
// since the claim began.
var errQueueBlocked = errors.New("the job's queue is paused")

// pick returns the best due candidate req accepts, of a queue not in
// blocked and a partition not in parts, that is not in tried, or an empty
// one and the earliest RunAt among those candidates not yet due; see
// candIndex.pick for aside.
//
// A candidate of a partition that perPartition limits gets a turn of its
// partition (see takeTurn), in the order of the picks.
func (s *Store) pick(req jobstore.ClaimRequest, blocked map[string]bool, parts map[part]bool, perPartition map[string]int, now time.Time, tried map[string]bool, aside *[]candItem) (candItem, *partTurn, uint64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var skip func(part) bool
	if len(parts) > 0 {
		skip = func(p part) bool { return parts[p] }
	}
	c, next := s.cands.pick(req, blocked, skip, now, tried, aside)
	if c.id == "" || c.c.partition == "" || perPartition[c.c.queue] == 0 {
		return c, nil, 0, next
	}
	p := part{c.c.queue, c.c.partition}
	t := s.partTurns[p]
	if t == nil {
		if s.partTurns == nil {
			s.partTurns = make(map[part]*partTurn)
		}
		t = &partTurn{p: p}
		s.partTurns[p] = t
	}
	n := t.next
	t.next++
	return c, t, n, next
}

// partTurn orders the claims of one Store of the jobs of one limited
// partition: a claim of the job picked first is made first, so that with a
// per-partition limit of 1 a later job cannot take the partition's slot
// while an earlier one is being claimed (by another claimer of the same
// ClaimBatch, say). Each claim waits for its turn only while the claims
// picked before it run, a few system calls each.
type partTurn struct {
	p            part
	next, serves uint64
}

// takeTurn waits for turn n of t; doneTurn ends it. A nil t has no turns.
func (s *Store) takeTurn(t *partTurn, n uint64) {
	if t == nil {
		return
	}
	s.mu.Lock()
	for t.serves != n {
		s.partTurnDone.Wait()
	}
	s.mu.Unlock()
}

func (s *Store) doneTurn(t *partTurn) {
	if t == nil {
		return
	}
	s.mu.Lock()
	t.serves++
	if t.serves == t.next && s.partTurns[t.p] == t {
		delete(s.partTurns, t.p)
	}
	s.partTurnDone.Broadcast()
	s.mu.Unlock()
}

// restore gives back to the candidate set what the run's picks set aside.
// It runs once the run is over, when no claimer of the run picks any more.
func (r *claimRun) restore() {
	if len(r.aside) == 0 {
		return
	}
	r.s.mu.Lock()
	r.s.cands.restore(r.aside)
	r.s.mu.Unlock()
	r.aside = nil
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
	// Lease before record, always: the lease is what tells other processes
	// this claimant is alive, so it is held before the job is visible in
	// claimed/.
	h, ok, err := tryLease(s, id)
	if err != nil {
		return jobstore.Job{}, false, err
	}
	if !ok {
		return jobstore.Job{}, false, errLeaseBusy
	}
	claimed := false
	defer func() {
		if !claimed {
			releaseLease(h)
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
		if errors.Is(err, jobstore.ErrNotFound) {
			s.dropLeaseFile(id) // pruned since it was a candidate
		}
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
	if !rec.Job.Due(now) || !req.Accepts(rec.Job.Queue, rec.Job.Kind) {
		s.mu.Lock()
		s.cands.set(id, candOf(rec.Job))
		s.mu.Unlock()
		return jobstore.Job{}, false, nil
	}
	// The queue's settings as they are now, read after the lease and the
	// record lock are held: a pause that returned before this point stops
	// this claim, whenever the claim began.
	qv, err := s.queues()
	if err != nil {
		return jobstore.Job{}, false, err
	}
	if qv.blocked[rec.Job.Queue] {
		return jobstore.Job{}, false, errQueueBlocked
	}
	if err := s.takeSlots(h, qv, rec.Job); err != nil {
		return jobstore.Job{Queue: rec.Job.Queue, Partition: rec.Job.Partition}, false, err
	}
	if rate, ok := qv.rates[rec.Job.Queue]; ok {
		// Last before the claim is made, so that a start is counted only
		// once every other check let the job start; its time, read under
		// the queue's lock of its starts, is the job's start. A claim that
		// fails after this counts as a start, which only ever delays the
		// next.
		at, err := s.takeStart(rec.Job.Queue, rate)
		if err != nil {
			return jobstore.Job{Queue: rec.Job.Queue}, false, err
		}
		now = at
	}
	j, err := storekit.ApplyClaim(rec.Job, req.Worker, now)
	if err != nil {
		return jobstore.Job{}, false, err
	}
	// The claim is a note (an extended attribute of the record, or the
	// lease file: writeClaimNote), then the rename: the record itself is
	// not rewritten, so a claim creates no file and makes no fsync.
	// Readers (all under the record lock) see a record in claimed/ that
	// still says queued as running, as the note says. The note is
	// never fsynced; the rename is made durable by this Store's claim
	// flusher a moment later (claimflush.go), so that a power cut during
	// the attempt leaves the record in claimed/ and recovery counts the
	// attempt from that alone if the note is lost (recoverOne): a job whose
	// attempts bring the machine down ends failed after MaxAttempts
	// (TestPowerCutCountsAttempt).
	note := claimNote{Rev: rec.Rev, Worker: req.Worker, ClaimedAt: now.UTC()}
	if err := s.writeClaimNote(id, note); err != nil {
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
	held := record{envelope: rec.envelope, dir: dirClaimed}
	held.Job = held.Job.Clone()
	setLease(h, j.Lease(), &heldClaim{rec: held, note: note})
	claimed = true
	s.noteClaim()
	return j, true, nil
}

// takeSlots takes the slots that job j needs, by the limits of qv: one of
// its partition's, then one of its queue's. They are set in h, whose lease
// gives them back if the claim fails after this. It returns
// errPartitionFull or errQueueFull when one has none free.
func (s *Store) takeSlots(h *leaseHold, qv *queueView, j jobstore.Job) error {
	limit := qv.limits[j.Queue]
	per := 0
	if j.Partition != "" {
		per = qv.perPartition[j.Queue]
	}
	if limit == 0 && per == 0 {
		return nil
	}
	if !s.slotWait.Load() {
		s.slotWait.Store(true) // a limit set since the claim began
	}
	var slots []heldSlot
	if per > 0 {
		sl, err := s.takePartitionSlot(j.Queue, j.Partition, per, j.ID)
		if errors.Is(err, errPartitionFull) || errors.Is(err, errSlotsBusy) {
			return err
		}
		if err != nil {
			return fmt.Errorf("take a slot of partition %q of queue %s: %w", j.Partition, j.Queue, err)
		}
		slots = append(slots, sl)
	}
	if limit > 0 {
		f, err := s.takeSlot(j.Queue, limit, j.ID)
		if err != nil {
			freeSlots(slots)
			if errors.Is(err, errQueueFull) {
				return err
			}
			return fmt.Errorf("take a slot of queue %s: %w", j.Queue, err)
		}
		slots = append(slots, heldSlot{f: f, s: s})
	}
	leases.Lock()
	h.slots = slots
	leases.Unlock()
	return nil
}

// noCands reports whether the candidate set is empty.
func (s *Store) noCands() bool {
	return s.candCount() == 0
}

// candCount returns the number of candidates, due or not.
func (s *Store) candCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cands.len()
}

func (s *Store) dropCand(id string) {
	s.mu.Lock()
	s.cands.del(id)
	s.mu.Unlock()
}
