package filestore

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
)

func TestMain(m *testing.M) {
	testproc.MainRoles(nil, runChild)
	goleak.VerifyTestMain(m)
}

// openTest opens a store in a fresh directory, checks it with Fsck when the
// test ends, and closes it.
func openTest(t *testing.T, opts *Options) *Store {
	t.Helper()
	return openAt(t, t.TempDir(), opts)
}

func openAt(t *testing.T, dir string, opts *Options) *Store {
	t.Helper()
	return openAtFS(t, dir, opts, osFS{})
}

// openAtFS is openAt with the file operations fsys.
func openAtFS(t *testing.T, dir string, opts *Options, fsys fileOps) *Store {
	t.Helper()
	s, err := open(t.Context(), dir, opts, fsys)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		requireConsistent(t, dir)
	})
	return s
}

// requireConsistent reopens the store in dir, makes the repairs of what a
// crash leaves (Repair) and requires Fsck to find nothing else wrong.
func requireConsistent(t *testing.T, dir string) {
	t.Helper()
	s, err := Open(context.Background(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Repair(context.Background())
	require.NoError(t, err)
	r, err := s.Fsck(context.Background(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "fsck: %v", r.Problems)
}

// TestConformance runs the shared Store suite. By default the stores
// alternate between durable (every fsync made, as in production) and
// NoSync, so that each mode meets about half of the rules and the run stays
// short; with JOBDIR_LONG=1 it runs the whole suite in each mode. The
// package's other tests exercise both modes throughout. On Linux a quarter
// of the stores (the whole suite once more with JOBDIR_LONG=1) keep a lock
// file per job, as stores do outside Linux (useLockFiles).
//
// Not parallel with the package's other tests: some of the suite's rules
// are timed (delays of a few hundred milliseconds), and durable submits on
// a disk shared with child processes can be slow.
func TestConformance(t *testing.T) {
	if os.Getenv("JOBDIR_LONG") == "" {
		n := 0
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			n++
			dir := t.TempDir()
			if n%4 == 3 {
				// The protocol outside Linux: a lock file per job.
				useLockFiles(t, dir)
			}
			return openAt(t, dir, &Options{NoSync: n%3 == 0, SyncFS: n%3 == 1})
		})
		return
	}
	t.Run("Durable", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, nil)
		})
	})
	t.Run("SyncFS", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, &Options{SyncFS: true})
		})
	})
	t.Run("NoSync", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, &Options{NoSync: true})
		})
	})
	t.Run("LockFiles", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			dir := t.TempDir()
			useLockFiles(t, dir)
			return openAt(t, dir, &Options{NoSync: true})
		})
	})
}
