//go:build unix

package filestore

import "syscall"

// noFollow makes open(2) fail on a symbolic link instead of following it.
const noFollow = syscall.O_NOFOLLOW

// canWrite returns nil if this process may create files in directory p:
// access(2), which also says EROFS on a read-only file system.
func canWrite(p string) error {
	return syscall.Access(p, 2) // W_OK
}
