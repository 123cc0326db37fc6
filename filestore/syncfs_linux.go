package filestore

import (
	"os"

	"golang.org/x/sys/unix"
)

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
