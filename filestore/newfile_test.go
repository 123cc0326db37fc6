package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// countUnnamed counts, until the test ends, the files without a name
// made and named (openUnnamedAt and linkUnnamedAt, as set when called).
func countUnnamed(t *testing.T) (made, named *atomic.Int64) {
	made, named = new(atomic.Int64), new(atomic.Int64)
	open, link := openUnnamedAt, linkUnnamedAt
	openUnnamedAt = func(dfd int, perm uint32) (int, bool, error) {
		fd, ok, err := open(dfd, perm)
		if ok && err == nil {
			made.Add(1)
		}
		return fd, ok, err
	}
	linkUnnamedAt = func(fd, dfd int, name string) (bool, error) {
		ok, err := link(fd, dfd, name)
		if ok && err == nil {
			named.Add(1)
		}
		return ok, err
	}
	t.Cleanup(func() { openUnnamedAt, linkUnnamedAt = open, link })
	return made, named
}

// requireUnnamed skips a test where the store's file system has no files
// without a name (O_TMPFILE): outside Linux, and on file systems such as
// FUSE.
func requireUnnamed(t *testing.T, dir string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("files without a name (O_TMPFILE) are Linux's")
	}
	d, derr := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, derr)
	defer unix.Close(d)
	fd, ok, err := openUnnamed(d, 0o600)
	if !ok {
		t.Skipf("the file system of %s has no files without a name: %v", dir, err)
	}
	require.NoError(t, err)
	_ = unix.Close(fd)
}

// tempFiles lists the files in the Store's staging directory.
func tempFiles(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(s.tmpDir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// requireRecords checks that each job of ids is queued, as submitted.
func requireRecords(t *testing.T, s *Store, ids []string) {
	t.Helper()
	for _, id := range ids {
		j, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State, "job %s", id)
		require.Equal(t, "k", j.Kind, "job %s", id)
	}
}

// openJournaling opens the store in dir with its submission journal on
// from its first submit (skipping the test where there is none) and
// covered only at Close.
func openJournaling(t *testing.T, dir string) *Store {
	t.Helper()
	s := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	requireJournaling(t, s)
	journalFromNow(s)
	return s
}

// submitSome submits one job and a batch of n through s's journal and
// returns their IDs.
func submitSome(t *testing.T, s *Store, n int) []string {
	t.Helper()
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	ids := []string{j.ID}
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	res, err := s.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Created)
		ids = append(ids, r.Job.ID)
	}
	return ids
}

// TestNewFileUnnamed: on Linux, a journaled Submit and SubmitBatch write
// each record as a file without a name and name it in queued/: no temp
// file is left in tmp/, no descriptor stays open after, and the watchers
// of queued/ see the naming alone, not the writes to the file without a
// name (which the kernel reports to the watchers of its directory).
func TestNewFileUnnamed(t *testing.T) {
	dir := t.TempDir()
	requireUnnamed(t, dir)
	made, named := countUnnamed(t)
	s := openJournaling(t, dir)
	open0 := unnamedOpen.Load()
	w, err := fsnotify.NewWatcher()
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.Add(filepath.Join(dir, dirQueued)))
	ids := submitSome(t, s, 20)
	var events []string
	for quiet := time.After(200 * time.Millisecond); ; {
		select {
		case ev := <-w.Events:
			events = append(events, ev.String())
			require.True(t, strings.HasSuffix(ev.Name, ".json"), "an event of queued/'s watchers: %v", ev)
			continue
		case err := <-w.Errors:
			require.NoError(t, err)
		case <-quiet:
		}
		break
	}
	require.Len(t, events, len(ids), "one event per record: %v", events)
	require.EqualValues(t, 21, made.Load(), "records written without a name")
	require.EqualValues(t, 21, named.Load(), "records named")
	require.Empty(t, tempFiles(t, s))
	require.Equal(t, open0, unnamedOpen.Load(), "descriptors of unnamed files left open")
	requireRecords(t, s, ids)
	for _, id := range ids {
		fi, err := os.Stat(s.recordPath(dirQueued, id))
		require.NoError(t, err)
		require.Equal(t, s.filePerm, fi.Mode().Perm(), "the record's mode")
	}
}

