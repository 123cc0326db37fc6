package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/gofrs/flock"
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
// returned function releases the lock. A goroutine must not hold two record
// locks at once: two jobs may share a lock file (see lockStripes), and the
// second wait would never end.
func lockRecord(ctx context.Context, path string, exclusive, create bool, perm os.FileMode) (func(), error) {
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
	if err := e.turn.lock(ctx, exclusive); err != nil {
		drop()
		return nil, err
	}
	fl, err := flockPath(path, exclusive, create, perm)
	if err != nil {
		e.turn.unlock(exclusive)
		drop()
		return nil, err
	}
	return func() {
		_ = fl.Unlock()
		e.turn.unlock(exclusive)
		drop()
	}, nil
}

// flockPath opens and locks path (blocking), and makes sure the lock is on
// the inode the path names now: Prune deletes lease lock files, and a lock
// file removed by hand or by a tool would leave a process that opened it
// just before holding a lock on an orphan inode (gofrs/flock #8, #41).
func flockPath(path string, exclusive, create bool, perm os.FileMode) (*flock.Flock, error) {
	flag := os.O_RDONLY
	if create {
		flag |= os.O_CREATE
	}
	for {
		fl := flock.New(path, flock.SetFlag(flag|noFollow), flock.SetPermissions(perm))
		var err error
		if exclusive {
			err = fl.Lock()
		} else {
			err = fl.RLock()
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ok, err := sameInode(fl, path, perm); err != nil || !ok {
			_ = fl.Unlock()
			if err != nil && !(create && errors.Is(err, fs.ErrNotExist)) {
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			continue
		}
		return fl, nil
	}
}

// statter is an open lock file: a *flock.Flock or an *os.File.
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

// leases is the process-wide table of held lease locks, by lock file path.
// A claimant holds its job's lease lock for the whole attempt; the kernel
// drops it when the process dies, which is how other processes tell a dead
// worker from a live one.
var leases = struct {
	sync.Mutex
	m map[string]*leaseHold
}{m: make(map[string]*leaseHold)}

type leaseHold struct {
	// f is the lease lock file, locked. Not a flock.Flock: LeaseFile hands
	// out duplicates of its descriptor, which share the lock.
	f     *os.File
	owner *Store
	lease jobstore.Lease // zero until the claim is written
}

// tryLease takes the lease lock at path without blocking. It returns
// false, nil if any process, this one included, holds it, or holds a
// duplicate of the descriptor that locked it (see LeaseFile).
func tryLease(s *Store, path string) (*leaseHold, bool, error) {
	leases.Lock()
	defer leases.Unlock()
	if _, held := leases.m[path]; held {
		return nil, false, nil
	}
	f, ok, err := tryLockFile(path, s.filePerm)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		return nil, false, nil
	}
	if same, err := sameInode(f, path, s.filePerm); err != nil || !same {
		// The file was pruned under us: the job is gone, nothing to lease.
		unlockFile(f)
		return nil, false, nil
	}
	h := &leaseHold{f: f, owner: s}
	leases.m[path] = h
	return h, true, nil
}

// releaseLease unlocks the lease lock at path if h still holds it.
func releaseLease(path string, h *leaseHold) {
	leases.Lock()
	defer leases.Unlock()
	if leases.m[path] == h {
		delete(leases.m, path)
		unlockFile(h.f)
	}
}

// dupLease returns a new descriptor of the lease lock at path, if s holds
// it for lease.
func dupLease(s *Store, path string, lease jobstore.Lease) (*os.File, bool, error) {
	leases.Lock()
	defer leases.Unlock()
	h, ok := leases.m[path]
	if !ok || h.owner != s || h.lease != lease {
		return nil, false, nil
	}
	f, err := dupFile(h.f)
	return f, true, err
}

// heldLease returns this process's hold of the lease lock at path.
func heldLease(path string) (*leaseHold, bool) {
	leases.Lock()
	defer leases.Unlock()
	h, ok := leases.m[path]
	return h, ok
}

// setLease records which attempt h holds.
func setLease(h *leaseHold, l jobstore.Lease) {
	leases.Lock()
	h.lease = l
	leases.Unlock()
}

// releaseOwned releases every lease lock that s holds; Close calls it.
func releaseOwned(s *Store) {
	leases.Lock()
	defer leases.Unlock()
	for p, h := range leases.m {
		if h.owner == s {
			delete(leases.m, p)
			unlockFile(h.f)
		}
	}
}
