package filestore

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// TestBatchTakeBackLeavesJobBeingClaimed: a batch's jobs without a key get
// no record lock file at submit, so a claim may take one between its
// rename into queued/ and queued/'s fsync. When that fsync fails, the
// batch takes back every job whose lock it gets, and leaves the one whose
// lock another holder has (a claim under way): no job is removed under a
// claimer, and no lock file is left of the jobs taken back.
func TestBatchTakeBackLeavesJobBeingClaimed(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var armed bool
	var other *Store
	var held string
	var unlockHeld func()
	inj := &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		if !armed || op != fsfault.SyncDir || filepath.Base(path) != dirQueued {
			return nil
		}
		armed = false
		ents, err := os.ReadDir(filepath.Join(dir, dirQueued))
		if err != nil || len(ents) == 0 {
			return nil // the test fails below: the batch's records were not in queued/
		}
		held = strings.TrimSuffix(ents[0].Name(), recordExt)
		unlock, ok, err := other.tryLockJob(held)
		if err != nil || !ok {
			return nil
		}
		unlockHeld = unlock
		return fsfault.Error(op, syscall.EIO)
	}}
	s, err := Open(t.Context(), dir, &Options{Faults: inj})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	other, err = Open(t.Context(), dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })

	specs := make([]jobstore.Spec, 40)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	_, err = s.SubmitBatch(t.Context(), specs)
	require.ErrorIs(t, err, syscall.EIO)
	require.NotNil(t, unlockHeld, "the fault never fired with the batch's records in queued/")
	unlockHeld()

	ents, err := os.ReadDir(filepath.Join(dir, dirQueued))
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{held + recordExt}, names, "only the job whose lock was held stays")
	j, err := s.Get(t.Context(), held)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)

	locks, err := os.ReadDir(filepath.Join(dir, dirLocks))
	require.NoError(t, err)
	for _, e := range locks {
		require.True(t, strings.HasPrefix(e.Name(), held), "a lock file of a job taken back is left: %s", e.Name())
	}
}
