//go:build unix

package filestore

import (
	"io/fs"
	"syscall"
)

// inode returns the inode number of fi, or 0 if unknown.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
