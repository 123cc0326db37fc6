package filestore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// TestClaimWritesNoRecord: a claim renames the record into claimed/ as it
// was and writes the attempt into the lease file's claim note; every reader
// sees the running job the note describes.
func TestClaimWritesNoRecord(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	before, err := os.ReadFile(s.recordPath(dirQueued, sub.ID))
	require.NoError(t, err)
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w1"})
	require.NoError(t, err)
	after, err := os.ReadFile(s.recordPath(dirClaimed, sub.ID))
	require.NoError(t, err)
	require.Equal(t, before, after, "the claim rewrote the record")

	got, err := s.Get(t.Context(), sub.ID)
	require.NoError(t, err)
	require.Equal(t, c, got)
	require.Equal(t, jobstore.StateRunning, got.State)
	require.Equal(t, "w1", got.Worker)
	require.Equal(t, 1, got.Attempt)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, st.Counts[jobstore.StateRunning])
	require.Zero(t, st.Counts[jobstore.StateQueued])
	page, err := s.List(t.Context(), jobstore.ListOptions{States: []jobstore.State{jobstore.StateRunning}})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, c, page.Jobs[0])
	r, err := s.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)

	// A cancel writes the whole running record; Complete then finishes it.
	_, err = s.Cancel(t.Context(), sub.ID)
	require.NoError(t, err)
	got, err = s.Get(t.Context(), sub.ID)
	require.NoError(t, err)
	require.True(t, got.CancelRequested)
	require.Equal(t, c.StartedAt, got.StartedAt)
	done, err := s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
}

// TestClaimNoteLost: a power cut can keep a claim's rename (fsynced before
// the job runs) and lose its note (never fsynced). The record in claimed/
// then still says queued and no note names it: a claim whose worker is not
// known, queued again once the lease is free with the attempt counted, as
// a note that survived counts it (a dead worker's job).
func TestClaimNoteLost(t *testing.T) {
	forEachLockProtocol(t, testClaimNoteLost)
}

func testClaimNoteLost(t *testing.T, dir string) {
	for _, tc := range []struct {
		name       string
		note       func(t *testing.T, s *Store, id string)
		wantWorker string
	}{
		{"NoteKept", func(*testing.T, *Store, string) {}, "w"},
		{"NoteEmpty", func(t *testing.T, s *Store, id string) {
			setClaimNote(t, s, id, nil)
		}, lostWorker},
		{"NoteOfAnotherRevision", func(t *testing.T, s *Store, id string) {
			n, ok, err := s.readClaimNote(id)
			require.NoError(t, err)
			require.True(t, ok)
			n.Rev++
			if noteInXattr(s, id) {
				setClaimNote(t, s, id, encodeClaimNote(n))
			} else {
				setClaimNote(t, s, id, mustJSON(t, n))
			}
		}, lostWorker},
		{"NoteGarbage", func(t *testing.T, s *Store, id string) {
			setClaimNote(t, s, id, []byte("\x00\x00\x00"))
		}, lostWorker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(dir, tc.name)
			if _, files := lockFilesIn.Load(filepath.Dir(dir)); files {
				useLockFiles(t, dir)
			}
			s, err := Open(t.Context(), dir, &Options{NoSync: true, RecoverInterval: time.Hour})
			require.NoError(t, err)
			sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
			require.NoError(t, err)
			require.NoError(t, s.Close()) // the claimant is gone
			tc.note(t, s, sub.ID)

			s, err = Open(t.Context(), dir, &Options{NoSync: true, RecoverInterval: time.Hour})
			require.NoError(t, err)
			defer s.Close()
			j, err := s.Get(t.Context(), sub.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateQueued, j.State)
			require.Equal(t, 1, j.Attempt, "the attempt counts")
			require.Len(t, j.History, 1)
			require.Equal(t, tc.wantWorker, j.History[0].Worker)
			require.Equal(t, jobstore.EndWorkerLost, j.History[0].End)
			_, err = os.Stat(s.recordPath(dirQueued, sub.ID))
			require.NoError(t, err)
			r, err := s.Fsck(t.Context(), false)
			require.NoError(t, err)
			require.True(t, r.OK(), "%v", r.Problems)
			c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2"})
			require.NoError(t, err)
			require.Equal(t, sub.ID, c.ID)
			require.Equal(t, 2, c.Attempt)
		})
	}
}

