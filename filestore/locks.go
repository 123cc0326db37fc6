package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// flock(2) locks belong to an open file description: two handles on one
// lock file in one process conflict just as two processes do, so a
// goroutine waiting on a second handle for a lock its process already holds
// would wait forever. The tables below keep at most one handle per lock file
// per process, shared by every Store of the process, with an in-process
// turn in front of each record lock: shared readers hold it together, each
// with a shared flock of its own, and a change waits only for the reads
// under way (see turn).

// recordLocks is the process-wide table of record locks, by lock file path.
var recordLocks = struct {
	sync.Mutex
	m map[string]*recordLockEntry
}{m: make(map[string]*recordLockEntry)}

type recordLockEntry struct {
	turn turn // the in-process turn
	refs int
}

// lockRecord takes the record lock at path: exclusive for a
// read-modify-write, shared for a read. If create is false and the lock
// file does not exist, it returns an error matching fs.ErrNotExist. The
// returned function releases the lock. A goroutine must not wait for a
// second record lock while it holds one (only SubmitBatch holds several:
// those of its new jobs, which nobody else knows), or two goroutines could
// wait for each other.
//
// The wait, in this process and for other processes, ends with ctx: a
// process stopped (SIGSTOP) or hung while it holds the lock delays the
// caller only until its ctx ends, and the error is then ctx.Err().
func lockRecord(ctx context.Context, path string, exclusive, create bool, perm os.FileMode) (func(), error) {
	unlock, _, err := acquireRecord(ctx, path, exclusive, create, perm, true)
	return unlock, err
}

// tryLockRecord takes the record lock at path as lockRecord does, but
// without waiting: it returns ok=false if any goroutine of this process or
// any other process holds it in a conflicting mode.
func tryLockRecord(path string, exclusive, create bool, perm os.FileMode) (unlock func(), ok bool, err error) {
	return acquireRecord(context.Background(), path, exclusive, create, perm, false)
}

func acquireRecord(ctx context.Context, path string, exclusive, create bool, perm os.FileMode, wait bool) (func(), bool, error) {
	recordLocks.Lock()
	e := recordLocks.m[path]
	if e == nil {
		e = &recordLockEntry{}
		recordLocks.m[path] = e
	}
	e.refs++
	recordLocks.Unlock()
	drop := func() {
		recordLocks.Lock()
		if e.refs--; e.refs == 0 {
			delete(recordLocks.m, path)
		}
		recordLocks.Unlock()
	}
	if ok, err := e.turn.enter(ctx, exclusive, wait); err != nil || !ok {
		drop()
		return nil, false, err
	}
	fl, ok, err := flockPath(ctx, path, exclusive, create, perm, wait)
	if err != nil || !ok {
		e.turn.unlock(exclusive)
		drop()
		return nil, false, err
	}
	return func() {
		fl.unlock()
		e.turn.unlock(exclusive)
		drop()
	}, true, nil
}

// patience bounds the total time that one pass of repair or recovery
// waits for busy record locks: a process stopped while it holds some must
// not stall the pass, whose skipped jobs the next pass handles. Once the
// deadline has passed, each lock is only tried. A nil *patience waits as
// long as the caller's ctx allows.
type patience struct{ deadline time.Time }

func newPatience() *patience { return &patience{deadline: time.Now().Add(recordLockPatience)} }

// lock takes a record lock with lock, waiting no longer than p allows. It
// returns ok=false, with no error, if p ran out first.
func (p *patience) lock(ctx context.Context, lock func(context.Context) (func(), error)) (func(), bool, error) {
	if p == nil {
		unlock, err := lock(ctx)
		return unlock, err == nil, err
	}
	wctx, cancel := context.WithDeadline(ctx, p.deadline)
	defer cancel()
	unlock, err := lock(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, false, nil
	}
	return unlock, err == nil, err
}

