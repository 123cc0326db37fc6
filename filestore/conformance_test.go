package filestore

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
)

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child))
	}
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
	s, err := Open(t.Context(), dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		requireConsistent(t, dir)
	})
	return s
}

// requireConsistent reopens the store in dir (which repairs what a crash
// leaves) and requires Fsck to find nothing else wrong.
func requireConsistent(t *testing.T, dir string) {
	t.Helper()
	s, err := Open(context.Background(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Fsck(context.Background(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "fsck: %v", r.Problems)
}

// TestConformance runs the shared Store suite on durable stores (every
// fsync made, as in production). With JOBDIR_LONG=1 it also runs it in
// NoSync mode, side by side; the package's other tests use NoSync stores
// throughout, so that mode is exercised either way.
func TestConformance(t *testing.T) {
	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, nil)
		})
	})
	t.Run("NoSync", func(t *testing.T) {
		if os.Getenv("JOBDIR_LONG") == "" {
			t.Skip("set JOBDIR_LONG=1 to run the suite in NoSync mode too")
		}
		t.Parallel()
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, &Options{NoSync: true})
		})
	})
}
