package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/gofrs/flock"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Store is a jobstore.Store kept in a directory that any number of
// processes on one machine may open at once. It is safe for concurrent use
// by goroutines and by processes; see the package documentation for what
// that rests on.
type Store struct {
	dir string
	// sub maps each state directory and locks/ to its path with a
	// trailing separator, so that the paths of the records and lock files
	// in them, whose names are validated IDs, are built without the Clean
	// of filepath.Join (1.3% of a work-off's CPU).
	sub map[string]string
	// root is dir, opened once at Open; writes resolve from it (osFS).
	root *os.Root
	// pins holds the store's own directories open, for the changes osFS
	// makes in them (dirpins.go); nil with another fileOps.
	pins *dirPins
	// ranges holds the record locks as bytes of locks/records.lock
	// (rangelocks_linux.go); nil where each job has a lock file of its
	// own (lockPath).
	ranges *rangeLocks
	// spares keeps descriptors of locks/leases.lock that lease attempts
	// opened and could not lock, for the next attempts (leaselocks_linux.go).
	spares   leaseSpares
	opts     Options
	fs       fileOps // the seam every change of the directory goes through (fsops.go)
	dirPerm  os.FileMode
	filePerm os.FileMode
	log      *slog.Logger

	// tmpDir is this Store's private staging directory under tmp/, locked
	// by tmpLock for the Store's life so that another process's sweep
	// leaves it alone.
	tmpDir  string
	tmpLock *flock.Flock

	// stats caches what Stats read, per record file.
	stats statsCache
	// queueCache holds the queue settings last read (queues.go).
	queueCache queueCache
	// slotDirs holds the slot directories this Store made or found
	// (slots.go), so that a claim makes them once.
	slotDirs sync.Map
	// kinds remembers the kinds of jobs seen, for List's kind filter.
	kinds kindIndex
	// trustErr, set at Open, is why the store is not trusted with running
	// jobs, or nil (see CheckTrust).
	trustErr error

	// durable makes changes durable: every fsync and syncfs goes through
	// it.
	durable *durability

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	// claiming is held shared by each claim attempt and exclusively by
	// Close before it releases this Store's leases, so that Close never
	// releases a lease a claim has just taken while that claim goes on
	// to return the job.
	claiming sync.RWMutex

	watchMu sync.Mutex
	// watching is set by the first watch (guarded by watchMu).
	watching bool
	watcher  *fsnotify.Watcher
	// stopEnds stops the watch of other Stores' ends, started once by
	// endsOnce (guarded by watchMu; nil until then); ended receives when
	// one ended; endMark is this Store's staging lock opened for writing,
	// from its first Claim (ends.go).
	stopEnds func()
	endsOnce sync.Once
	ended    chan struct{}
	endMark  *os.File

	// workersMu guards workerRegs, the workers this Store registered (see
	// RegisterWorker).
	workersMu  sync.Mutex
	workerRegs map[*workerReg]struct{}

	mu sync.Mutex
	// cands is the claim candidate set: every job believed to be in
	// queued/, without payloads. It is a hint: Claim re-reads the record
	// under its lock before acting.
	cands *candIndex
	// partTurns holds, for each partition of a queue with a per-partition
	// limit, the turns of this Store's claims that picked one of its jobs
	// and are not done with it, in the order they picked them: each claims
	// in its turn, so that a partition's later job cannot take its slot
	// before an earlier one (claim order). Guarded by mu, as cands;
	// partTurnDone is signalled, with mu, when a turn ends.
	partTurns    map[part]*partTurn
	partTurnDone *sync.Cond
	// pending holds IDs whose queued/ entry changed since cands last saw
	// them; rescan asks for a full rescan of queued/.
	pending map[string]struct{}
	rescan  bool
	// rescans counts the full rescans of queued/ (tests).
	rescans atomic.Int64
	// repairedInBackground is set once maintain has made the repairs of
	// Repair; until then maintain tries them, a minute apart.
	repairedInBackground atomic.Bool
	// noXattrs is set once a claim note could not be set as an extended
	// attribute because the file system keeps none: the Store's notes go
	// to lease files from then on (writeClaimNote).
	noXattrs atomic.Bool

	// jmu guards jr, the submission journal this Store holds (nil until
	// its first journaled submit); jretry, before which none is tried
	// again after a failure to take one; jclosed, set by Close; and
	// jcovered, the header of each journal last seen covered, durably
	// (journalCovered).
	jmu      sync.Mutex
	submits  atomic.Int64 // Submit calls without a key, for journalFor
	jr       *journal
	jretry   time.Time
	jclosed  bool
	jcovered map[int]journalHeader
	// claimer is set by the first Claim: until then the Store keeps no
	// candidate set (no pending IDs, no polls of queued/), so that one
	// that never claims never reads the queue.
	claimer bool

	// waitMu guards waiting: the waiting jobs this Store has seen in
	// queued/, which a Store that claims settles every settleInterval
	// (deps.go).
	waitMu  sync.Mutex
	waiting map[string]struct{}
	// work is closed and replaced whenever a job may have become
	// claimable; signals counts that, and what the latest Claim that
	// found nothing saw (see AwaitWork).
	work    chan struct{}
	signals storekit.WorkCount
	// busyRetry, when set, is when AwaitWork returns because the last
	// Claim that found nothing skipped a due job whose lease was held
	// (the holder's release makes no event; see leaseRetry), or a job of
	// a queue whose rate window was full (until it has room).
	busyRetry time.Time
	// slotWait is set once a claim saw a limited queue (slots.go): from
	// then on a record leaving claimed/ (an attempt that ended, in any
	// process) wakes AwaitWork, as it may have freed a slot. It is set
	// before the claim looks at the slots, so that no attempt that ends
	// after that look goes unseen.
	slotWait atomic.Bool
	// changed holds a channel per watched job ID, closed and removed on any
	// event about that job (Wait, WatchCancel).
	changed map[string]*idWatch
	// readers holds the shared reader of each job that Wait watches;
	// noReaders is set by Close, after which none starts.
	readers   map[string]*jobReader
	noReaders bool
	// keys caches idempotency key hash -> job ID. Only a cache: an entry is
	// used only after the job's record is read and its key compared.
	keys map[string]string
	// recorders are the List and Stats calls collecting the IDs that
	// events name (see moveRecorder).
	recorders map[*moveRecorder]struct{}
	// claims makes claims durable in the background (claimflush.go).
	claims *claimFlush
	// barrierNonce and barrierSeq name this Store's barriers (see
	// nextBarrier).
	barrierNonce string
	barrierSeq   atomic.Uint64
	// statsDirty holds the IDs that events named since the last Stats (nil
	// until the first); statsLost says events may have been lost since
	// (see statsCache).
	statsDirty map[string]struct{}
	statsLost  bool
	// index is the state directories' names, kept by events.
	index dirIndex
}

