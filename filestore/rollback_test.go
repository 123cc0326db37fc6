package filestore

import (
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// queuedSyncFails fails every fsync of queued/ with EIO while armed, after
// running hook: what another process does between a submit's rename into
// queued/ and its failed fsync.
type queuedSyncFails struct {
	osFS
	armed atomic.Bool
	hook  func()
}

// JournalSync fails too, so that a journaled submit falls back to the
// fsyncs that fail.
func (f *queuedSyncFails) JournalSync(file *os.File) error {
	if f.armed.Load() && filepath.Base(filepath.Dir(file.Name())) == journalDirName {
		return syscall.EIO
	}
	return f.osFS.JournalSync(file)
}

func (f *queuedSyncFails) SyncDir(d string) error {
	if filepath.Base(d) == dirQueued && f.armed.Load() {
		f.hook()
		return syscall.EIO
	}
	return f.osFS.SyncDir(d)
}

// dirSyncFails fails the next fsync of the state directory dir with EIO
// while armed.
type dirSyncFails struct {
	osFS
	dir   string
	armed atomic.Bool
}

func (f *dirSyncFails) SyncDir(d string) error {
	if filepath.Base(d) == f.dir && f.armed.CompareAndSwap(true, false) {
		return syscall.EIO
	}
	return f.osFS.SyncDir(d)
}

// TestCompleteNotDurableRetried: a Complete whose fsync of done/ fails has
// recorded the outcome (readers see it) and says so with ErrNotDurable; a
// retried Complete with the same lease makes it durable and returns the
// job, as recorded, rather than ErrNotHeld.
func TestCompleteNotDurableRetried(t *testing.T) {
	ffs := &dirSyncFails{dir: dirDone}
	s := openAtFS(t, t.TempDir(), nil, ffs)
	ctx := t.Context()
	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	ffs.armed.Store(true)
	_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded([]byte(`1`)))
	require.ErrorIs(t, err, jobstore.ErrNotDurable)
	require.ErrorIs(t, err, syscall.EIO)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State, "the outcome is recorded")

	// The retry carries another outcome: the one recorded stands.
	done, err := s.Complete(ctx, j.Lease(), jobstore.Outcome{Error: "late"})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
	require.JSONEq(t, `1`, string(done.Result))
	_, held := heldLease(s, j.ID)
	require.False(t, held, "the lease outlived the completion")
	_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrNotHeld)
	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
}

// TestSubmitErrorMeansNoJob: a Submit or SubmitBatch whose fsync of queued/
// fails takes its jobs back, and another process that tries to claim them
// in that window gets none: an error means no job of the call exists, and
// the rollback never removes a job someone else has claimed (or completed
// and queued again).
func TestSubmitErrorMeansNoJob(t *testing.T) {
	dir := t.TempDir()
	ffs := &queuedSyncFails{}
	s := openAtFS(t, dir, nil, ffs)
	var claims []string
	ffs.hook = func() {
		claims = append(claims, startChild(t, dir, "claim-once").Next(t))
	}
	if s.journaling() {
		// The journal taken before the failures: a journaled submit's
		// entry is written, its fdatasync fails, and so does the fsync of
		// queued/ it falls back to.
		s.journalFor(t.Context())
		journalFromNow(s)
	}
	ffs.armed.Store(true)
	_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, syscall.EIO)
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "one"})
	require.ErrorIs(t, err, syscall.EIO)
	_, err = s.SubmitBatch(t.Context(), []jobstore.Spec{{Kind: "k"}, {Kind: "k", Key: "two"}, {Kind: "k"}})
	require.ErrorIs(t, err, syscall.EIO)
	ffs.armed.Store(false)
	require.Equal(t, []string{"nojob", "nojob", "nojob"}, claims, "another process claimed a job whose submit then failed")

	page, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, page.Jobs, "a submit that failed left jobs")
	// Nor does a replay of the journal bring one back: its entry was
	// voided.
	require.NoError(t, s.Close())
	s = openAtFS(t, dir, nil, &queuedSyncFails{})
	page, err = s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, page.Jobs, "a replay brought back a job whose submit failed")
	if s.journaling() {
		require.False(t, s.journalDirty(0), "a journal of voided entries alone is read at every pass")
	}
	r, err := s.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	// The keys are free.
	_, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "two"})
	require.NoError(t, err)
	require.True(t, created)
}

