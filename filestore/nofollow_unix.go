//go:build unix

package filestore

import "syscall"

// noFollow makes open(2) fail on a symbolic link instead of following it.
const noFollow = syscall.O_NOFOLLOW
