//go:build unix

// Platform code for every Unix system (Linux, macOS): open(2) flags and
// file facts the store relies on.

package filestore

import (
	"io/fs"
	"syscall"
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