// Lock waits poll: flock(2) cannot be interrupted, so a blocking flock on a
// lock that a stopped process holds would outlive any ctx. The common hold
// is short (a write and an fsync, about a millisecond: a new job's lock,
// which a claimer in another process meets as soon as the job's event
// comes), so for the first lockPollFastFor the retries come every
// lockPollMin to lockPollFast; after that the interval doubles up to
// lockPollMax. Doubling from the start made a claimer that met a submit's
// lock see it free only 0.5-1.6 ms after its release (the retries at 0.7,
// 1.5 and 3.1 ms), which was most of what a durable submit added to the
// time to start a job in another process.
const (
	lockPollMin     = 100 * time.Microsecond
	lockPollFast    = 250 * time.Microsecond
	lockPollFastFor = 5 * time.Millisecond
	lockPollMax     = 10 * time.Millisecond
)

// nextLockPoll returns the interval after delay, in a wait that has lasted
// waited.
func nextLockPoll(delay, waited time.Duration) time.Duration {
	if waited < lockPollFastFor {
		return min(2*delay, lockPollFast)
	}
	return min(2*delay, lockPollMax)
}

// flockPath opens and locks path, and makes sure the lock is on the inode
// the path names now: Prune deletes lease lock files, and a lock file
// removed by hand or by a tool would leave a process that opened it just
// before holding a lock on an orphan inode (gofrs/flock #8, #41). With
// wait it retries until ctx ends (then the error is ctx.Err()); without,
// it returns ok=false at once if another holder has the lock.
func flockPath(ctx context.Context, path string, exclusive, create bool, perm os.FileMode, wait bool) (*lockFD, bool, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	// Only a lock file this call may have created gets the store's
	// permissions: a reader must not chmod (or fail to chmod) a lock file
	// another user made.
	fixPerm := perm
	if !create {
		fixPerm = 0
	}
	var fl *lockFD
	ok, err := pollLock(ctx, wait, func() (bool, error) {
		for {
			var ok bool
			var err error
			fl, ok, err = tryLockFD(path, how, create, perm)
			if err != nil || !ok {
				return false, lockError(path, err)
			}
			same, err := fl.sameInode(path, fixPerm)
			if err == nil && same {
				return true, nil
			}
			fl.unlock()
			if err != nil && !(create && errors.Is(err, fs.ErrNotExist)) {
				return false, lockError(path, err)
			}
			// Removed or replaced since it was opened: again, at once.
		}
	})
	if err != nil || !ok {
		return nil, false, err
	}
	return fl, true, nil
}

// lockError names the lock file path in err, if there is one.
func lockError(path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("lock %s: %w", path, err)
}

