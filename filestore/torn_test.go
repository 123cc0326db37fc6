package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// tearRecord leaves job id's record, queued and never changed since its
// submit, as a power cut leaves one whose data never reached the disk:
// the file is there, under its name in queued/ and, for a job with a key,
// in keys/ (the same file, a hard link), and empty.
func tearRecord(t *testing.T, s *Store, id string) {
	t.Helper()
	require.NoError(t, os.Truncate(s.recordPath(dirQueued, id), 0))
}

// problemsOf returns the problems of kind in r.
func problemsOf(r Report, kind ProblemKind) []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// TestTornRecordMendedAtOpen: a power cut left a keyed job's record empty
// (its submit, whose data never reached the disk, was never acknowledged).
// Repair (which every Store makes in the background a second after Open)
// sets the record and its key file aside in quarantine/, so that the
// key is free again: a submit of it creates a new job, and the store is
// clean. Before, every submit of the key failed with "corrupt job record:
// empty file (run fsck)".
func TestTornRecordMendedAtOpen(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, err := Open(ctx, dir, &Options{RecoverInterval: time.Hour})
	require.NoError(t, err)
	torn, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	// A batch large enough for the syncfs path, as the lost submits were.
	specs := make([]jobstore.Spec, syncFSBatch)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k", Key: fmt.Sprintf("b%d", i)}
	}
	batch, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	tearRecord(t, s, torn.ID)
	for _, b := range batch {
		tearRecord(t, s, b.Job.ID)
	}

	s = openAt(t, dir, &Options{RecoverInterval: time.Hour})
	rep, err := s.Repair(ctx)
	require.NoError(t, err)
	require.Len(t, problemsOf(rep, ProblemTornRecord), 2*(1+syncFSBatch), "every record and key file: %v", rep.Problems)
	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
	require.Empty(t, r.Problems)
	_, err = s.Get(ctx, torn.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	data, err := os.ReadFile(filepath.Join(dir, dirQuarantine, dirQueued, torn.ID+recordExt))
	require.NoError(t, err, "the torn record is set aside, not deleted")
	require.Empty(t, data)
	_, err = os.Stat(filepath.Join(dir, dirQuarantine, dirKeys, keyName("a")+recordExt))
	require.NoError(t, err)
	_, err = os.Stat(s.lockPath(torn.ID))
	require.ErrorIs(t, err, os.ErrNotExist, "the record lock of the job that is gone stays")

	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, torn.ID, j.ID)
	again, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	for i, a := range again {
		require.True(t, a.Created, "spec %d", i)
	}
}

// TestTornKeyFreedBySubmit: a Store that was open when the torn record
// appeared (it did not repair it at Open) frees the key at the next submit
// of it instead of refusing it. The torn record in queued/ stays for Fsck
// with repair, which sets it aside.
func TestTornKeyFreedBySubmit(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{RecoverInterval: time.Hour})
	old, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	s.mu.Lock()
	clear(s.keys) // as in a process that did not submit it
	s.mu.Unlock()
	tearRecord(t, s, old.ID)

	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, old.ID, j.ID)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, "a", got.Key)

	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	tp := problemsOf(r, ProblemTornRecord)
	require.Len(t, tp, 1, "%v", r.Problems)
	require.Equal(t, s.recordPath(dirQueued, old.ID), tp[0].Path)
	require.Equal(t, old.ID, tp[0].ID)
	require.False(t, tp[0].Repaired)
	require.False(t, r.OK())
	r, err = s.Fsck(ctx, true)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
}

// tornKeyRaceFS is the real file operations with a hook that runs when
// the store first makes quarantine/keys/ (about to set a torn key file
// aside) and one after it first moves a file out of keys/ into it.
type tornKeyRaceFS struct {
	osFS
	beforeMkdir, afterMove func()
}

func (f *tornKeyRaceFS) Mkdir(dir string, perm os.FileMode) error {
	if f.beforeMkdir != nil && strings.HasSuffix(dir, filepath.Join(dirQuarantine, dirKeys)) {
		hook := f.beforeMkdir
		f.beforeMkdir = nil
		hook()
	}
	return f.osFS.Mkdir(dir, perm)
}

func (f *tornKeyRaceFS) moved(oldname, newname string) {
	if f.afterMove != nil && filepath.Base(filepath.Dir(oldname)) == dirKeys && strings.Contains(newname, dirQuarantine) {
		hook := f.afterMove
		f.afterMove = nil
		hook()
	}
}

func (f *tornKeyRaceFS) Rename(oldname, newname string) error {
	err := f.osFS.Rename(oldname, newname)
	f.moved(oldname, newname)
	return err
}