// noteInXattr reports whether the note of the claim of job id, in
// claimed/, is the record's extended attribute (else it is in the lease
// file).
func noteInXattr(s *Store, id string) bool {
	if s.ranges == nil {
		return false
	}
	_, err := lgetxattr(s.recordPath(dirClaimed, id), claimNoteXattr, make([]byte, 512))
	return err == nil
}

// setClaimNote replaces the note of the claim of job id with data, where
// the claim wrote it.
func setClaimNote(t *testing.T, s *Store, id string, data []byte) {
	t.Helper()
	if noteInXattr(s, id) {
		require.NoError(t, unix.Lsetxattr(s.recordPath(dirClaimed, id), claimNoteXattr, data, 0))
		return
	}
	require.NoError(t, os.WriteFile(s.leasePath(id), data, 0o600))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestReadNeedsNoLockFile: in a store with a lock file per job (outside
// Linux), a job whose record lock file does not exist (a job of a format-2
// store, or one whose lock file was removed) can be read, and reading it
// does not make one, so a store on a read-only mount stays readable
// (docs/format.md, Locks). The first change makes the file.
func TestReadNeedsNoLockFile(t *testing.T) {
	dir := t.TempDir()
	useLockFiles(t, dir)
	s := openAt(t, dir, &Options{NoSync: true})
	sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, os.Remove(s.lockPath(sub.ID)))
	got, err := s.Get(t.Context(), sub.ID)
	require.NoError(t, err)
	require.Equal(t, sub, got)
	page, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.False(t, s.lockExists(sub.ID), "a read made a lock file")
	_, err = s.Cancel(t.Context(), sub.ID)
	require.NoError(t, err)
	require.True(t, s.lockExists(sub.ID), "a change took no lock")
}

// lockExists reports whether job id's record lock file exists.
func (s *Store) lockExists(id string) bool {
	_, err := os.Lstat(s.lockPath(id))
	return err == nil
}

// powerCutFS is the real file operations, remembering what a power cut
// would take back: the renames and new files placed (PlaceNew) whose
// target directory no fsync (nor syncfs) has covered since, the claim notes written in place, which
// nothing fsyncs, and the writes into submission journals that no
// fdatasync covered. cut takes them back, as the disk would have them
// after the power came back.
type powerCutFS struct {
	fileOps
	mu         sync.Mutex
	renames    [][2]string // a placed new file: {"", path}
	overwrites []string
	xattrs     []string
	journal    map[string][][2]int64 // path: writes (offset, length)
}

func (f *powerCutFS) JournalWrite(file *os.File, data []byte, off int64) error {
	if err := f.fileOps.JournalWrite(file, data, off); err != nil {
		return err
	}
	f.mu.Lock()
	if f.journal == nil {
		f.journal = map[string][][2]int64{}
	}
	f.journal[file.Name()] = append(f.journal[file.Name()], [2]int64{off, int64(len(data))})
	f.mu.Unlock()
	return nil
}

func (f *powerCutFS) JournalSync(file *os.File) error {
	if err := f.fileOps.JournalSync(file); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.journal, file.Name())
	f.mu.Unlock()
	return nil
}

func (f *powerCutFS) SyncFile(p string) error {
	if err := f.fileOps.SyncFile(p); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.journal, p)
	f.mu.Unlock()
	return nil
}

func (f *powerCutFS) Rename(o, n string) error {
	if err := f.fileOps.Rename(o, n); err != nil {
		return err
	}
	f.mu.Lock()
	f.renames = append(f.renames, [2]string{o, n})
	f.mu.Unlock()
	return nil
}

