//go:build linux

// Platform code for Linux, where the store is supported and tested: the
// statfs(2) check that refuses network and userspace filesystems, and
// syncfs(2) for Options.SyncFS.

package filestore

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Filesystem magic numbers from statfs(2).
const (
	magicNFS     = 0x6969
	magicSMB2    = 0xfe534d42
	magicCIFS    = 0xff534d42
	magicFUSE    = 0x65735546
	magicCeph    = 0x00c36400
	magicOverlay = 0x794c7630
)

// fsKind names the filesystem of a statfs f_type and says whether the
// store refuses it by default.
func fsKind(fsType int64) (name string, unsafe bool) {
	switch uint32(fsType) {
	case magicNFS:
		return "NFS", true
	case magicSMB2:
		return "SMB2", true
	case magicCIFS:
		return "CIFS", true
	case magicFUSE:
		return "FUSE", true
	case magicCeph:
		return "Ceph", true
	case magicOverlay:
		return "overlayfs", false
	}
	return "", false
}

// checkFilesystem refuses filesystems where flock, rename and inotify do
// not hold across clients, and warns on overlayfs.
func (s *Store) checkFilesystem(context.Context) error {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	name, unsafe := fsKind(int64(st.Type))
	if !unsafe {
		if name == "overlayfs" {
			s.log.Warn("filestore: the store is on overlayfs (a container's writable layer?): inotify events may be missed and data is lost with the container; mount a volume instead", "dir", s.dir)
		}
		return nil
	}
	if s.opts.AllowUnsafeFilesystem {
		s.log.Warn("filestore: opening on an unsafe filesystem as Options.AllowUnsafeFilesystem asks", "dir", s.dir, "fs", name)
		return nil
	}
	return fmt.Errorf("%w: %s is on %s, where file locks, atomic renames and change notifications do not hold across clients, so two processes could run one job; use a local filesystem, or set Options.AllowUnsafeFilesystem if only one process on one machine will ever use it",
		ErrUnsupportedFilesystem, s.dir, name)
}

// fsSync is one syncfs(2) of the file system that holds a directory.
type fsSync struct{ f *os.File }

// openSyncFS opens dir for a later syncfs(2). Open it before writing the
// files the sync must cover: syncfs reports the writeback errors of the
// file system that happen after the descriptor was opened (Linux 5.8 and
// later), so an error in writing them back is not missed.
func openSyncFS(dir string) (syncer, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return fsSync{f}, nil
}

// Sync writes back every dirty file of the file system and waits for it,
// then flushes the disk's cache.
func (s fsSync) Sync() error { return unix.Syncfs(int(s.f.Fd())) }

func (s fsSync) Close() error { return s.f.Close() }
