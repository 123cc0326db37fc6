package joblog_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/joblog/logstest"
	"github.com/jobdir/jobdir/jobstore"
)

func TestDirLogs(t *testing.T) {
	logstest.Run(t, joblog.Dir{Path: t.TempDir()}, func(*testing.T) string { return jobstore.NewID(time.Now()) })
}

// TestDirGroupAccessKeepsSetgid: in a store whose directory is setgid to
// its group, the log directory keeps the setgid bit it inherits, so every
// log is in the store's group, not in the primary group of the process
// that wrote it, which the store's other members may not be in.
func TestDirGroupAccessKeepsSetgid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory a group of which this process is not a member")
	}
	const group = 47120
	store := t.TempDir()
	require.NoError(t, os.Chown(store, 0, group))
	require.NoError(t, os.Chmod(store, os.ModeSetgid|0o770))
	d := joblog.Dir{Path: filepath.Join(store, "logs"), GroupAccess: true}
	for range 2 {
		a, err := d.Append(t.Context(), jobstore.NewID(time.Now()))
		require.NoError(t, err)
		require.NoError(t, a.Close())
	}
	fi, err := os.Stat(d.Path)
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSetgid|0o770, fi.Mode())
	ents, err := os.ReadDir(d.Path)
	require.NoError(t, err)
	require.Len(t, ents, 2)
	for _, e := range ents {
		fi, err := e.Info()
		require.NoError(t, err)
		require.Equal(t, uint32(group), fi.Sys().(*syscall.Stat_t).Gid, "%s is in the store's group", e.Name())
		require.Equal(t, os.FileMode(0o660), fi.Mode())
	}
}