// TestNewFileFallsBack: where a file without a name cannot be made (a
// file system without them) or named (a process without /proc and
// without CAP_DAC_READ_SEARCH), or the process holds too many already,
// records are written as temp files and renamed, and every job is
// submitted; once one cannot be made or named, the Store stops trying.
func TestNewFileFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name        string
		setup       func(t *testing.T)
		made, named int64 // records written without a name, and named, of 11
		sticky      bool
	}{
		{"NoUnnamedFiles", func(t *testing.T) {
			openUnnamedAt = func(int, uint32) (int, bool, error) { return -1, false, unix.EOPNOTSUPP }
			t.Cleanup(func() { openUnnamedAt = openUnnamed })
		}, 0, 0, true},
		{"CannotName", func(t *testing.T) {
			linkUnnamedAt = func(int, int, string) (bool, error) { return false, unix.EPERM }
			t.Cleanup(func() { linkUnnamedAt = linkUnnamed })
		}, 1, 0, true}, // the first is written unnamed, and its naming fails
		{"NamingRefused", func(t *testing.T) {
			// /proc/self/fd is there, and a security module refuses it.
			linkUnnamedAt = func(int, int, string) (bool, error) { return true, unix.EACCES }
			t.Cleanup(func() { linkUnnamedAt = linkUnnamed })
		}, 1, 0, true},
		{"TooManyOpen", func(t *testing.T) {
			held := unnamedOpen.Load()
			unnamedLimit = func() int64 { return held + 3 }
			t.Cleanup(func() { unnamedLimit = sync.OnceValue(nofileQuarter) })
		}, 1 + 3, 1 + 3, false}, // one Submit, then 3 of the batch at once
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			requireUnnamed(t, dir)
			tc.setup(t)
			made, named := countUnnamed(t)
			s := openJournaling(t, dir)
			open0 := unnamedOpen.Load()
			ids := submitSome(t, s, 10)
			require.Equal(t, tc.made, made.Load(), "records written without a name")
			require.Equal(t, tc.named, named.Load(), "records named")
			require.Equal(t, tc.sticky, s.pins.noUnnamed.Load(), "the Store stopped trying")
			require.Empty(t, tempFiles(t, s))
			require.Equal(t, open0, unnamedOpen.Load(), "descriptors of unnamed files left open")
			requireRecords(t, s, ids)
		})
	}
}

// TestNewFilePlaceAndDrop: PlaceNew refuses a name that exists, leaving
// that file as it was, and drops the new one; DropNew leaves nothing,
// for a file without a name and for a temp file alike.
func TestNewFilePlaceAndDrop(t *testing.T) {
	dir := t.TempDir()
	requireUnnamed(t, dir)
	s := openAt(t, dir, nil)
	open0 := unnamedOpen.Load()
	for _, unnamed := range []bool{true, false} {
		s.pins.noUnnamed.Store(!unnamed)
		p := s.recordPath(dirQueued, jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now()).ID)
		nf, err := s.fs.WriteNew(p, s.tmpDir, []byte("new"), s.filePerm)
		require.NoError(t, err)
		require.Equal(t, unnamed, nf.fd >= 0)
		require.NoFileExists(t, p, "named before PlaceNew")
		s.fs.DropNew(nf)
		require.NoFileExists(t, p)
		require.Empty(t, tempFiles(t, s))

		require.NoError(t, os.WriteFile(p, []byte("old"), 0o600))
		nf, err = s.fs.WriteNew(p, s.tmpDir, []byte("new"), s.filePerm)
		require.NoError(t, err)
		err = s.fs.PlaceNew(nf)
		if unnamed {
			require.ErrorIs(t, err, fs.ErrExist)
			data, rerr := os.ReadFile(p)
			require.NoError(t, rerr)
			require.Equal(t, "old", string(data), "the file in place was changed")
		} else {
			// A temp file is renamed, which replaces: WriteNew's path must
			// not exist, as a new job's record does not.
			require.NoError(t, err)
		}
		require.NoError(t, os.Remove(p))
		require.Empty(t, tempFiles(t, s))
		require.Equal(t, open0, unnamedOpen.Load(), "descriptors of unnamed files left open")
	}
	// A path outside the store's directories takes a temp file.
	nf, err := s.fs.WriteNew(filepath.Join(dir, "x", "y", "z.json"), s.tmpDir, []byte("z"), s.filePerm)
	require.NoError(t, err)
	require.Less(t, nf.fd, 0)
	s.fs.DropNew(nf)
	require.Empty(t, tempFiles(t, s))
}