func (f *tornKeyRaceFS) Link(oldname, newname string) error {
	err := f.osFS.Link(oldname, newname)
	f.moved(oldname, newname)
	return err
}

// TestTornKeySetAsideRace: process A has read a torn key file and is
// about to set it aside when process C sets it aside itself and submits
// the key, so a new key file stands in its place; then, right after A's
// move, process D submits the key too. A must move nothing but the torn
// file: C's key file stays, and A's and D's submits find C's job, the
// only one with the key. (A set-aside that moved whatever stood at the
// key file's path and linked back a file it had not meant to take left a
// moment with no key file, in which D made a second job with the key.)
func TestTornKeySetAsideRace(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	opts := &Options{RecoverInterval: time.Hour}
	torn, _, err := openAt(t, dir, opts).Submit(ctx, jobstore.Spec{Kind: "k", Key: "k"})
	require.NoError(t, err)
	fsys := &tornKeyRaceFS{}
	a := openAtFS(t, dir, opts, fsys)
	other := openAt(t, dir, opts)
	tearRecord(t, a, torn.ID)

	var c, d jobstore.Job
	fsys.beforeMkdir = func() {
		var err error
		c, _, err = other.Submit(ctx, jobstore.Spec{Kind: "k", Key: "k"})
		require.NoError(t, err)
	}
	fsys.afterMove = func() {
		var err error
		d, _, err = other.Submit(ctx, jobstore.Spec{Kind: "k", Key: "k"})
		require.NoError(t, err)
	}
	got, _, err := a.Submit(ctx, jobstore.Spec{Kind: "k", Key: "k"})
	require.NoError(t, err)
	require.NotEmpty(t, c.ID, "C did not submit in the race")
	require.NotEqual(t, torn.ID, c.ID)
	if d.ID == "" {
		d, _, err = other.Submit(ctx, jobstore.Spec{Kind: "k", Key: "k"})
		require.NoError(t, err)
	}
	require.Equal(t, c.ID, got.ID, "A's submit made a job of its own")
	require.Equal(t, c.ID, d.ID, "two jobs hold key k")
	page, err := a.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	var withKey []string
	for _, j := range page.Jobs {
		if j.Key == "k" {
			withKey = append(withKey, j.ID)
		}
	}
	require.Equal(t, []string{c.ID}, withKey)
	// The torn record itself, which held no key, is left to fsck.
	r, err := a.Fsck(ctx, true)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
}

// TestTornRewriteFreesKey: a keyed job whose later record a crash left
// torn (its key file, the first record, is whole: a rewrite is a new
// file) does not hold its key forever either: the next submit of the key
// sets the record aside, removes the key file and creates a new job.
func TestTornRewriteFreesKey(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{RecoverInterval: time.Hour})
	old, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	s.mu.Lock()
	clear(s.keys)
	s.mu.Unlock()
	p := s.recordPath(dirQueued, old.ID)
	require.NoError(t, os.Remove(p))
	require.NoError(t, os.WriteFile(p, nil, 0o600))

	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, old.ID, j.ID)
	require.FileExists(t, filepath.Join(s.Dir(), dirQuarantine, dirQueued, old.ID+recordExt))
	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
}

