package filestore

import (
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// TestOptionsFaults shows that Options.Faults sees the file operations of
// the store and that the error it injects reaches the caller, testable
// with errors.Is for both the errno and fsfault.ErrInjected.
func TestOptionsFaults(t *testing.T) {
	var mu sync.Mutex
	seen := map[fsfault.Op]int{}
	var failRename bool
	inj := &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[op]++
		if failRename && op == fsfault.Rename {
			return fsfault.Error(op, syscall.ENOSPC)
		}
		return nil
	}}
	s, err := Open(t.Context(), t.TempDir(), &Options{Faults: inj})
	require.NoError(t, err)
	defer s.Close()
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	mu.Lock()
	require.Positive(t, seen[fsfault.SyncDir]+seen[fsfault.Link]+seen[fsfault.Rename]+seen[fsfault.Write], "ops seen: %v", seen)
	failRename = true
	mu.Unlock()

	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, err, fsfault.ErrInjected)
}
