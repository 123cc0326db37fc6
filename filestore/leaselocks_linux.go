//go:build linux

package filestore

import (
	"errors"
	"fmt"
	"os"

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
// lease, or another of this process's.
func tryRangeLease(path string, off int64, perm os.FileMode) (f *os.File, ok bool, err error) {
	fd, err := openLeaseFile(path, perm)
	if err != nil {
		return nil, false, err
	}
	ok, err = setRange(fd, off, unix.F_WRLCK)
	if err != nil || !ok {
		_ = unix.Close(fd)
		if err != nil {
			err = &os.PathError{Op: "lock", Path: path, Err: err}
		}
		return nil, false, err
	}
	return os.NewFile(uintptr(fd), path), true, nil
}

// openLeaseFile opens locks/leases.lock at path for one lease, creating it
// with perm if it is missing. Not with O_NONBLOCK (as openSharedFile
// opens): os.NewFile would then try to register the regular file with the
// poller, two system calls per claim for nothing. A FIFO planted at path
// does not block an open for reading and writing, and is refused.
func openLeaseFile(path string, perm os.FileMode) (int, error) {
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
		return -1, err
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return regularOnly(fd, path)
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
