//go:build unix && !linux

// Platform code for Unix systems other than Linux (macOS), where the
// package compiles but no test runs: no filesystem check and no syncfs(2).

package filestore

import (
	"context"
	"errors"

	"golang.org/x/sys/unix"
)

// checkFilesystem cannot tell the filesystem type outside Linux and allows
// it.
func (s *Store) checkFilesystem(context.Context) error { return nil }

// fsInfoOf reports that the file system cannot be told: no syncfs(2) is
// relied on.
func fsInfoOf(string) (fsInfo, error) { return fsInfo{}, errors.ErrUnsupported }

// syncFSReaches is never asked outside Linux (fsInfoOf fails).
func syncFSReaches(fsInfo) (bool, string) { return false, "" }

// openSyncFS reports that there is no syncfs(2): SubmitBatch then fsyncs
// each record.
func openSyncFS(string) (syncer, error) { return nil, errors.ErrUnsupported }

// fsyncFD flushes the file fd to the disk, as (*os.File).Sync does: on
// macOS an fsync(2) leaves the data in the drive's cache, F_FULLFSYNC
// does not.
func fsyncFD(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}

// fsetxattr: no extended attributes outside Linux (claim notes go to the
// lease file there).
func fsetxattr(int, string, []byte) error { return errors.ErrUnsupported }

// fdatasync: an fsync where there is no fdatasync(2).
func fdatasync(fd int) error { return fsyncFD(fd) }

func fremovexattr(int, string) error { return errors.ErrUnsupported }

func lgetxattr(string, string, []byte) (int, error) { return 0, errors.ErrUnsupported }

// openUnnamed: no unnamed files (O_TMPFILE) outside Linux.
func openUnnamed(int, uint32) (int, bool, error) { return -1, false, errors.ErrUnsupported }

func linkUnnamed(int, int, string) (bool, error) { return false, errors.ErrUnsupported }