func (f *powerCutFS) PlaceNew(nf *newFile) error {
	if err := f.fileOps.PlaceNew(nf); err != nil {
		return err
	}
	f.mu.Lock()
	f.renames = append(f.renames, [2]string{"", nf.path})
	f.mu.Unlock()
	return nil
}

func (f *powerCutFS) Overwrite(p string, data []byte) error {
	f.mu.Lock()
	f.overwrites = append(f.overwrites, p)
	f.mu.Unlock()
	return f.fileOps.Overwrite(p, data)
}

func (f *powerCutFS) SetXattr(p, name string, value []byte) error {
	f.mu.Lock()
	f.xattrs = append(f.xattrs, p)
	f.mu.Unlock()
	return f.fileOps.SetXattr(p, name, value)
}

func (f *powerCutFS) SyncDir(d string) error {
	if err := f.fileOps.SyncDir(d); err != nil {
		return err
	}
	f.mu.Lock()
	f.renames = slices.DeleteFunc(f.renames, func(r [2]string) bool { return filepath.Dir(r[1]) == d })
	f.mu.Unlock()
	return nil
}

func (f *powerCutFS) SyncFS(d string) (syncer, error) {
	sy, err := f.fileOps.SyncFS(d)
	if err != nil {
		return nil, err
	}
	return cutSyncer{sy, f}, nil
}

type cutSyncer struct {
	syncer
	f *powerCutFS
}

func (s cutSyncer) Sync() error {
	if err := s.syncer.Sync(); err != nil {
		return err
	}
	s.f.mu.Lock()
	s.f.renames = nil
	s.f.mu.Unlock()
	return nil
}

// reset forgets what was done so far, as if it had been made durable.
func (f *powerCutFS) reset() {
	f.mu.Lock()
	f.renames, f.overwrites, f.xattrs, f.journal = nil, nil, nil, nil
	f.mu.Unlock()
}

// cut takes back what was not made durable.
func (f *powerCutFS) cut(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range slices.Backward(f.renames) {
		if r[0] == "" {
			require.NoError(t, os.Remove(r[1])) // a new file, and its data, gone
			continue
		}
		require.NoError(t, os.Rename(r[1], r[0]))
	}
	for _, p := range f.overwrites {
		require.NoError(t, os.Truncate(p, 0))
	}
	for p, ws := range f.journal {
		file, err := os.OpenFile(p, os.O_WRONLY, 0)
		require.NoError(t, err)
		for _, w := range ws {
			_, err := file.WriteAt(make([]byte, w[1]), w[0])
			require.NoError(t, err)
		}
		require.NoError(t, file.Close())
	}
	for _, p := range f.xattrs {
		// A note set on a record in queued/ goes with it into claimed/.
		store, name := filepath.Dir(filepath.Dir(p)), filepath.Base(p)
		for _, d := range stateDirs {
			_ = unix.Lremovexattr(filepath.Join(store, d, name), claimNoteXattr)
		}
	}
	f.renames, f.overwrites, f.xattrs, f.journal = nil, nil, nil, nil
}

// TestPowerCutCountsAttempt: a claim is made durable a moment after it
// returns (by the Store's claim flusher), so a power cut during the
// attempt leaves the job claimed, and recovery after
// it counts the attempt although the claim note is lost: a job whose
// every attempt brings the machine down ends failed after MaxAttempts
// instead of running forever.
func TestPowerCutCountsAttempt(t *testing.T) {
	for _, syncFS := range []bool{false, true} {
		t.Run(fmt.Sprintf("SyncFS=%v", syncFS), func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			fsys := &powerCutFS{fileOps: &syncLog{fileOps: osFS{}, info: &ext4Disk}}
			opts := &Options{SyncFS: syncFS, RecoverInterval: time.Hour}
			s, err := open(ctx, dir, opts, fsys)
			require.NoError(t, err)
			sub, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 2})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			for attempt := 1; attempt <= 2; attempt++ {
				s, err := open(ctx, dir, opts, fsys)
				require.NoError(t, err)
				fsys.reset()
				c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
				require.NoError(t, err, "attempt %d", attempt)
				require.Equal(t, sub.ID, c.ID)
				require.Equal(t, attempt, c.Attempt)
				// The claim flusher has made it durable (a moment after the
				// claim), and the machine goes down while the job runs.
				require.NoError(t, s.waitClaimsDurable(ctx))
				require.NoError(t, s.Close())
				fsys.cut(t)
				_, err = os.Stat(s.recordPath(dirClaimed, sub.ID))
				require.NoError(t, err, "the claim did not survive the power cut")
			}
			s, err = open(ctx, dir, opts, fsys)
			require.NoError(t, err)
			defer s.Close()
			j, err := s.Get(ctx, sub.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateFailed, j.State)
			require.Equal(t, 2, j.Attempt)
			require.Len(t, j.History, 2)
			for _, h := range j.History {
				require.Equal(t, jobstore.EndWorkerLost, h.End)
				require.Equal(t, lostWorker, h.Worker)
			}
			_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			require.ErrorIs(t, err, jobstore.ErrNoJob)
		})
	}
}

