package filestore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	for _, tc := range []struct {
		name       string
		note       func(t *testing.T, s *Store, id string)
		wantWorker string
	}{
		{"NoteKept", func(*testing.T, *Store, string) {}, "w"},
		{"NoteEmpty", func(t *testing.T, s *Store, id string) {
			require.NoError(t, os.WriteFile(s.leasePath(id), nil, 0o600))
		}, lostWorker},
		{"NoteOfAnotherRevision", func(t *testing.T, s *Store, id string) {
			n, ok := s.readClaimNote(id)
			require.True(t, ok)
			n.Rev++
			require.NoError(t, osFS{}.Overwrite(s.leasePath(id), mustJSON(t, n))) // s is closed
		}, lostWorker},
		{"NoteGarbage", func(t *testing.T, s *Store, id string) {
			require.NoError(t, os.WriteFile(s.leasePath(id), []byte("\x00\x00\x00"), 0o600))
		}, lostWorker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
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
// would take back: the renames whose target directory no fsync (nor
// syncfs) has covered since, and the claim notes written in place, which
// nothing fsyncs. cut takes them back, as the disk would have them after
// the power came back.
type powerCutFS struct {
	fileOps
	mu         sync.Mutex
	renames    [][2]string
	overwrites []string
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

func (f *powerCutFS) Overwrite(p string, data []byte) error {
	f.mu.Lock()
	f.overwrites = append(f.overwrites, p)
	f.mu.Unlock()
	return f.fileOps.Overwrite(p, data)
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
	f.renames, f.overwrites = nil, nil
	f.mu.Unlock()
}

// cut takes back what was not made durable.
func (f *powerCutFS) cut(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range slices.Backward(f.renames) {
		require.NoError(t, os.Rename(r[1], r[0]))
	}
	for _, p := range f.overwrites {
		require.NoError(t, os.Truncate(p, 0))
	}
	f.renames, f.overwrites = nil, nil
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
