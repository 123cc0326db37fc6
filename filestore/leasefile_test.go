package filestore

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

var _ runner.LeaseFiler = (*Store)(nil)

// TestLeaseFileOutlivesWorker: a worker process hands a copy of its lease
// to a process of its own and is SIGKILLed. The job is not recovered while
// that process holds the copy, however long, and is recovered at once when
// it exits.
func TestLeaseFileOutlivesWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 20 * time.Millisecond})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c := startChild(t, dir, "hold-lease-file")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
	holder := holderPid(t, c.Next(t))
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL) })

	require.NoError(t, c.Signal(syscall.SIGKILL))
	_ = c.Wait(t.Context())
	// Many recovery passes: the lease must hold as long as the holder runs.
	time.Sleep(50 * 20 * time.Millisecond)
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State, "recovered while a process still held the lease")

	require.NoError(t, syscall.Kill(holder, syscall.SIGKILL))
	exited := time.Now()
	require.Eventually(t, func() bool {
		got, err = s.Get(t.Context(), j.ID)
		require.NoError(t, err)
		return got.State == jobstore.StateQueued
	}, 10*time.Second, 5*time.Millisecond)
	t.Logf("recovered %v after the last holder exited", time.Since(exited))
	require.Contains(t, got.LastError, "died during attempt 1")
}

// TestLeaseFileDoesNotOutliveComplete: a copy of the lease does not keep
// the job once its worker completes it; the job can run again.
func TestLeaseFileDoesNotOutliveComplete(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 20 * time.Millisecond})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work", MaxAttempts: 1})
	require.NoError(t, err)
	c := startChild(t, dir, "hold-lease-file", childKey+"=complete")
	require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
	holder := holderPid(t, c.Next(t))
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL) })
	require.Equal(t, "completed", c.Next(t))

	_, err = s.Retry(t.Context(), j.ID)
	require.NoError(t, err)
	again, err := claimOne(t.Context(), s, "next")
	require.NoError(t, err, "the lease is still locked by a copy after Complete")
	require.Equal(t, 2, again.Attempt)
}

// TestLeaseFileNotHeld: only the Store that holds a lease hands out
// copies of it, and only for that attempt.
func TestLeaseFileNotHeld(t *testing.T) {
	forEachLockProtocol(t, testLeaseFileNotHeld)
}

func testLeaseFileNotHeld(t *testing.T, dir string) {
	s := openAt(t, dir, &Options{NoSync: true})
	other := openAt(t, dir, &Options{NoSync: true})
	_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "work"})
	require.NoError(t, err)
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)

	f, err := s.LeaseFile(t.Context(), c.Lease())
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, err)
	lockFile := s.locksPath(leasesName) // the job's byte of it (format 8, Linux)
	if s.ranges == nil {
		lockFile = s.leasePath(c.ID) // the job's lease file
	}
	lfi, err := os.Stat(lockFile)
	require.NoError(t, err)
	require.True(t, os.SameFile(fi, lfi), "the copy is not of the file that holds the lease")
	require.NoError(t, f.Close())
	// Closing a copy does not release the lease.
	if s.ranges != nil {
		held, err := rangeLeaseHeld(lockFile, rangeOffset(c.ID))
		require.NoError(t, err)
		require.True(t, held, "closing a copy released the lease")
	} else {
		_, ok, err := tryLockFile(lockFile, 0o600)
		require.NoError(t, err)
		require.False(t, ok, "closing a copy released the lease")
	}

	stale := c.Lease()
	stale.Attempt = 2
	for name, try := range map[string]func() error{
		"other store":   func() error { _, err := other.LeaseFile(t.Context(), c.Lease()); return err },
		"other attempt": func() error { _, err := s.LeaseFile(t.Context(), stale); return err },
	} {
		require.ErrorIs(t, try(), jobstore.ErrNotHeld, name)
	}
	_, err = s.LeaseFile(t.Context(), jobstore.Lease{ID: "nope"})
	require.ErrorIs(t, err, jobstore.ErrInvalidID)
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	_, err = s.LeaseFile(t.Context(), c.Lease())
	require.ErrorIs(t, err, jobstore.ErrNotHeld, "after Complete")
	require.NoError(t, s.Close())
	_, err = s.LeaseFile(t.Context(), c.Lease())
	require.True(t, errors.Is(err, jobstore.ErrClosed), "%v", err)
}

func holderPid(t *testing.T, line string) int {
	t.Helper()
	pid, ok := strings.CutPrefix(line, "holder ")
	require.True(t, ok, "line %q", line)
	n, err := strconv.Atoi(pid)
	require.NoError(t, err)
	return n
}
