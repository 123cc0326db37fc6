package filestore

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/stretchr/testify/require"
)

// copyFixture copies a legacy fixture directory to a fresh temp dir.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	out, err := exec.Command("cp", "-a", filepath.Join(legacyFixtures, name), dir).CombinedOutput()
	require.NoError(t, err, string(out))
	return dir
}

func TestMigrateLegacy(t *testing.T) {
	ctx := t.Context()
	dir := copyFixture(t, "basic")
	s, err := Open(ctx, dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()

	// Every job keeps its ID; states are mapped.
	for id, want := range map[string]jobstore.State{
		"01JDQ8Z0A1B2C3D4E5F6G7H8J9": jobstore.StateQueued,
		"01JDQ8Z2W3X4Y5Z6A7B8C9D0E1": jobstore.StateSucceeded,
		"01JDQ8Z3F2G3H4J5K6M7N8P9Q0": jobstore.StateFailed,
		"01JDQ8Z4R2S3T4V5W6X7Y8Z9A0": jobstore.StateCanceled,
		"01JDQ8ZBD2E3F4G5H6J7K8M9N0": jobstore.StateSucceeded,
	} {
		j, err := s.Get(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, want, j.State, id)
	}

	// The job the old store left running is recovered like a dead worker's:
	// its attempt counts and it is queued again.
	j, err := s.Get(ctx, "01JDQ8Z1K2M3N4P5Q6R7S8T9V0")
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Contains(t, j.LastError, "died")

	// Keys are kept: submitting one returns the migrated job.
	got, created, err := s.Submit(ctx, jobstore.Spec{Kind: "email.send", Key: "invoice-1000"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "01JDQ8Z2W3X4Y5Z6A7B8C9D0E1", got.ID)
	// Of the two jobs the old store accepted for one key, the older keeps it.
	got, created, err = s.Submit(ctx, jobstore.Spec{Kind: "email.send", Key: "invoice-1001"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "01JDQ8Z0A1B2C3D4E5F6G7H8J9", got.ID)
	dup, err := s.Get(ctx, "01JDQ8ZBD2E3F4G5H6J7K8M9N0")
	require.NoError(t, err)
	require.Empty(t, dup.Key)

	// The old files are kept aside, not deleted, and the top level is clean.
	migrated, err := os.ReadDir(filepath.Join(dir, dirLegacyMigrated))
	require.NoError(t, err)
	require.Len(t, migrated, 6)
	quarantined, err := os.ReadDir(filepath.Join(dir, dirLegacyQuarantine))
	require.NoError(t, err)
	require.Len(t, quarantined, 1, "the old store's temp file")
	has, err := hasLegacyFiles(dir)
	require.NoError(t, err)
	require.False(t, has)

	report, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	require.True(t, report.OK(), "%v", report.Problems)

	// Reopening migrates nothing twice.
	require.NoError(t, s.Close())
	s2, err := Open(ctx, dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s2.Close()
	st, err := s2.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, st.Counts[jobstore.StateQueued]+st.Counts[jobstore.StateSucceeded]+st.Counts[jobstore.StateFailed]+st.Counts[jobstore.StateCanceled])
}

func TestMigrateLegacyDamaged(t *testing.T) {
	ctx := t.Context()
	dir := copyFixture(t, "damaged")
	s, err := Open(ctx, dir, &Options{NoSync: true})
	require.NoError(t, err, "damaged legacy files never stop the store from opening")
	defer s.Close()
	j, err := s.Get(ctx, "01JDQ8Z0A1B2C3D4E5F6G7H8J9")
	require.NoError(t, err)
	require.Equal(t, "invoice-1001", j.Key)
	quarantined, err := os.ReadDir(filepath.Join(dir, dirLegacyQuarantine))
	require.NoError(t, err)
	require.Len(t, quarantined, 5, "every damaged file is set aside, none is guessed at or lost")
	for _, id := range []string{"01JDQ8Z6M2N3P4Q5R6S7T8V9W0", "01JDQ8Z8G2H3J4K5M6N7P8Q9R0", "01JDQ8Z9S2T3V4W5X6Y7Z8A9B0"} {
		_, err := s.Get(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrNotFound, id)
	}
}

// TestMigrateLegacyInterrupted crashes the migration at every file
// operation in turn, then reopens: the result is the same as a migration
// that never stopped.
func TestMigrateLegacyInterrupted(t *testing.T) {
	ctx := t.Context()
	for step := 1; ; step++ {
		dir := copyFixture(t, "basic")
		fi := &faultFS{inner: osFS{}}
		fi.arm(step, true, syscall.EIO)
		s, err := open(ctx, dir, &Options{NoSync: true}, fi)
		if err == nil {
			require.NoError(t, s.Close())
			fi.mu.Lock()
			hit := fi.hit
			fi.mu.Unlock()
			if !hit {
				return // every step has been interrupted once
			}
		}
		s, err = Open(ctx, dir, &Options{NoSync: true})
		require.NoError(t, err, "step %d", step)
		for _, id := range []string{"01JDQ8Z0A1B2C3D4E5F6G7H8J9", "01JDQ8Z1K2M3N4P5Q6R7S8T9V0", "01JDQ8Z2W3X4Y5Z6A7B8C9D0E1"} {
			_, err := s.Get(ctx, id)
			require.NoError(t, err, "step %d: job %s lost", step, id)
		}
		got, created, err := s.Submit(ctx, jobstore.Spec{Kind: "email.send", Key: "invoice-1000"})
		require.NoError(t, err)
		require.False(t, created, "step %d: key lost", step)
		require.Equal(t, "01JDQ8Z2W3X4Y5Z6A7B8C9D0E1", got.ID)
		require.NoError(t, s.Close())
		if step > 500 {
			t.Fatal("migration never completed without a fault")
		}
	}
}
