//go:build unix

// Platform code for every Unix system (Linux, macOS): open(2) flags and
// file facts the store relies on.

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// noFollow makes open(2) fail on a symbolic link instead of following it.
const noFollow = syscall.O_NOFOLLOW

// canWrite returns nil if this process may create files in directory p:
// access(2), which also says EROFS on a read-only file system.
func canWrite(p string) error {
	return syscall.Access(p, 2) // W_OK
}

// inode returns the inode number of fi, or 0 if unknown.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// links returns the number of names of fi's file, or 0 if unknown.
func links(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}

// openSharedFile opens path for reading and writing, never through a
// link, creating it with perm if it is missing: a file that every process
// of the store uses, such as locks/records.lock and locks/syncfs.
func openSharedFile(path string, perm os.FileMode) (int, error) {
	const flag = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	for {
		fd, err := unix.Open(path, flag, 0)
		if !errors.Is(err, unix.ENOENT) {
			if err != nil {
				return -1, &os.PathError{Op: "open", Path: path, Err: err}
			}
			return fd, nil
		}
		fd, err = unix.Open(path, flag|unix.O_CREAT|unix.O_EXCL, uint32(perm.Perm()))
		if errors.Is(err, unix.EEXIST) {
			continue // made by another process meanwhile
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		// Not subject to the umask: in a store shared by a group, every
		// member uses this one file.
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
			_ = unix.Close(fd)
			_ = unix.Unlink(path)
			return -1, &os.PathError{Op: "chmod", Path: path, Err: err}
		}
		return fd, nil
	}
}
