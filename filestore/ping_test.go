package filestore

import (
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestPing: Ping says whether the store can serve, without reading a job:
// it succeeds on an open store of any size, and fails when a directory it
// writes to is gone or the store is closed. (A read-only file system is
// in TestReadOnlyRemount.)
func TestPing(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, t.TempDir(), &Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Ping(ctx))
	for range 3 {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	// Unreadable records do not matter: Ping reads none.
	page, err := s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	for _, j := range page.Jobs {
		require.NoError(t, os.WriteFile(s.recordPath(dirQueued, j.ID), []byte("garbage"), 0o600))
	}
	require.NoError(t, s.Ping(ctx))

	require.NoError(t, os.RemoveAll(s.tmpDir))
	require.ErrorIs(t, s.Ping(ctx), fs.ErrNotExist)
	require.NoError(t, os.Mkdir(s.tmpDir, 0o700))
	require.NoError(t, s.Ping(ctx))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Ping(ctx), jobstore.ErrClosed)
}