// pollLock calls try until it takes the lock or fails. A blocking
// flock(2) or F_OFD_SETLKW could not end with ctx, so the retries come
// every lockPollMin to lockPollFast at first, then further apart up to
// lockPollMax (nextLockPoll), and the wait ends with ctx (the error is
// then ctx.Err()). Without wait it tries once.
func pollLock(ctx context.Context, wait bool, try func() (bool, error)) (bool, error) {
	delay := lockPollMin
	var start time.Time
	var t *time.Timer
	for {
		ok, err := try()
		if err != nil || ok || !wait {
			if t != nil {
				t.Stop()
			}
			return ok, err
		}
		if t == nil {
			start = time.Now()
			t = time.NewTimer(delay)
		} else {
			t.Reset(delay)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
		delay = nextLockPoll(delay, time.Since(start))
	}
}

// lockFD is a record lock file held open on a bare descriptor and locked
// with flock(2). An *os.File (as gofrs/flock opens) cost several more
// system calls per lock, on every change: a poller registration that a
// regular file refuses and the fcntl(2) calls that make its descriptor
// blocking again for flock.
type lockFD struct{ fd int }

// tryLockFD opens the lock file at path (creating it with perm if create)
// and takes its flock (how: unix.LOCK_SH or unix.LOCK_EX) without
// blocking. It returns ok=false if another holder has the lock. The open
// never follows a link, and never waits for a writer if a FIFO was planted
// at path: sameInode then refuses it.
func tryLockFD(path string, how int, create bool, perm os.FileMode) (*lockFD, bool, error) {
	flag := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK
	if create {
		flag |= unix.O_CREAT
	}
	fd, ok, err := tryFlock(path, flag, how, perm)
	if err != nil || !ok {
		return nil, ok, err
	}
	return &lockFD{fd: fd}, true, nil
}

// tryFlock opens path with flag (and O_CLOEXEC; perm if it creates the
// file) and takes its flock (how) without blocking, on the bare
// descriptor, which it returns. It returns ok=false, and closes the
// descriptor, if another holder has the lock.
func tryFlock(path string, flag, how int, perm os.FileMode) (int, bool, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		return err
	})
	if err != nil {
		return -1, false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	err = ignoringEINTR(func() error { return unix.Flock(fd, how|unix.LOCK_NB) })
	if errors.Is(err, unix.EWOULDBLOCK) {
		_ = unix.Close(fd)
		return -1, false, nil
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, false, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return fd, true, nil
}

// sameInode reports whether the locked file is the regular file path
// names now, and gives a lock file it created the store's permissions,
// which the umask may have narrowed (perm 0: leave them). Anything but a
// regular file at path is an error.
func (l *lockFD) sameInode(path string, perm os.FileMode) (bool, error) {
	var held, now unix.Stat_t
	if err := unix.Fstat(l.fd, &held); err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if uint32(held.Mode)&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("%s: not a regular file", path)
	}
	if err := unix.Lstat(path, &now); err != nil {
		return false, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	if uint64(held.Dev) != uint64(now.Dev) || uint64(held.Ino) != uint64(now.Ino) {
		return false, nil
	}
	if perm != 0 && os.FileMode(held.Mode).Perm() != perm.Perm() {
		if err := unix.Fchmod(l.fd, uint32(perm.Perm())); err != nil {
			return false, &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	return true, nil
}

// unlock releases the lock and closes the descriptor.
func (l *lockFD) unlock() {
	_ = unix.Flock(l.fd, unix.LOCK_UN)
	_ = unix.Close(l.fd)
}

// statter is an open lock file: a *flock.Flock or an *os.File (the lock
// files other than the record locks).
type statter interface {
	Stat() (fs.FileInfo, error)
}

// sameInode reports whether the lock fl holds is on the file path names
// now. It also gives a lock file it created the store's permissions, which
// the umask may have narrowed (perm 0: leave them).
func sameInode(fl statter, path string, perm os.FileMode) (bool, error) {
	held, err := fl.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Lstat(path)
	if err != nil {
		return false, err
	}
	if !os.SameFile(held, now) {
		return false, nil
	}
	if perm != 0 && held.Mode().Perm() != perm {
		if err := os.Chmod(path, perm); err != nil {
			return false, err
		}
	}
	return true, nil
}

// leases is the process-wide table of held leases, by lease file path
// (leasePath, which names the lease whether or not it is a file). A
// claimant holds its job's lease for the whole attempt; the kernel drops
// it when the process dies, which is how other processes tell a dead
// worker from a live one.
var leases = struct {
	sync.Mutex
	m map[string]*leaseHold
}{m: make(map[string]*leaseHold)}

type leaseHold struct {
	// f holds the lease: on Linux an open file of locks/leases.lock with
	// the job's byte locked (ranged, the byte at off), elsewhere the
	// job's lease file, flocked. Not a flock.Flock: LeaseFile hands out
	// duplicates of its descriptor, which share the lock.
	f      *os.File
	ranged bool
	off    int64
	key    string // the table's key
	owner  *Store
	lease  jobstore.Lease // zero until the claim is written
	// claim is what the claim read and wrote, for heldRecord; nil until
	// the claim is written.
	claim *heldClaim
	// recorded is the outcome a Complete wrote whose fsync failed, with
	// the lease still held; a retried Complete makes it durable.
	recorded *record
	// slots are the slots of a job of a limited queue or partition
	// (slots.go), held until the attempt's handler is done; nil for other
	// jobs.
	slots []heldSlot
}

// unlock lets go of the lease, for every descriptor that shares it, and
// closes h's.
func (h *leaseHold) unlock() {
	if h.ranged {
		unlockRangeLease(h.f, h.off)
		return
	}
	unlockFile(h.f)
}

// tryLease takes job id's lease without blocking. It returns false, nil if
// any process, this one included, holds it, or holds a duplicate of the
// descriptor that locked it (see LeaseFile). Where the store has range
// locks (Linux, format 8) the lease is the job's byte of
// locks/leases.lock (tryRangeLease) and no file is made; elsewhere it is
// the flock of the job's lease file, made if missing.
//
// The lock is taken without the table's mutex, which every claim and
// completion of the process takes: the lock alone lets one open file hold
// it, so of two callers one gets it, and an entry of the table always
// names the descriptor that holds the lock (releaseLease removes the
// entry before it unlocks).
func tryLease(s *Store, id string) (*leaseHold, bool, error) {
	key := s.leasePath(id)
	leases.Lock()
	_, held := leases.m[key]
	leases.Unlock()
	if held {
		return nil, false, nil
	}
	h := &leaseHold{key: key, owner: s}
	if s.ranges != nil {
		path := s.locksPath(leasesName)
		f, ok, err := tryRangeLease(&s.spares, path, rangeOffset(id), s.filePerm)
		if err != nil {
			return nil, false, fmt.Errorf("lease of job %s: %w", id, err)
		}
		if !ok {
			return nil, false, nil
		}
		h.f, h.ranged, h.off = f, true, rangeOffset(id)
	} else {
		f, ok, err := tryLockFile(key, s.filePerm)
		if err != nil {
			return nil, false, fmt.Errorf("lock %s: %w", key, err)
		}
		if !ok {
			return nil, false, nil
		}
		if same, err := sameInode(f, key, s.filePerm); err != nil || !same {
			// The file was pruned under us: the job is gone, nothing to lease.
			unlockFile(f)
			return nil, false, nil
		}
		h.f = f
	}
	leases.Lock()
	if _, held := leases.m[key]; held {
		// Not possible while the entry's descriptor holds the lock;
		// kept as a guard, so that the table never loses a holder.
		leases.Unlock()
		h.unlock()
		return nil, false, nil
	}
	leases.m[key] = h
	leases.Unlock()
	return h, true, nil
}

// releaseLease lets go of the lease h if it is still held: it removes h
// from the table, then unlocks, without the table's mutex.
func releaseLease(h *leaseHold) {
	leases.Lock()
	mine := leases.m[h.key] == h
	var slots []heldSlot
	if mine {
		delete(leases.m, h.key)
		slots, h.slots = h.slots, nil
	}
	leases.Unlock()
	freeSlots(slots)
	if mine {
		h.unlock()
	}
}

// dupLease returns a new descriptor of the open file through which s
// holds the lease of lease's job, if s holds it for lease.
func dupLease(s *Store, lease jobstore.Lease) (*os.File, bool, error) {
	leases.Lock()
	defer leases.Unlock()
	h, ok := leases.m[s.leasePath(lease.ID)]
	if !ok || h.owner != s || h.lease != lease {
		return nil, false, nil
	}
	f, err := dupFile(h.f)
	return f, true, err
}

// heldLease returns this process's hold of job id's lease.
func heldLease(s *Store, id string) (*leaseHold, bool) {
	key := s.leasePath(id)
	leases.Lock()
	defer leases.Unlock()
	h, ok := leases.m[key]
	return h, ok
}

// setRecorded remembers the outcome rec that a Complete of h's attempt
// wrote but could not make durable.
func setRecorded(h *leaseHold, rec record) {
	leases.Lock()
	h.recorded = &rec
	leases.Unlock()
}

// recordedOf returns the outcome setRecorded remembered for h, if any.
func recordedOf(h *leaseHold) (record, bool) {
	leases.Lock()
	defer leases.Unlock()
	if h.recorded == nil {
		return record{}, false
	}
	return *h.recorded, true
}

// setLease records which attempt h holds, and what its claim read and
// wrote (c).
func setLease(h *leaseHold, l jobstore.Lease, c *heldClaim) {
	leases.Lock()
	h.lease, h.claim = l, c
	leases.Unlock()
}

// claimOf returns what h's claim read and wrote, if setLease recorded it.
func claimOf(h *leaseHold) (heldClaim, bool) {
	leases.Lock()
	defer leases.Unlock()
	if h.claim == nil {
		return heldClaim{}, false
	}
	return *h.claim, true
}

// releaseOwned releases every lease lock that s holds; Close calls it.
func releaseOwned(s *Store) {
	leases.Lock()
	defer leases.Unlock()
	for p, h := range leases.m {
		if h.owner == s {
			delete(leases.m, p)
			freeSlots(h.slots)
			h.slots = nil
			h.unlock()
		}
	}
}
