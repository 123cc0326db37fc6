package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// LeaseFile returns a new descriptor of the open file through which this
// Store holds the attempt of lease: on Linux locks/leases.lock, opened for
// this lease alone, whose byte of the job is locked; elsewhere the job's
// lease file, flocked. Both locks belong to the open file description,
// which a duplicated descriptor shares, even in another process that
// inherited it: so as long as any process holds the returned file open,
// the lease stays locked, and no process recovers the job as a dead
// worker's, even after this process has died. The caller closes it.
//
// It does not extend a live attempt: Complete (and Close) unlock the lease
// explicitly, which releases it for every holder of a copy. It implements
// runner.LeaseFiler; execjob passes the file to the supervisor of each
// program, which keeps it open until every process of the attempt is gone.
// Returns an error wrapping jobstore.ErrNotHeld if this Store does not hold
// lease.
func (s *Store) LeaseFile(ctx context.Context, lease jobstore.Lease) (*os.File, error) {
	if err := s.enter(ctx, "lease file"); err != nil {
		return nil, err
	}
	if err := lease.Validate(); err != nil {
		return nil, fmt.Errorf("filestore: lease file: %w", err)
	}
	f, held, err := dupLease(s, lease)
	if err != nil {
		return nil, fmt.Errorf("filestore: lease file %s: %w", lease.ID, err)
	}
	if !held {
		return nil, s.notHeld(ctx, "lease file", lease)
	}
	return f, nil
}

// tryLockFile opens (creating it with perm if needed) and locks the lock
// file at path exclusively without blocking. It returns false, nil if the
// lock is held elsewhere. The file is opened and tried on a bare
// descriptor, which becomes an *os.File only once locked: a claim that
// meets another's lease, and a recovery pass over the running jobs of
// other processes, try many that they do not get, and an *os.File costs a
// poller registration (which a regular file refuses) and two fcntl(2) on
// top of the open.
func tryLockFile(path string, perm os.FileMode) (*os.File, bool, error) {
	fd, ok, err := tryFlock(path, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW, unix.LOCK_EX, perm)
	if err != nil || !ok {
		return nil, ok, err
	}
	return os.NewFile(uintptr(fd), path), true, nil
}

// unlockFile unlocks and closes a file tryLockFile locked. The explicit
// unlock releases the lock for every descriptor that shares it.
func unlockFile(f *os.File) {
	_ = flockFile(f, unix.LOCK_UN)
	_ = f.Close()
}

func flockFile(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if !errors.Is(ferr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if ferr != nil {
		return os.NewSyscallError("flock", ferr)
	}
	return nil
}

// dupFile returns a new descriptor, close-on-exec, of f's open file
// description.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
