package filestore

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/jobdir/jobdir/jobstore"
)

var _ jobstore.Pinger = (*Store)(nil)

// Ping returns nil if the store is open and its directory, its queued/
// directory and this Store's staging directory are there and writable by
// this process, without reading any job: a health check's cost does not
// grow with the store. It implements jobstore.Pinger. It returns an error
// wrapping jobstore.ErrClosed after Close, and otherwise the error of the
// first directory that fails (such as fs.ErrNotExist, fs.ErrPermission, or
// syscall.EROFS on a read-only file system).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.enter(ctx, "ping"); err != nil {
		return err
	}
	for _, d := range []string{s.dir, filepath.Join(s.dir, dirQueued), s.tmpDir} {
		if err := canWrite(d); err != nil {
			return fmt.Errorf("filestore: ping: %s: %w", d, err)
		}
	}
	return nil
}
