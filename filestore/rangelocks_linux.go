//go:build linux

package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// rangeLocks holds the record locks of a store as byte-range locks of one
// file, locks/records.lock: open file description locks (fcntl(2)
// F_OFD_SETLK), which belong to the open file, not to the process, and go
// when the kernel closes it, whatever ended the process. A job's lock is
// one byte (rangeOffset), so a process stopped while it holds one delays
// only that job, as with a lock file per job (format 3 to 6), but no lock
// file is created at a submit nor removed with the job, and a lock is two
// fcntl(2) calls and one lstat(2) of the file, where a lock file cost an
// open, a flock, a stat of the file and of the path, an unlock, a close
// and a look for the job's record.
//
// Every Store of a process on one file shares one descriptor of it
// (rangeFiles): locks of two descriptors conflict even in one process, and
// a goroutine waiting on one for a byte another holds through the other
// would wait on itself. In front of each byte is an in-process turn, as
// for lock files (locks.go): readers share it, and hold the byte's shared
// lock together; a change waits for the reads under way.
//
// The file is made by the first lock any Store takes, and never removed. If it is removed or replaced by hand, each lock looks at the
// path first (one lstat) and moves to the file the path names, as a lock
// file per job did (flockPath); a lock taken on the old file before is
// not excluded by one on the new, so do not remove it while processes use
// the store.
type rangeLocks struct {
	path string
	perm os.FileMode

	mu     sync.Mutex
	cur    *rangeFile // the file this Store locks in, from its first lock; one reference is this Store's
	closed bool
}

// devIno names a file.
type devIno struct{ dev, ino uint64 }

// rangeFiles is the process-wide table of open records.lock files.
var rangeFiles = struct {
	sync.Mutex
	m map[devIno]*rangeFile
}{m: make(map[devIno]*rangeFile)}

// rangeFile is one open records.lock, shared by the Stores of a process.
type rangeFile struct {
	id   devIno
	fd   int
	refs int // guarded by rangeFiles: Stores, and locks held

	mu sync.Mutex
	m  map[int64]*rangeEntry
}

// rangeEntry is the in-process state of one locked byte.
type rangeEntry struct {
	turn turn
	refs int // guarded by rangeFile.mu

	mu      sync.Mutex
	readers int // holders of the shared lock, which the first takes
}

// openRangeLocks returns the record locks of the store whose records.lock
// is at path, made with perm if it is missing. The file is opened at the
// first lock, so that a Store that only reads (or one that its trust
// check refuses) needs no access to it. It returns nil where the kernel
// has no open file description locks (before Linux 3.15): the store then
// keeps a lock file per job, as every process on this kernel does.
func openRangeLocks(path string, perm os.FileMode) *rangeLocks {
	if !ofdLocks() {
		return nil
	}
	return &rangeLocks{path: path, perm: perm}
}

// ofdLocks reports whether the kernel has open file description locks,
// asked once per process of a memfd (Linux 3.17): where that cannot be
// made either, the answer is no.
var ofdLocks = sync.OnceValue(func() bool {
	fd, err := unix.MemfdCreate("jobdir-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	probe := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 1}
	return unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &probe) == nil
})

// acquireRangeFile opens records.lock at path (creating it with perm if it
// is missing, never through a link) and returns the process's rangeFile of
// it, with one more reference.
func acquireRangeFile(path string, perm os.FileMode) (*rangeFile, error) {
	fd, err := openSharedFile(path, perm)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	id := devIno{uint64(st.Dev), uint64(st.Ino)}
	rangeFiles.Lock()
	defer rangeFiles.Unlock()
	if f := rangeFiles.m[id]; f != nil {
		_ = unix.Close(fd)
		f.refs++
		return f, nil
	}
	f := &rangeFile{id: id, fd: fd, refs: 1, m: make(map[int64]*rangeEntry)}
	rangeFiles.m[id] = f
	return f, nil
}

// release drops one reference of f, closing its descriptor with the last.
func (f *rangeFile) release() {
	rangeFiles.Lock()
	defer rangeFiles.Unlock()
	if f.refs--; f.refs > 0 {
		return
	}
	if rangeFiles.m[f.id] == f {
		delete(rangeFiles.m, f.id)
	}
	_ = unix.Close(f.fd)
}

// file returns the rangeFile the path names now, with one more reference
// for the caller: the one this Store holds, or, if the file was removed or
// replaced since, the new one, which the Store holds from then on.
func (r *rangeLocks) file() (*rangeFile, error) {
	var st unix.Stat_t
	err := unix.Lstat(r.path, &st)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, &os.PathError{Op: "lstat", Path: r.path, Err: err}
	}
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file", r.path)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, os.ErrClosed
	}
	if r.cur == nil || err != nil || (devIno{uint64(st.Dev), uint64(st.Ino)}) != r.cur.id {
		f, err := acquireRangeFile(r.path, r.perm)
		if err != nil {
			return nil, err
		}
		if r.cur != nil {
			r.cur.release()
		}
		r.cur = f
	}
	rangeFiles.Lock()
	r.cur.refs++
	rangeFiles.Unlock()
	return r.cur, nil
}

// close drops this Store's reference of its file. Locks still held keep
// it open until they are released.
func (r *rangeLocks) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.cur != nil {
		r.cur.release()
		r.cur = nil
	}
}

// lock takes the lock of byte off, exclusive or shared. With wait it
// waits, for the turn in this process and then polling for other
// processes' locks, until ctx ends (the error is then ctx.Err()); without
// it returns ok=false at once if another holder has it.
func (r *rangeLocks) lock(ctx context.Context, off int64, exclusive, wait bool) (func(), bool, error) {
	f, err := r.file()
	if err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	e := f.m[off]
	if e == nil {
		e = &rangeEntry{}
		f.m[off] = e
	}
	e.refs++
	f.mu.Unlock()
	drop := func() {
		f.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(f.m, off)
		}
		f.mu.Unlock()
		f.release()
	}
	if ok, err := e.turn.enter(ctx, exclusive, wait); err != nil || !ok {
		drop()
		return nil, false, err
	}
	typ := int16(unix.F_WRLCK)
	if !exclusive {
		typ = unix.F_RDLCK
	}
	set := func() (bool, error) {
		ok, err := setRange(f.fd, off, typ)
		if err != nil {
			err = &os.PathError{Op: "lock", Path: r.path, Err: err}
		}
		return ok, err
	}
	ok, err := pollLock(ctx, wait, func() (bool, error) {
		if exclusive {
			return set()
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.readers > 0 {
			e.readers++
			return true, nil
		}
		ok, err := set()
		if ok {
			e.readers = 1
		}
		return ok, err
	})
	if err != nil || !ok {
		e.turn.unlock(exclusive)
		drop()
		return nil, false, err
	}
	return func() {
		if exclusive {
			_, _ = setRange(f.fd, off, unix.F_UNLCK)
		} else {
			e.mu.Lock()
			if e.readers--; e.readers == 0 {
				_, _ = setRange(f.fd, off, unix.F_UNLCK)
			}
			e.mu.Unlock()
		}
		e.turn.unlock(exclusive)
		drop()
	}, true, nil
}

// setRange sets the lock of byte off of fd to typ (F_RDLCK, F_WRLCK or
// F_UNLCK) without waiting; ok=false says another open file holds a
// conflicting lock.
func setRange(fd int, off int64, typ int16) (ok bool, err error) {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	err = ignoringEINTR(func() error { return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk) })
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}
