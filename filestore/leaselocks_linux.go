//go:build linux

package filestore

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// tryRangeLease takes, without waiting, the lease that is the byte off of
// the file at path (locks/leases.lock, made with perm if it is missing,
// never through a link): an open file description lock (fcntl(2)
// F_OFD_SETLK) on a descriptor opened for this lease alone. The lock
// belongs to that open file, so it is held as long as any descriptor of
// it is open, in any process (LeaseFile hands out duplicates), and the
// kernel drops it when the last one closes, whatever ended the process. It
// returns ok=false if another open file holds the byte: another process's
// lease, or another of this process's. The descriptor of an attempt that
// failed never held a lock, so it is kept in spares for the next attempt.
func tryRangeLease(spares *leaseSpares, path string, off int64, perm os.FileMode) (f *os.File, ok bool, err error) {
	fd, id := spares.take(path)
	if fd < 0 {
		if fd, id, err = openLeaseFile(path, perm); err != nil {
			return nil, false, err
		}
	}
	ok, err = setRange(fd, off, unix.F_WRLCK)
	if err != nil {
		_ = unix.Close(fd)
		return nil, false, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	if !ok {
		spares.put(fd, id)
		return nil, false, nil
	}
	return os.NewFile(uintptr(fd), path), true, nil
}

// leaseFileID names a file: its device and inode.
type leaseFileID struct{ dev, ino uint64 }

func leaseFileIDOf(st *unix.Stat_t) leaseFileID { return leaseFileID{dev: st.Dev, ino: st.Ino} }

// leaseSpares keeps, for one Store, descriptors of locks/leases.lock that
// lease attempts opened and could not lock: the job's lease was someone
// else's, which happens about once per claim when two processes claim from
// one queue. Such a descriptor never held a lock, so no other holds one
// through it, and it can serve the next attempt: an lstat(2) of the path
// and the lock, instead of an open(2), an fstat(2), the lock and a
// close(2). The lstat keeps what opening by name gives: a leases.lock
// removed or replaced since is opened again by its name, and anything but
// a regular file there fails the lease, naming it. A descriptor that held
// a lease is never kept: LeaseFile may have handed out duplicates of it.
type leaseSpares struct {
	mu     sync.Mutex
	fds    []int
	id     leaseFileID // the file every descriptor in fds opened
	closed bool
}

// maxLeaseSpares bounds the descriptors a Store keeps: as many as its
// claimers try at once, and as many again for recovery and the rest.
const maxLeaseSpares = 2 * claimParallel

// take returns a kept descriptor of the file path names now, or -1 if
// there is none (every kept descriptor is closed when path names another
// file, or none).
func (sp *leaseSpares) take(path string) (int, leaseFileID) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.fds) == 0 {
		return -1, leaseFileID{}
	}
	var st unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Lstat(path, &st) })
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || leaseFileIDOf(&st) != sp.id {
		sp.drop()
		return -1, leaseFileID{} // opened again by name, which reports what is wrong
	}
	fd := sp.fds[len(sp.fds)-1]
	sp.fds = sp.fds[:len(sp.fds)-1]
	return fd, sp.id
}

// put keeps fd, a descriptor of the file id that holds no lock, or closes
// it.
func (sp *leaseSpares) put(fd int, id leaseFileID) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if id != sp.id {
		sp.drop()
		sp.id = id
	}
	if sp.closed || len(sp.fds) >= maxLeaseSpares {
		_ = unix.Close(fd)
		return
	}
	sp.fds = append(sp.fds, fd)
}

// drop closes every kept descriptor. The caller holds sp.mu.
func (sp *leaseSpares) drop() {
	for _, fd := range sp.fds {
		_ = unix.Close(fd)
	}
	sp.fds = sp.fds[:0]
}

// close closes the kept descriptors and keeps none after; for Store.Close.
func (sp *leaseSpares) close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.drop()
	sp.closed = true
}

// openLeaseFile opens locks/leases.lock at path for one lease, creating it
// with perm if it is missing, and returns its descriptor and the file it
// opened. Not with O_NONBLOCK (as openSharedFile opens): os.NewFile would
// then try to register the regular file with the poller, two system calls
// per claim for nothing. A FIFO planted at path does not block an open for
// reading and writing, and is refused.
func openLeaseFile(path string, perm os.FileMode) (int, leaseFileID, error) {
	const flag = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_CLOEXEC
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, flag, 0)
		return err
	})
	if errors.Is(err, unix.ENOENT) {
		// The first lease of the store: openSharedFile creates the file
		// with the store's permissions, whatever the umask, once.
		if fd, err = openSharedFile(path, perm); err == nil {
			_ = unix.Close(fd)
			return openLeaseFile(path, perm)
		}
		return -1, leaseFileID{}, err
	}
	if err != nil {
		return -1, leaseFileID{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	st, err := regularStat(fd, path)
	if err != nil {
		return -1, leaseFileID{}, err
	}
	return fd, leaseFileIDOf(&st), nil
}

// unlockRangeLease lets go of the lease tryRangeLease took as f: the
// explicit unlock releases it for every descriptor of the open file,
// LeaseFile's duplicates too, then f is closed.
func unlockRangeLease(f *os.File, off int64) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = setRange(int(fd), off, unix.F_UNLCK) })
	}
	_ = f.Close()
}

// rangeLeaseHeld reports whether an open file holds the lease that is byte
// off of the file at path; a missing file holds none. Anything but a
// regular file at path is an error (which callers count as held).
func rangeLeaseHeld(path string, off int64) (bool, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: off, Len: 1}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("%s: not a regular file", path)
	}
	if err := ignoringEINTR(func() error { return unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk) }); err != nil {
		return false, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	return lk.Type != unix.F_UNLCK, nil
}
