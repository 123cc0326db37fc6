package filestore

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// unsyncedRemovesFS is the real file operations, keeping the contents of
// each record it removed until its directory is fsynced, so that a test
// can take back, as a power cut would, every removal not made durable.
// The first removal of a path ending in fail fails with EIO.
type unsyncedRemovesFS struct {
	osFS
	mu      sync.Mutex
	fail    string
	removed map[string][]byte
}

func (f *unsyncedRemovesFS) Remove(p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != "" && strings.HasSuffix(p, f.fail) {
		f.fail = ""
		return &os.PathError{Op: "remove", Path: p, Err: syscall.EIO}
	}
	data, _ := os.ReadFile(p)
	if err := f.osFS.Remove(p); err != nil {
		return err
	}
	if f.removed != nil && strings.HasSuffix(p, ".json") {
		f.removed[p] = data
	}
	return nil
}

func (f *unsyncedRemovesFS) SyncDir(d string) error {
	f.mu.Lock()
	for p := range f.removed {
		if filepath.Dir(p) == d {
			delete(f.removed, p)
		}
	}
	f.mu.Unlock()
	return f.osFS.SyncDir(d)
}

// TestPruneAfterLateRemoval: a completed job's older record in claimed/
// that its Complete could not remove (an I/O error, which Complete only
// logs) is removed as stale by the Prune that deletes the job, after the
// pass's fsync of claimed/. Prune makes that removal durable too before
// the record goes: after a power cut that takes back every removal not
// fsynced, the pruned job does not come back to run again.
func TestPruneAfterLateRemoval(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	fsys := &unsyncedRemovesFS{}
	opts := &Options{RecoverInterval: time.Hour}
	s, err := open(ctx, dir, opts, fsys)
	require.NoError(t, err)
	sub, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 3})
	require.NoError(t, err)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	fsys.fail = filepath.Join(dirClaimed, sub.ID+".json")
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.FileExists(t, s.recordPath(dirClaimed, sub.ID), "the older record stayed")
	fsys.mu.Lock()
	fsys.removed = map[string][]byte{}
	fsys.mu.Unlock()
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, s.Close())
	for p, data := range fsys.removed { // the power goes
		require.NoError(t, os.WriteFile(p, data, 0o600))
	}
	again := openAt(t, dir, opts)
	_, err = again.Get(ctx, sub.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound, "the pruned job came back after the power cut")
}