// TestNewFileSwappedDir: a file without a name is not written into, nor
// named in, a state directory whose name no longer names the one the
// Store opened.
func TestNewFileSwappedDir(t *testing.T) {
	dir := t.TempDir()
	requireUnnamed(t, dir)
	s := openAt(t, dir, nil)
	p := s.recordPath(dirQueued, jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now()).ID)
	nf, err := s.fs.WriteNew(p, s.tmpDir, []byte("new"), s.filePerm)
	require.NoError(t, err)
	require.GreaterOrEqual(t, nf.fd, 0)
	q := filepath.Join(dir, dirQueued)
	require.NoError(t, os.Rename(q, q+".moved"))
	require.NoError(t, os.Mkdir(q, 0o700))
	err = s.fs.PlaceNew(nf)
	require.ErrorIs(t, err, errSwapped)
	require.NoFileExists(t, p)
	require.NoFileExists(t, filepath.Join(q+".moved", filepath.Base(p)))
	// A file without a name may be made while its directory is swapped:
	// nothing can reach it, and it is never named.
	nf, err = s.fs.WriteNew(p, s.tmpDir, []byte("new"), s.filePerm)
	require.NoError(t, err)
	err = s.fs.PlaceNew(nf)
	require.True(t, errors.Is(err, errSwapped), "%v", err)
	require.NoFileExists(t, p)
	require.NoFileExists(t, filepath.Join(q+".moved", filepath.Base(p)))
	// So may one whose staging directory was swapped; it is named in the
	// store's own queued/.
	q2 := filepath.Join(dir, dirQueued+".2")
	require.NoError(t, os.Rename(q, q2))
	require.NoError(t, os.Rename(q+".moved", q))
	tmp := s.tmpDir
	require.NoError(t, os.Rename(tmp, tmp+".moved"))
	require.NoError(t, os.Mkdir(tmp, 0o700))
	nf, err = s.fs.WriteNew(p, s.tmpDir, []byte("new"), s.filePerm)
	require.NoError(t, err)
	require.NoError(t, s.fs.PlaceNew(nf))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "new", string(got))
	ents, err := os.ReadDir(tmp + ".moved")
	require.NoError(t, err)
	require.Empty(t, ents, "a file was left in the swapped staging directory")
	require.NoError(t, os.Remove(p)) // not a record
}

// TestMoveOntoStaleCopy: a record that moves into a directory where a
// crash left an older copy of it replaces that copy, for a Complete into
// done/ and a retry into queued/.
func TestMoveOntoStaleCopy(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, t.TempDir(), &Options{Backoff: func(int) time.Duration { return 0 }})
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 2})
	require.NoError(t, err)
	old, err := os.ReadFile(s.recordPath(dirQueued, j.ID))
	require.NoError(t, err)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.recordPath(dirQueued, j.ID), old, 0o600))
	retried, err := s.Complete(ctx, c.Lease(), jobstore.Failed(errors.New("again")))
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, retried.State)
	got, err := s.readRecord(s.recordPath(dirQueued, j.ID), j.ID)
	require.NoError(t, err)
	require.Equal(t, retried.Attempt, got.Job.Attempt, "the stale copy in queued/ stayed")

	c, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.recordPath(dirDone, j.ID), old, 0o600))
	done, err := s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
	got, err = s.readRecord(s.recordPath(dirDone, j.ID), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.Job.State, "the stale copy in done/ stayed")
	require.Empty(t, tempFiles(t, s))
	_, err = os.Lstat(s.recordPath(dirClaimed, j.ID))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestPlaceRecordOverAFile: placeRecord, which names a new file, writes
// over a file already at the record's path (which the reads before a
// move remove as a rule) instead of failing.
func TestPlaceRecordOverAFile(t *testing.T) {
	s := openAt(t, t.TempDir(), nil)
	j := jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now())
	j.State = jobstore.StateCanceled
	p := s.recordPath(dirDone, j.ID)
	require.NoError(t, os.WriteFile(p, []byte("in the way"), 0o600))
	require.NoError(t, s.placeRecord(dirDone, envelope{Format: FormatVersion, Rev: 3, Job: j}, false))
	got, err := s.readRecord(p, j.ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, got.Rev)
	require.Empty(t, tempFiles(t, s))
}

// pendingCheckFS fails every third WriteNew (ENOSPC) and counts the
// records PlaceNew names while their journal entry is not pending, which
// a cover could then pass before the record is durable.
type pendingCheckFS struct {
	fileOps
	s              atomic.Pointer[Store]
	n              atomic.Int64
	placed, unsafe atomic.Int64
}

func (f *pendingCheckFS) WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error) {
	if f.n.Add(1)%3 == 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: unix.ENOSPC}
	}
	return f.fileOps.WriteNew(path, tmpDir, data, perm)
}

func (f *pendingCheckFS) PlaceNew(nf *newFile) error {
	if s := f.s.Load(); s != nil {
		var env envelope
		if err := json.Unmarshal(nf.data, &env); err == nil {
			if ref, ok := parseJournalRef(env.Logged); ok {
				s.jmu.Lock()
				jr := s.jr
				s.jmu.Unlock()
				jr.mu.Lock()
				pending := jr.pending[ref.Off]
				jr.mu.Unlock()
				f.placed.Add(1)
				if !pending {
					f.unsafe.Add(1)
				}
			}
		}
	}
	return f.fileOps.PlaceNew(nf)
}