// closeOnClaimFS is powerCutFS that, right after the claim's rename into
// claimed/, makes that rename durable (as another claim's flush may) and
// closes s, before the claim's last check for Close.
type closeOnClaimFS struct {
	*powerCutFS
	s      *Store
	closed chan struct{}
}

func (f *closeOnClaimFS) Rename(o, n string) error {
	err := f.powerCutFS.Rename(o, n)
	if f.s != nil && filepath.Base(filepath.Dir(n)) == dirClaimed {
		// Another claim's flush makes this rename durable, as it may
		// while the claim runs.
		if err := f.powerCutFS.SyncDir(filepath.Dir(n)); err != nil {
			return err
		}
		s := f.s
		f.s = nil
		f.closed = make(chan struct{})
		go func() { s.Close(); close(f.closed) }()
		for !s.isClosed() {
			time.Sleep(time.Millisecond)
		}
	}
	return err
}

// TestUnclaimThenPowerCut: a Close during a claim takes the claim back
// (the job goes back to queued/), then the power goes. The job, which
// never ran, is queued with no attempt counted: the move back was made
// durable as the claim was.
func TestUnclaimThenPowerCut(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	pc := &powerCutFS{fileOps: &syncLog{fileOps: osFS{}, info: &ext4Disk}}
	fsys := &closeOnClaimFS{powerCutFS: pc}
	opts := &Options{RecoverInterval: time.Hour}
	s, err := open(ctx, dir, opts, fsys)
	require.NoError(t, err)
	sub, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 1})
	require.NoError(t, err)
	pc.reset()
	fsys.s = s
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrClosed)
	<-fsys.closed
	pc.cut(t)
	again := openAt(t, dir, opts)
	j, err := again.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, 0, j.Attempt, "an attempt that never ran was counted")
}

// TestClaimNoteInXattr: with range leases (format 8 on Linux) a claim
// makes no file: its lease is a byte of locks/leases.lock and its note an
// extended attribute of the record, small enough for ext4 to keep in the
// inode with a worker name of up to 49 bytes. A file planted at the job's
// old lease file path is never opened (TestHostileSymlinks/lease).
func TestClaimNoteInXattr(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	requireRangeLocks(t, s)
	sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	worker := strings.Repeat("w", 49)
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: worker})
	require.NoError(t, err)
	if !noteInXattr(s, sub.ID) {
		t.Skip("the file system of the test's directory keeps no extended attributes")
	}
	buf := make([]byte, 512)
	n, err := lgetxattr(s.recordPath(dirClaimed, sub.ID), claimNoteXattr, buf)
	require.NoError(t, err)
	require.LessOrEqual(t, n, 60, "the note no longer fits in a 256-byte ext4 inode")
	note, ok := decodeClaimNote(buf[:n])
	require.True(t, ok)
	require.Equal(t, claimNote{Rev: 1, Worker: worker, ClaimedAt: c.StartedAt.UTC()}, note)
	require.NoFileExists(t, s.leasePath(sub.ID), "the claim made a lease file")
	require.FileExists(t, s.locksPath(leasesName))
	require.Empty(t, jobLockFiles(t, s.Dir()))
	got, err := s.Get(t.Context(), sub.ID)
	require.NoError(t, err)
	require.Equal(t, c, got)
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.Empty(t, jobLockFiles(t, s.Dir()))
}

