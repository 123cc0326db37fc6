//go:build linux

package filestore

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// otherProcessLock opens dir's records.lock as another process would (a
// descriptor of its own, outside this process's table) and tries job id's
// lock on it, exclusive or shared. It returns the descriptor, to close,
// and whether the lock was taken.
func otherProcessLock(t *testing.T, dir, id string, typ int16) (int, bool) {
	t.Helper()
	fd, err := syscall.Open(filepath.Join(dir, dirLocks, recordLocksName), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	ok, err := setRange(fd, rangeOffset(id), typ)
	require.NoError(t, err)
	return fd, ok
}

// TestRangeLocksExcludeOtherProcesses: a job's record lock in
// locks/records.lock excludes another open file's lock of the same job
// (another process's) and no other job's: exclusive against exclusive and
// shared, shared beside shared. Without wait a busy lock answers at once;
// with wait it is taken once the other lets go, and a wait ends with its
// ctx. The lock goes when it is released, and with the descriptor.
func TestRangeLocksExcludeOtherProcesses(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	requireRangeLocks(t, s)
	ctx := t.Context()
	x, y := jobstore.NewID(time.Now()), jobstore.NewID(time.Now())

	unlock, ok, err := s.lockRange(ctx, x, true, false)
	require.NoError(t, err)
	require.True(t, ok)
	fd, got := otherProcessLock(t, dir, x, syscall.F_WRLCK)
	require.False(t, got, "another process took a held job's lock")
	_, got = otherProcessLock(t, dir, x, syscall.F_RDLCK)
	require.False(t, got, "another process read-locked a job under change")
	fdy, got := otherProcessLock(t, dir, y, syscall.F_WRLCK)
	require.True(t, got, "the lock of one job held another's")
	_, err = setRange(fdy, rangeOffset(y), syscall.F_UNLCK)
	require.NoError(t, err)
	unlock()
	ok, err = setRange(fd, rangeOffset(x), syscall.F_WRLCK)
	require.NoError(t, err)
	require.True(t, ok, "a released lock is still held")

	// Held by the other process now: no wait, a wait until ctx ends, and
	// a wait until it lets go.
	_, ok, err = s.lockRange(ctx, x, true, false)
	require.NoError(t, err)
	require.False(t, ok)
	c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, _, err = s.lockRange(c, x, false, true)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = setRange(fd, rangeOffset(x), syscall.F_UNLCK)
	}()
	unlock, ok, err = s.lockRange(ctx, x, true, true)
	require.NoError(t, err)
	require.True(t, ok)
	unlock()

	// Shared beside shared, in this process and another.
	r1, ok, err := s.lockRange(ctx, x, false, false)
	require.NoError(t, err)
	require.True(t, ok)
	r2, ok, err := s.lockRange(ctx, x, false, false)
	require.NoError(t, err)
	require.True(t, ok, "two readers of one process exclude each other")
	fdr, got := otherProcessLock(t, dir, x, syscall.F_RDLCK)
	require.True(t, got, "readers of two processes exclude each other")
	_, err = setRange(fdr, rangeOffset(x), syscall.F_UNLCK)
	require.NoError(t, err)
	_, got = otherProcessLock(t, dir, x, syscall.F_WRLCK)
	require.False(t, got)
	r1()
	_, got = otherProcessLock(t, dir, x, syscall.F_WRLCK)
	require.False(t, got, "the first reader's release let go of the second's lock")
	r2()

	// Close lets go of the file once no lock is held.
	held, ok, err := s.lockRange(ctx, y, true, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.Close())
	_, got = otherProcessLock(t, dir, y, syscall.F_WRLCK)
	require.False(t, got, "Close let go of a lock still held")
	held()
	_, got = otherProcessLock(t, dir, y, syscall.F_WRLCK)
	require.True(t, got)
}

// TestRangeLocksOneDescriptorPerProcess: two Stores of one process on one
// directory lock through one descriptor of records.lock, behind one
// in-process turn per job: a change of a job in one waits for a change
// of it in the other, instead of each taking a lock of its own descriptor
// (which would conflict with itself and wait forever) or neither
// excluding the other.
func TestRangeLocksOneDescriptorPerProcess(t *testing.T) {
	dir := t.TempDir()
	a := openAt(t, dir, &Options{NoSync: true})
	requireRangeLocks(t, a)
	b := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	id := jobstore.NewID(time.Now())
	unlock, ok, err := a.lockRange(ctx, id, true, false)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = b.lockRange(ctx, id, true, false)
	require.NoError(t, err)
	require.False(t, ok, "two Stores of one process held one job's lock at once")
	require.Same(t, a.ranges.cur, b.ranges.cur, "two Stores of one process lock through two descriptors")
	done := make(chan error, 1)
	go func() {
		u, _, err := b.lockRange(ctx, id, true, true)
		if err == nil {
			u()
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	unlock()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a Store waiting for a job's lock that another Store of its process released still waits")
	}
}

// TestRangeLocksFollowReplacedFile: records.lock removed by hand, or
// replaced, while a Store is open: the next lock takes the file the path
// names now, as a new process would, so the two lock in one file again. A
// link, a FIFO or a directory planted in its place makes changes fail at
// once with an error that names it (reads take no lock and go on);
// nothing is written through the link; Fsck reports it.
func TestRangeLocksFollowReplacedFile(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	requireRangeLocks(t, s)
	ctx := t.Context()
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	path := filepath.Join(dir, dirLocks, recordLocksName)
	require.NoError(t, os.Remove(path))
	_, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	require.FileExists(t, path)
	_, ok := otherProcessLock(t, dir, j.ID, syscall.F_WRLCK)
	require.True(t, ok)
	_, ok, err = s.lockRange(ctx, j.ID, true, false)
	require.NoError(t, err)
	require.False(t, ok, "the Store still locks in the removed file")

	j, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	outside := filepath.Join(t.TempDir(), "outside")
	require.NoError(t, os.WriteFile(outside, []byte("keep\n"), 0o600))
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(outside, path))
	_, err = s.Cancel(ctx, j.ID)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "not a regular file")
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	data, err := os.ReadFile(outside)
	require.NoError(t, err)
	require.Equal(t, "keep\n", string(data))

	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err = s.Cancel(ctx, j.ID) // not blocked opening the FIFO
	require.ErrorContains(t, err, "not a regular file")
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Mkdir(path, 0o700))
	_, err = s.Cancel(ctx, j.ID)
	require.ErrorContains(t, err, "not a regular file")
	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	require.False(t, r.OK())
	require.NoError(t, os.Remove(path))
	_, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
}