var (
	_ jobstore.Store       = (*Store)(nil)
	_ jobstore.StatePruner = (*Store)(nil)
	_ jobstore.Deleter     = (*Store)(nil)
	_ jobstore.WorkAwaiter = (*Store)(nil)
)

// Dir returns the store's directory as an absolute path.
func (s *Store) Dir() string { return s.dir }

// Durability says, for people, how this Store makes its changes durable,
// as Open chose from Options and from the kind of file system the store is
// on: an fsync of each new file and changed directory, or one syncfs(2)
// where that is known to reach the disk (ext4 and xfs on a block device,
// btrfs, tmpfs), or nothing with Options.NoSync. It is safe for concurrent
// use.
func (s *Store) Durability() string {
	if s.journaling() {
		return s.durable.mode() + "; a submit of a job without a key through a submission journal (one fdatasync(2)), its record made durable by a syncfs within half a second"
	}
	return s.durable.mode()
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// enter checks that the store is open and ctx live before an operation.
func (s *Store) enter(ctx context.Context, op string) error {
	if s.isClosed() {
		return fmt.Errorf("filestore: %s: %w", op, jobstore.ErrClosed)
	}
	return ctx.Err()
}

// writeRecord writes env as job env.Job.ID's record in dir, atomically,
// fsynced before its rename when sync is set and the store fsyncs files.
func (s *Store) writeRecord(dir string, env envelope, sync bool) error {
	data, err := encodeRecord(env)
	if err != nil {
		return err
	}
	p := s.recordPath(dir, env.Job.ID)
	if err := s.fs.WriteFile(p, s.tmpDir, data, s.filePerm, sync && s.durable.file()); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// placeRecord is writeRecord, unsynced, for a record moving into dir,
// which holds no record of the job as a rule: a new file named there
// (fileOps.WriteNew), which changes dir alone, or, where a copy is there
// (one a crash left), a temp file renamed over it.
func (s *Store) placeRecord(dir string, env envelope, _ bool) error {
	data, err := encodeRecord(env)
	if err != nil {
		return err
	}
	p := s.recordPath(dir, env.Job.ID)
	nf, err := s.fs.WriteNew(p, s.tmpDir, data, s.filePerm)
	if err == nil {
		err = s.fs.PlaceNew(nf)
	}
	if errors.Is(err, fs.ErrExist) {
		err = s.fs.WriteFile(p, s.tmpDir, data, s.filePerm, false)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// store writes j as the successor of rec: into the directory of j's state
// with the next revision, fsyncing that directory when durable is set,
// then removes rec's file if it was in another directory. The caller holds
// the record lock exclusively. A crash between the two steps leaves two
// copies, of which the new one has the higher revision and wins.
//
// A record that moves to another directory is renamed into place before
// its fsync (durability.placed), which then commits the rename with it:
// until the fsync, rec's file is the copy a power cut leaves. A record
// rewritten in its own directory replaces rec's file, so it is fsynced
// before its rename.
//
// If the write fails, nothing changed and rec is returned with the error.
// If the fsync fails, the new record is in place (every reader sees it)
// and rec's file is kept, so that a power cut that loses the new record
// leaves the old one: store returns the new record with an error matching
// jobstore.ErrNotDurable.
func (s *Store) store(rec record, j jobstore.Job, durable bool) (record, error) {
	next := record{envelope: envelope{Format: FormatVersion, Rev: rec.Rev + 1, Job: j, Logged: rec.Logged}, dir: dirOf(j.State)}
	placeFirst := durable && rec.dir != next.dir
	since := s.durable.mark()
	write := s.writeRecord
	if placeFirst {
		write = s.placeRecord
	}
	if err := write(next.dir, next.envelope, !placeFirst); err != nil {
		return rec, err
	}
	if durable {
		var err error
		if placeFirst {
			err = s.durable.moved(s.recordPath(next.dir, j.ID), next.dir, since)
		} else {
			err = s.durable.dir(next.dir)
		}
		if err != nil {
			s.touched(j.ID)
			return next, fmt.Errorf("job %s is now %s, but %w: %w", j.ID, j.State, jobstore.ErrNotDurable, err)
		}
	}
	if rec.dir != next.dir {
		if err := s.fs.Remove(s.recordPath(rec.dir, j.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The new record is in place and wins by revision; the old copy
			// is removed by the next repair.
			s.log.Warn("filestore: remove superseded record", "id", j.ID, "err", err)
		}
	}
	s.touched(j.ID)
	return next, nil
}

// removeStale removes the superseded copies locate found. The caller holds
// the record lock exclusively.
func (s *Store) removeStale(f found) {
	for _, p := range f.stale {
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("filestore: remove stale record", "path", p, "err", err)
		}
	}
}

// The orders in which dropLockIfGone looks for a record: lookMoved for a
// change of a job that exists (a Complete leaves the record in done/, a
// claim in claimed/), lookSubmitted for a new job's (in queued/).
var (
	lookMoved     = []string{dirDone, dirClaimed, dirQueued}
	lookSubmitted = []string{dirQueued, dirDone, dirClaimed}
)

// lockJob takes job id's exclusive record lock, creating its lock file if
// need be. It does not say whether the job exists: the caller reads the
// record. The returned function removes the lock file if the job has no
// record by then (see dropLockIfGone), then releases the lock.
func (s *Store) lockJob(ctx context.Context, id string) (func(), error) {
	return s.lockJobIn(ctx, id, lookMoved)
}

// lockJobIn is lockJob for a job whose record the caller expects to
// leave where look says (see dropLockIfGone).
func (s *Store) lockJobIn(ctx context.Context, id string, look []string) (func(), error) {
	if s.ranges != nil {
		unlock, _, err := s.lockRange(ctx, id, true, true)
		if err != nil {
			return nil, s.lockErr(id, err)
		}
		return unlock, nil
	}
	unlock, err := lockRecord(ctx, s.lockPath(id), true, true, s.filePerm)
	if err != nil {
		return nil, s.lockErr(id, err)
	}
	return func() { s.dropLockIfGone(id, look); unlock() }, nil
}

// tryLockJob takes job id's exclusive record lock as lockJob does, but
// returns ok=false at once if another holder has it.
func (s *Store) tryLockJob(id string) (func(), bool, error) {
	if s.ranges != nil {
		unlock, ok, err := s.lockRange(context.Background(), id, true, false)
		return unlock, ok, s.lockErr(id, err)
	}
	unlock, ok, err := tryLockRecord(s.lockPath(id), true, true, s.filePerm)
	if err != nil || !ok {
		return nil, false, s.lockErr(id, err)
	}
	return func() { s.dropLockIfGone(id, lookMoved); unlock() }, true, nil
}

// dropLockIfGone removes job id's record lock file if no state directory
// holds a record of the job: it was pruned, its submit was taken back, or
// it never existed (a Cancel of an unknown ID). The caller holds the lock
// exclusively; whoever opened the file before it goes finds, once it has
// the lock, that the path names no file or another one, and starts over
// (flockPath). So lock files do not pile up with jobs that are gone. It
// looks in the state directories in the order look gives, the one the
// caller left the record in first: a look that misses in a large
// directory that other processes change (queued/ just after a claim
// renamed the record out of it, done/ after a submit) searches the
// directory on the disk, under its lock, which every rename there takes;
// with queued/ first for every change, two processes worked off 15-20%
// fewer jobs, and with done/ first a batch of new jobs spent 6% of its
// CPU samples looking in done/ and claimed/.
func (s *Store) dropLockIfGone(id string, look []string) {
	for _, d := range look {
		if _, err := os.Lstat(s.recordPath(d, id)); !errors.Is(err, fs.ErrNotExist) {
			return
		}
	}
	if err := s.fs.Remove(s.lockPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// A lock file left behind costs an inode and nothing else; the
		// next change of the ID, Open or Fsck with repair removes it.
		s.log.Debug("filestore: remove the lock file of a job that is gone", "id", id, "err", err)
	}
}

// dropLeaseFile removes job id's lease lock file. The caller holds the
// lease and the job's record lock, and found that the job has no record:
// a claim or a recovery pass that met a job pruned after it was listed
// made the file again (tryLease creates it), and nothing else would ever
// remove it. Whoever opened the file before finds, once it has the lease,
// that the path names no file and lets go.
func (s *Store) dropLeaseFile(id string) {
	if err := s.fs.Remove(s.leasePath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Left behind, it costs an inode; Fsck with repair removes it.
		s.log.Debug("filestore: remove the lease file of a job that is gone", "id", id, "err", err)
	}
}

// rlockJob takes job id's shared record lock, for a check that must not
// overlap a change (Fsck, a recovery pass without repair; plain reads take
// no lock, see readShared). If the lock file does not exist it takes
// nothing and returns held=false: the job has no record, or is of an older
// format and was not changed since, and the check goes on unlocked (a
// read-only store stays checkable). With range locks the job's byte is
// always there to lock, and held is true.
func (s *Store) rlockJob(ctx context.Context, id string) (unlock func(), held bool, err error) {
	if s.ranges != nil {
		unlock, _, err = s.lockRange(ctx, id, false, true)
		if err != nil {
			return nil, false, s.lockErr(id, err)
		}
		return unlock, true, nil
	}
	unlock, err = lockRecord(ctx, s.lockPath(id), false, false, s.filePerm)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(filepath.Join(s.dir, dirLocks)); serr == nil {
			return func() {}, false, nil
		}
	}
	if err != nil {
		return nil, false, s.lockErr(id, err)
	}
	return unlock, true, nil
}

// shareJob takes job id's shared record lock, making its lock file if
// need be (rlockJob does not): for a job that must not change while the
// caller looks at it and acts on what it saw.
func (s *Store) shareJob(ctx context.Context, id string) (func(), error) {
	if s.ranges != nil {
		unlock, _, err := s.lockRange(ctx, id, false, true)
		return unlock, s.lockErr(id, err)
	}
	unlock, err := lockRecord(ctx, s.lockPath(id), false, true, s.filePerm)
	return unlock, s.lockErr(id, err)
}

// lockFor takes job id's record lock exclusively to change the job, or
// shared (if its file exists, see rlockJob) only to look at it.
func (s *Store) lockFor(ctx context.Context, id string, change bool) (func(), error) {
	if change {
		return s.lockJob(ctx, id)
	}
	unlock, _, err := s.rlockJob(ctx, id)
	return unlock, err
}

// lockErr explains an error from taking job id's record lock.
func (s *Store) lockErr(id string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		// Not just this job: say so, or a removed store reads as an empty
		// one.
		return fmt.Errorf("job %s: %w: the store's %s/ directory is missing (was %s removed?)", id, jobstore.ErrNotFound, dirLocks, s.dir)
	}
	if errors.Is(err, syscall.ELOOP) && s.ranges == nil {
		// A link planted as the lock file: reported like a corrupt record,
		// so that List and Claim skip the jobs it guards and go on.
		return &CorruptError{Path: s.lockPath(id), Reason: "lock file is a symbolic link (not followed)", Err: err}
	}
	return err
}

// readJob returns job id's current record; the caller holds its lock. With
// exclusive set it also removes stale copies.
func (s *Store) readJob(id string, exclusive bool) (record, error) {
	f, err := s.locate(id)
	if err != nil {
		return record{}, err
	}
	if exclusive && f.ok {
		s.removeStale(f)
	}
	return f.current(id)
}