// xattrFails is the real file operations with SetXattr failing with err
// (counting the calls that set a value).
type xattrFails struct {
	osFS
	err   error
	calls atomic.Int32
}

func (f *xattrFails) SetXattr(_, _ string, value []byte) error {
	if value != nil {
		f.calls.Add(1)
	}
	return f.err
}

// TestClaimNoteWithoutXattrs: on a file system that keeps no extended
// attributes (ENOTSUP), claims write their notes into lease files, as
// format 7 did, and stop trying the attribute; every reader sees the
// running jobs as the notes say, and a power cut's loss of a note is
// handled as with the attribute (TestClaimNoteLost, the power-cut test on
// crashfs, which keeps none).
func TestClaimNoteWithoutXattrs(t *testing.T) {
	fsys := &xattrFails{err: unix.ENOTSUP}
	s, err := open(t.Context(), t.TempDir(), &Options{NoSync: true}, fsys)
	require.NoError(t, err)
	defer s.Close()
	requireRangeLocks(t, s)
	for range 3 {
		_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	var held []jobstore.Job
	for range 3 {
		c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.FileExists(t, s.leasePath(c.ID), "no note in a lease file")
		got, err := s.Get(t.Context(), c.ID)
		require.NoError(t, err)
		require.Equal(t, c, got)
		held = append(held, c)
	}
	require.Equal(t, int32(1), fsys.calls.Load(), "claims kept trying the attribute")
	for _, c := range held {
		_, err := s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	r, err := s.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
}

// TestClaimNoteXattrFails: a note that cannot be set for another reason
// (an I/O error) fails the claim rather than go to the lease file, where
// a reader would not look while an older note of the same revision is on
// the record: the job stays queued, unclaimed, with its lease free, and is
// claimed once the attribute can be set.
func TestClaimNoteXattrFails(t *testing.T) {
	fsys := &xattrFails{err: unix.EIO}
	dir := t.TempDir()
	s, err := open(t.Context(), dir, &Options{NoSync: true}, fsys)
	require.NoError(t, err)
	requireRangeLocks(t, s)
	sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, unix.EIO)
	require.NoFileExists(t, s.leasePath(sub.ID))
	require.False(t, s.leaseHeld(sub.ID), "a failed claim kept the lease")
	got, err := s.Get(t.Context(), sub.ID)
	require.NoError(t, err)
	require.Equal(t, sub, got)
	require.NoError(t, s.Close())

	s = openAt(t, dir, &Options{NoSync: true})
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, sub.ID, c.ID)
	require.Equal(t, 1, c.Attempt)
}

// TestClaimNoteEncoding: a note survives its encoding, and anything else
// in the attribute is no note.
func TestClaimNoteEncoding(t *testing.T) {
	n := claimNote{Rev: 300, Worker: "host-1-4242-9f86d081", ClaimedAt: time.Date(2026, 12, 7, 9, 0, 0, 123456789, time.UTC)}
	b := encodeClaimNote(n)
	got, ok := decodeClaimNote(b)
	require.True(t, ok)
	require.Equal(t, n, got)
	for name, bad := range map[string][]byte{
		"empty":         nil,
		"other version": append([]byte{2}, b[1:]...),
		"no revision":   {claimNoteVersion},
		"revision 0":    append([]byte{claimNoteVersion, 0}, b[3:]...),
		"no time":       b[:5],
		"no worker":     b[:len(b)-len(n.Worker)],
		"bad worker":    append(slices.Clone(b), ' '),
		"JSON":          mustJSON(t, n),
	} {
		_, ok := decodeClaimNote(bad)
		require.False(t, ok, name)
	}
}