// otherProcessLease takes job id's lease in dir's leases.lock as another
// process would, on a descriptor of its own; it returns whether it took it
// and a func that lets it go.
func otherProcessLease(t *testing.T, dir, id string) (bool, func()) {
	t.Helper()
	fd, err := syscall.Open(filepath.Join(dir, dirLocks, leasesName), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	ok, err := setRange(fd, rangeOffset(id), syscall.F_WRLCK)
	require.NoError(t, err)
	return ok, func() { _ = syscall.Close(fd) }
}

// spareCount returns how many lease descriptors s keeps.
func spareCount(s *Store) int {
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	return len(s.spares.fds)
}

// TestLeaseSparesFollowTheFile: a lease attempt that finds the job's lease
// held elsewhere keeps its descriptor for the next attempt, which takes a
// lease with it; a kept descriptor of a leases.lock removed or replaced
// since is never used (the lease is taken in the file the name names
// now, so another process's lease there still excludes it), anything but a
// regular file there fails the claim, naming it, and Close closes what is
// kept.
func TestLeaseSparesFollowTheFile(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	requireRangeLocks(t, s)
	ctx := t.Context()
	req := jobstore.ClaimRequest{Worker: "w"}
	path := filepath.Join(dir, dirLocks, leasesName)
	submit := func() jobstore.Job {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		return j
	}
	claimBusy := func(id string) {
		t.Helper()
		_, err := s.Claim(ctx, req)
		require.ErrorIs(t, err, jobstore.ErrNoJob, "job %s was claimed though another process holds its lease", id)
	}
	// spareFor submits a job whose lease another process holds while a
	// claim tries it, so that the claim keeps its descriptor, and returns
	// the job, its lease let go.
	spareFor := func(msg string) jobstore.Job {
		t.Helper()
		j := submit()
		ok, letGo := otherProcessLease(t, dir, j.ID)
		require.True(t, ok)
		claimBusy(j.ID)
		letGo()
		require.Equal(t, 1, spareCount(s), msg)
		return j
	}
	// claimExcludes claims j, which must be the job claimed, with no
	// descriptor left kept, and checks that its lease excludes another
	// process.
	claimExcludes := func(j jobstore.Job, msg string) {
		t.Helper()
		got, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, j.ID, got.ID)
		require.Zero(t, spareCount(s), msg)
		ok, letGo := otherProcessLease(t, dir, j.ID)
		require.False(t, ok, "the lease taken does not exclude other processes")
		letGo()
	}

	_ = submit()
	_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "first"}) // makes leases.lock
	require.NoError(t, err)
	j := spareFor("the failed attempt's descriptor was not kept")
	claimExcludes(j, "the lease was not taken with the kept descriptor")

	// Replaced: the kept descriptor names the old file.
	j = spareFor("")
	fresh := path + ".new"
	require.NoError(t, os.WriteFile(fresh, nil, 0o600))
	require.NoError(t, os.Rename(fresh, path))
	ok, letGo := otherProcessLease(t, dir, j.ID)
	require.True(t, ok)
	claimBusy(j.ID)
	letGo()
	require.Equal(t, 1, spareCount(s), "only the new file's descriptor is kept")

	// Removed: the claim makes it again and takes the lease there.
	require.NoError(t, os.Remove(path))
	claimExcludes(j, "descriptors of a removed file are kept")

	// Anything but a regular file, with a descriptor kept.
	j = spareFor("")
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err = s.Claim(ctx, req)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "not a regular file")
	require.Zero(t, spareCount(s), "descriptors of a removed file are kept")
	require.NoError(t, os.Remove(path))
	got, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)

	j = submit()
	ok, letGo = otherProcessLease(t, dir, j.ID)
	require.True(t, ok)
	defer letGo()
	claimBusy(j.ID)
	require.Equal(t, 1, spareCount(s))
	require.NoError(t, s.Close())
	require.Zero(t, spareCount(s), "Close left kept descriptors open")
	require.True(t, s.spares.closed)
}