// TestTornRecordFsck: Fsck reports every torn record and key file, empty,
// zero bytes or cut short, in every state directory, as torn-record, and
// with repair sets each aside in quarantine/; a valid record, a corrupt
// one that is not torn, and a live writer's temp file, empty as it is
// being written, are never touched.
func TestTornRecordFsck(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{RecoverInterval: time.Hour})
	// Another Store, alive, which will be writing a temp file.
	other := openAt(t, dir, &Options{RecoverInterval: time.Hour})
	good, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "good"})
	require.NoError(t, err)
	data, err := os.ReadFile(s.recordPath(dirQueued, good.ID))
	require.NoError(t, err)
	plant := func(dirName string, content []byte) string {
		id := jobstore.NewID(time.Now())
		require.NoError(t, os.WriteFile(s.recordPath(dirName, id), content, 0o600))
		return s.recordPath(dirName, id)
	}
	torn := []string{
		plant(dirQueued, nil),
		plant(dirClaimed, make([]byte, 512)),
		plant(dirDone, data[:len(data)/3]),
		plant(dirDone, append(data[:len(data)/2:len(data)/2], make([]byte, 100)...)),
	}
	// A keyed job whose record is torn: key file and record, one file.
	keyed, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "torn"})
	require.NoError(t, err)
	tearRecord(t, s, keyed.ID)
	torn = append(torn, s.recordPath(dirQueued, keyed.ID), s.keyPath(keyName("torn")))
	notTorn := plant(dirQueued, []byte("hello"))
	writing := filepath.Join(other.tmpDir, ".new.1.1.1")
	require.NoError(t, os.WriteFile(writing, nil, 0o600))

	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	var paths []string
	for _, p := range problemsOf(r, ProblemTornRecord) {
		require.False(t, p.Repaired)
		paths = append(paths, p.Path)
	}
	require.ElementsMatch(t, torn, paths, "%v", r.Problems)
	require.Len(t, problemsOf(r, ProblemCorrupt), 1)

	r, err = s.Fsck(ctx, true)
	require.NoError(t, err)
	require.Len(t, problemsOf(r, ProblemTornRecord), len(torn))
	for _, p := range r.Problems {
		require.Equal(t, p.Kind == ProblemTornRecord, p.Repaired, "%v", p)
	}
	for _, p := range torn {
		require.NoFileExists(t, p)
		require.FileExists(t, filepath.Join(dir, dirQuarantine, filepath.Base(filepath.Dir(p)), filepath.Base(p)))
	}
	after, err := os.ReadFile(s.recordPath(dirQueued, good.ID))
	require.NoError(t, err)
	require.Equal(t, data, after, "a valid record was touched")
	require.FileExists(t, s.keyPath(keyName("good")))
	require.FileExists(t, notTorn, "a corrupt record that is not torn is only reported")
	require.FileExists(t, writing, "a live writer's temp file was taken")
	// Removed by hand, for the test's own consistency check: the record and
	// the lock file Fsck made for it.
	require.NoError(t, os.Remove(notTorn))
	if err := os.Remove(filepath.Join(dir, dirLocks, strings.TrimSuffix(filepath.Base(notTorn), recordExt)+recordLock)); !errors.Is(err, fs.ErrNotExist) {
		require.NoError(t, err) // a store with range locks makes none
	}
	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	_, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "torn"})
	require.NoError(t, err)
	require.True(t, created)
}

// TestTornReason: what counts as a torn record: what a crash leaves of a
// write that did not reach the disk, and nothing else.
func TestTornReason(t *testing.T) {
	rec, err := encodeRecord(envelope{Rev: 1, Job: jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now())})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		data []byte
		torn bool
	}{
		{"Empty", nil, true},
		{"Zeros", make([]byte, 4096), true},
		{"CutShort", rec[:len(rec)/2], true},
		{"CutShortThenZeros", append(append([]byte{}, rec[:20]...), make([]byte, 30)...), true},
		{"NotJSON", []byte("hello"), false},
		{"Array", []byte("[1,2"), false},
		{"WholeThenZeros", append(append([]byte{}, rec...), 0, 0), false},
		{"WholeButWrong", []byte(`{"format":1}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRecord("p", "", tc.data, 1<<20)
			require.ErrorIs(t, err, jobstore.ErrCorrupt)
			require.Equal(t, tc.torn, isTorn(err), "%v", err)
		})
	}
	_, err = decodeRecord("p", "", rec, 1<<20)
	require.NoError(t, err)
}

// noQuarantine is the real file operations on a disk where quarantine/
// cannot be made (read-only, or full).
type noQuarantine struct{ fileOps }

func (f noQuarantine) Mkdir(d string, perm os.FileMode) error {
	if strings.Contains(d, dirQuarantine) {
		return &os.PathError{Op: "mkdir", Path: d, Err: syscall.EROFS}
	}
	return f.fileOps.Mkdir(d, perm)
}

// TestTornKeyCannotBeSetAside: a torn key file that cannot be set aside
// does not make Open fail: it stays, reported by Fsck, until a repair can
// move it.
func TestTornKeyCannotBeSetAside(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, err := Open(ctx, dir, &Options{RecoverInterval: time.Hour})
	require.NoError(t, err)
	old, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	tearRecord(t, s, old.ID)

	s, err = open(ctx, dir, &Options{RecoverInterval: time.Hour}, noQuarantine{osFS{}})
	require.NoError(t, err)
	r, err := s.Fsck(ctx, true)
	require.NoError(t, err)
	tp := problemsOf(r, ProblemTornRecord)
	require.Len(t, tp, 2, "%v", r.Problems)
	for _, p := range tp {
		require.False(t, p.Repaired)
		require.Contains(t, p.Detail, "cannot set it aside")
	}
	require.FileExists(t, s.keyPath(keyName("a")))
	require.NoError(t, s.Close())
	requireConsistent(t, dir) // a store that can set it aside does
}