// TestJournalPendingUntilNamed: a journaled record is named only while its
// entry is pending (no cover may pass it) also when other submits fail
// before their entries are reserved, or end with their ctx meanwhile: a
// failed submit let go of the offset it would have had, which another
// submit's entries had taken by then; and every submit that returned
// without an error has its job.
func TestJournalPendingUntilNamed(t *testing.T) {
	fsys := &pendingCheckFS{fileOps: osFS{}}
	s := openAtFS(t, t.TempDir(), &Options{journalCoverEvery: time.Hour}, fsys)
	requireJournaling(t, s)
	journalFromNow(s)
	fsys.s.Store(s)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids []string
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				ctx, cancel := context.WithCancel(context.Background())
				if g%2 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%40)*10*time.Microsecond)
				}
				j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
				cancel()
				if err == nil {
					mu.Lock()
					ids = append(ids, j.ID)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, fsys.placed.Load(), "no journaled record was named")
	require.Zero(t, fsys.unsafe.Load(), "records named while their entries were not pending, of %d", fsys.placed.Load())
	requireRecords(t, s, ids)
}

// cancelAtSync ends a ctx when a journal's fdatasync returns.
type cancelAtSync struct {
	fileOps
	cancel atomic.Pointer[context.CancelFunc]
}

func (c *cancelAtSync) JournalSync(f *os.File) error {
	err := c.fileOps.JournalSync(f)
	if cancel := c.cancel.Load(); cancel != nil {
		(*cancel)()
	}
	return err
}

// TestJournalNamesAfterCtxEnds: a submit whose ctx ends once its journal
// entries are durable still names its records and succeeds, single and
// batched, as it would have had the ctx ended a moment later.
func TestJournalNamesAfterCtxEnds(t *testing.T) {
	fsys := &cancelAtSync{fileOps: osFS{}}
	s := openAtFS(t, t.TempDir(), &Options{journalCoverEvery: time.Hour}, fsys)
	requireJournaling(t, s)
	journalFromNow(s)
	for _, n := range []int{1, 5} {
		ctx, cancel := context.WithCancel(t.Context())
		fsys.cancel.Store(&cancel)
		specs := make([]jobstore.Spec, n)
		for i := range specs {
			specs[i] = jobstore.Spec{Kind: "k"}
		}
		var ids []string
		if n == 1 {
			j, _, err := s.Submit(ctx, specs[0])
			require.NoError(t, err)
			ids = append(ids, j.ID)
		} else {
			res, err := s.SubmitBatch(ctx, specs)
			require.NoError(t, err)
			for _, r := range res {
				ids = append(ids, r.Job.ID)
			}
		}
		require.Error(t, ctx.Err(), "the ctx did not end inside the submit")
		fsys.cancel.Store(nil)
		requireRecords(t, s, ids)
	}
}

// TestAttributeEventsIgnored: an event that says only that a record's
// attributes changed (a claim's note, a chmod) wakes no watcher of the
// job and sends no refresh to read the record: no record is written in
// place, so nothing could be learnt from it. The events before and after
// it are handled as ever.
func TestAttributeEventsIgnored(t *testing.T) {
	s := openTest(t, &Options{NoSync: true, PollInterval: time.Hour})
	a, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	// A Claim that takes nothing makes the Store a claimer that has read
	// queued/, so that the events of queued/ feed its candidate set.
	_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Kinds: []string{"other"}})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	changed, stop := s.watchJob(a.ID)
	defer stop()

	p := s.recordPath(dirQueued, a.ID)
	require.NoError(t, unix.Setxattr(p, claimNoteXattr, encodeClaimNote(claimNote{Rev: 1, Worker: "w", ClaimedAt: time.Now()}), 0))
	require.NoError(t, os.Chmod(p, 0o600))
	// One watcher handles the events in order: once the next job's is
	// seen, the two before it were handled.
	b, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return seenQueued(s, b.ID) }, 10*time.Second, time.Millisecond, "the next job's event was not handled")
	s.mu.Lock()
	_, pending := s.pending[a.ID]
	s.mu.Unlock()
	require.False(t, pending, "an attribute event marked the record to be read")
	select {
	case <-changed:
		t.Fatal("an attribute event woke the job's watchers")
	default:
	}

	// The rename that follows a claim's note is handled: the job is
	// claimed, and its watchers woken.
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k"}})
	require.NoError(t, err)
	require.Equal(t, a.ID, c.ID)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the claim's rename did not wake the job's watchers")
	}
}