// TestRecoverySkipsBadLease: a lease file that cannot be opened (here a
// symbolic link planted in its place) makes recovery skip that one job:
// Open still succeeds, every other dead worker's job is recovered, and
// Fsck reports the one it could not handle. A store with a lease file
// per job (outside Linux): with range leases (format 8 on Linux) no lease
// is a file of its own, and a file planted at a lease file's path is
// never opened (TestClaimNoteInXattr).
func TestRecoverySkipsBadLease(t *testing.T) {
	dir := t.TempDir()
	useLockFiles(t, dir)
	ctx := t.Context()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	var ids []string
	for range 3 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	// Another Store claims them all and goes away without completing.
	other, err := Open(ctx, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err)
	for range ids {
		_, err := other.Claim(ctx, jobstore.ClaimRequest{Worker: "gone"})
		require.NoError(t, err)
	}
	require.NoError(t, other.Close())
	slices.Sort(ids)
	bad := ids[0] // first in the order recovery takes them
	require.NoError(t, os.Remove(s.leasePath(bad)))
	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), s.leasePath(bad)))

	s2, err := Open(ctx, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err, "one bad lease file stopped Open")
	defer s2.Close()
	for _, id := range ids[1:] {
		j, err := s2.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State, "a dead worker's job was stranded by another's bad lease file")
	}
	r, err := s2.Fsck(ctx, false)
	require.NoError(t, err)
	var found bool
	for _, p := range r.Problems {
		if p.Kind == ProblemUnrecoverable && p.ID == bad {
			found = true
		}
	}
	require.True(t, found, "fsck does not report the job recovery skipped: %v", r.Problems)
	require.False(t, r.OK())
	// The planted link is taken away: the next pass recovers the job.
	require.NoError(t, os.Remove(s.leasePath(bad)))
	_, err = s2.recoverDead(ctx, true)
	require.NoError(t, err)
	j, err := s2.Get(ctx, bad)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
}

// noteHook runs hook before each claim note is written: in the middle of
// a claim, after its lease is taken.
type noteHook struct {
	osFS
	hook func()
}

func (f *noteHook) Overwrite(p string, data []byte) error {
	f.hook()
	return f.osFS.Overwrite(p, data)
}

func (f *noteHook) SetXattr(p, name string, value []byte) error {
	f.hook()
	return f.osFS.SetXattr(p, name, value)
}

// TestCloseDuringClaim: a Close that begins while a Claim is in flight
// (after it took the job's lease) never lets that Claim return the job
// whose lease Close releases: the Claim returns ErrClosed and the job is
// queued again, unclaimed, so exactly one later claimant holds it.
func TestCloseDuringClaim(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	ffs := &noteHook{}
	s, err := open(ctx, dir, &Options{NoSync: true}, ffs)
	require.NoError(t, err)
	sub, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	closed := make(chan struct{})
	ffs.hook = func() {
		go func() {
			_ = s.Close()
			close(closed)
		}()
		<-s.closed // Close has begun
	}
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrClosed)
	<-closed

	other := openAt(t, dir, &Options{NoSync: true})
	j, err := other.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Zero(t, j.Attempt, "the interrupted claim counted an attempt")
	j, err = other.Claim(ctx, jobstore.ClaimRequest{Worker: "w2"})
	require.NoError(t, err)
	require.Equal(t, sub.ID, j.ID)
	require.Equal(t, 1, j.Attempt)
	_, err = other.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
}

// TestCancelNotDurable: a Cancel whose fsync of done/ fails has made its
// change (the job is canceled for every reader) and says so with
// ErrNotDurable; retried, it changes nothing more and succeeds, and a
// Claim never gets the job.
func TestCancelNotDurable(t *testing.T) {
	ffs := &dirSyncFails{dir: dirDone}
	s := openAtFS(t, t.TempDir(), nil, ffs)
	ctx := t.Context()
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	ffs.armed.Store(true)
	_, err = s.Cancel(ctx, j.ID)
	require.ErrorIs(t, err, jobstore.ErrNotDurable)
	require.ErrorIs(t, err, syscall.EIO)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	got, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
}

// rollbackRemoveFails fails every fsync of queued/ with EIO, and every
// removal of a record in queued/ with ENOSPC: a submit fails, and so does
// the removal of the record it takes back.
type rollbackRemoveFails struct{ osFS }

func (f rollbackRemoveFails) SyncDir(d string) error {
	if filepath.Base(d) == dirQueued {
		return syscall.EIO
	}
	return f.osFS.SyncDir(d)
}

func (f rollbackRemoveFails) Remove(p string) error {
	if filepath.Base(filepath.Dir(p)) == dirQueued {
		return syscall.ENOSPC
	}
	return f.osFS.Remove(p)
}

// TestFailedTakeBackKeepsKey: when a failed Submit or SubmitBatch cannot
// remove the record it takes back, the job stays, and so does its key
// file: another submit of the key finds that job rather than create a
// second one with the same key.
func TestFailedTakeBackKeepsKey(t *testing.T) {
	dir := t.TempDir()
	s := openAtFS(t, dir, &Options{}, rollbackRemoveFails{})
	_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "one"})
	require.ErrorIs(t, err, syscall.EIO)
	_, err = s.SubmitBatch(t.Context(), []jobstore.Spec{{Kind: "k", Key: "two"}, {Kind: "k"}})
	require.ErrorIs(t, err, syscall.EIO)
	require.NoError(t, s.Close())

	s2 := openAt(t, dir, &Options{NoSync: true})
	for _, key := range []string{"one", "two"} {
		_, created, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: key})
		require.NoError(t, err)
		require.False(t, created, "a second job took the key %q of a job a failed submit left", key)
	}
	r, err := s2.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
}