// xattrUnsupported is the real file operations where setting an extended
// attribute fails with ENOTSUP (removing one works).
type xattrUnsupported struct{ osFS }

func (f *xattrUnsupported) SetXattr(p, name string, value []byte) error {
	if value != nil {
		return unix.ENOTSUP
	}
	return f.osFS.SetXattr(p, name, value)
}

// TestClaimNoteFallbackHidesNoStaleNote: a claim whose note goes to the
// lease file removes any note left on the record (by a claim whose rename
// failed, with the same revision), which readers would take first.
func TestClaimNoteFallbackHidesNoStaleNote(t *testing.T) {
	dir := t.TempDir()
	s, err := open(t.Context(), dir, &Options{NoSync: true}, &xattrUnsupported{})
	require.NoError(t, err)
	defer s.Close()
	requireRangeLocks(t, s)
	sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	stale := encodeClaimNote(claimNote{Rev: 1, Worker: "old", ClaimedAt: time.Now().UTC()})
	if err := unix.Lsetxattr(s.recordPath(dirQueued, sub.ID), claimNoteXattr, stale, 0); err != nil {
		t.Skipf("the file system of the test's directory keeps no extended attributes: %v", err)
	}
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "new"})
	require.NoError(t, err)
	require.False(t, noteInXattr(s, c.ID), "the stale note stayed on the record")
	got, err := s.Get(t.Context(), c.ID)
	require.NoError(t, err)
	require.Equal(t, "new", got.Worker)
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
}

// TestCompleteKeepsClaimRead: while the record in claimed/ carries the note
// of this process's claim, Complete and Release take the record the claim
// read instead of reading the state directories again (heldRecord); a
// record replaced since, which has no note, is read again.
func TestCompleteKeepsClaimRead(t *testing.T) {
	// rewrite gives the record in claimed/ the payload {"n":2}: in place,
	// keeping the file and its note (which the store never does), or as a
	// new revision in a new file renamed over it, as every change of a
	// record is made.
	rewrite := func(t *testing.T, s *Store, id string, inPlace bool) {
		p := s.recordPath(dirClaimed, id)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		env, err := decodeRecord(p, id, data, 1<<20)
		require.NoError(t, err)
		if inPlace {
			env.Job.Payload = json.RawMessage(`{"n":2}`)
			data, err = encodeRecord(env)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, data, 0o644))
			return
		}
		// A new revision of the running job, as a Cancel writes one.
		env.Job, err = s.Get(t.Context(), id)
		require.NoError(t, err)
		env.Job.Payload = json.RawMessage(`{"n":2}`)
		env.Rev++
		data, err = encodeRecord(env)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p+".new", data, 0o644))
		require.NoError(t, os.Rename(p+".new", p))
	}
	for _, tc := range []struct {
		name    string
		inPlace bool
		want    string
	}{
		{"NoteKept", true, `{"n":1}`},
		{"Replaced", false, `{"n":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, &Options{NoSync: true})
			if s.ranges == nil {
				t.Skip("claim notes are kept on records only with range locks")
			}
			for _, release := range []bool{false, true} {
				sub, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Payload: json.RawMessage(`{"n":1}`), MaxAttempts: 3})
				require.NoError(t, err)
				c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w1"})
				require.NoError(t, err)
				c.Payload[len(c.Payload)-2] = '9' // the claimant's copy is its own
				var buf [512]byte
				if _, err := lgetxattr(s.recordPath(dirClaimed, sub.ID), claimNoteXattr, buf[:]); err != nil {
					t.Skipf("the claim note is not on the record: %v", err)
				}
				rewrite(t, s, sub.ID, tc.inPlace)
				if release {
					require.NoError(t, s.Release(t.Context(), c.Lease()))
				} else {
					_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
					require.NoError(t, err)
				}
				got, err := s.Get(t.Context(), sub.ID)
				require.NoError(t, err)
				require.JSONEq(t, tc.want, string(got.Payload), "release %v", release)
				require.Equal(t, 1, got.Attempt)
			}
		})
	}
}
