package filestore

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// useLockFiles makes the Stores of dir, opened from now until the test
// ends, keep a lock file per job, as they do outside Linux (lockFilesIn).
func useLockFiles(t *testing.T, dir string) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)
	lockFilesIn.Store(abs, true)
	t.Cleanup(func() { lockFilesIn.Delete(abs) })
}

// forEachLockProtocol runs test in a new store directory with each way of
// taking record locks this system has: bytes of locks/records.lock
// (Linux), and a lock file per job (every system).
func forEachLockProtocol(t *testing.T, test func(t *testing.T, dir string)) {
	if runtime.GOOS == "linux" {
		t.Run("RangeLocks", func(t *testing.T) { test(t, t.TempDir()) })
	}
	t.Run("LockFiles", func(t *testing.T) {
		dir := t.TempDir()
		useLockFiles(t, dir)
		test(t, dir)
	})
}

// jobLockFiles returns the names in dir's locks/ other than the store's
// own lock files (records.lock, leases.lock, migrate.lock): the lock files
// of jobs.
func jobLockFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, dirLocks))
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		if n := e.Name(); n != recordLocksName && n != leasesName && n != migrateLockName {
			names = append(names, n)
		}
	}
	return names
}

// requireRangeLocks skips a test of range locks where there are none.
func requireRangeLocks(t *testing.T, s *Store) {
	t.Helper()
	if s.ranges == nil {
		t.Skip("record locks are lock files on this system")
	}
}

// TestRangeOffsetIsStable pins rangeOffset to FNV-1a-64 of the ID, shifted
// right by 2, as docs/format.md states: every process, of every build,
// must find a job's lock at the same byte.
func TestRangeOffsetIsStable(t *testing.T) {
	h := fnv.New64a()
	_, _ = h.Write([]byte("01M8MF4X6JB95R7N94JRT3F3R4"))
	require.Equal(t, int64(h.Sum64()>>2), rangeOffset("01M8MF4X6JB95R7N94JRT3F3R4"))
	require.Equal(t, int64(0x77fb4781a7497cc), rangeOffset("01M8MF4X6JB95R7N94JRT3F3R4"))
}
