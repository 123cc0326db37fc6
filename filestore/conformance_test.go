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

// TestConformance runs the shared Store suite in NoSync mode (fast) and the
// submit/claim/complete groups again durably.
func TestConformance(t *testing.T) {
	t.Run("NoSync", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, &Options{NoSync: true})
		})
	})
	if testing.Short() {
		return
	}
	t.Run("Durable", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			return openTest(t, nil)
		})
	})
}
