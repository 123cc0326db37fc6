package filestore

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// flushCoverage checks that a group of flushes covers its callers: each
// caller makes a change and waits, and must not return before a flush
// that began after its change has finished.
type flushCoverage struct {
	mu sync.Mutex
	// changes counts the changes made so far, synced those covered by the
	// last finished flush.
	changes, synced int
	inFlight        atomic.Int32
}

// flushed is one flush taking took: it covers the changes made before it
// began. Two flushes at once fail t.
func (c *flushCoverage) flushed(t *testing.T, took time.Duration) {
	assert.Equal(t, int32(1), c.inFlight.Add(1), "flushes overlap")
	defer c.inFlight.Add(-1)
	c.mu.Lock()
	upTo := c.changes
	c.mu.Unlock()
	time.Sleep(took)
	c.mu.Lock()
	c.synced = max(c.synced, upTo)
	c.mu.Unlock()
}

// callers runs n callers at once, each making a change and then calling
// wait, and fails t if one returns an error or returns before a flush
// covered its change.
func (c *flushCoverage) callers(t *testing.T, n int, wait func() error) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c.mu.Lock()
			c.changes++
			mine := c.changes
			c.mu.Unlock()
			assert.NoError(t, wait()) // assert: not on the test goroutine
			c.mu.Lock()
			assert.GreaterOrEqual(t, c.synced, mine, "returned before a flush covered its change")
			c.mu.Unlock()
		})
	}
	wg.Wait()
}

// TestGroupSync: concurrent callers share fsyncs, every caller is covered
// by an fsync that started after it arrived, and a failed fsync is
// reported to every caller it covered.
func TestGroupSync(t *testing.T) {
	g := newGroupSync()
	var cov flushCoverage
	var calls atomic.Int32
	fsync := func() error {
		calls.Add(1)
		cov.flushed(t, 2*time.Millisecond)
		return nil
	}
	const n = 64
	cov.callers(t, n, func() error { return g.sync(fsync) })
	require.Less(t, calls.Load(), int32(n), "no fsync was shared")
	t.Logf("%d callers, %d fsyncs", n, calls.Load())

	boom := errors.New("EIO")
	require.ErrorIs(t, g.sync(func() error { return boom }), boom)
	require.NoError(t, g.sync(func() error { return nil }), "a later fsync is not failed by an earlier one")
}

// syncLog is the real file operations, recording which new files are
// fsynced, which directories fsynced and which syncfs(2) made. With info
// set, FSInfo tells that file system instead of the real one.
type syncLog struct {
	fileOps
	info *fsInfo
	mu   sync.Mutex
	log  []string
}

func (l *syncLog) FSInfo(dir string) (fsInfo, error) {
	if l.info != nil {
		return *l.info, nil
	}
	return l.fileOps.FSInfo(dir)
}

// ext4Disk is what FSInfo tells of ext4 on a block device, where a syncfs
// reaches the disk.
var ext4Disk = fsInfo{Type: 0xef53, BlockDev: true, Kernel: "6.1.0"}

func (l *syncLog) add(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *syncLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.log
	l.log = nil
	return out
}

func (l *syncLog) WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error) {
	l.add(fmt.Sprintf("file sync=%v", sync))
	return l.fileOps.WriteTemp(tmpDir, data, perm, sync)
}

func (l *syncLog) WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error) {
	l.add("file sync=false")
	return l.fileOps.WriteNew(path, tmpDir, data, perm)
}

func (l *syncLog) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	l.add(fmt.Sprintf("rewrite sync=%v", sync))
	return l.fileOps.WriteFile(path, tmpDir, data, perm, sync)
}

func (l *syncLog) JournalWrite(f *os.File, data []byte, off int64) error {
	l.add("journal-write")
	return l.fileOps.JournalWrite(f, data, off)
}

func (l *syncLog) JournalSync(f *os.File) error {
	l.add("journal-sync")
	return l.fileOps.JournalSync(f)
}

func (l *syncLog) SyncFile(path string) error {
	l.add("fsync file")
	return l.fileOps.SyncFile(path)
}

func (l *syncLog) SyncDir(dir string) error {
	l.add("fsync " + filepath.Base(dir) + "/")
	return l.fileOps.SyncDir(dir)
}

func (l *syncLog) SyncFS(dir string) (syncer, error) {
	sy, err := l.fileOps.SyncFS(dir)
	if err != nil {
		return nil, err
	}
	return hookedSyncer{sy, func() error { l.add("syncfs"); return nil }}, nil
}

// hookedSyncer runs before ahead of each Sync, which fails with its error.
type hookedSyncer struct {
	syncer
	before func() error
}

func (s hookedSyncer) Sync() error {
	if err := s.before(); err != nil {
		return err
	}
	return s.syncer.Sync()
}

// TestDurabilityModes: the three modes of durability, seen in the file
// operations of a Submit and of a large SubmitBatch. fsync (the default)
// renames the new file into place, then fsyncs it and its directory (one
// journal commit for both, see durability.placed), or makes one syncfs
// for a large batch;
// shared syncfs (Options.SyncFS) fsyncs no file and makes one syncfs
// instead of the directory's fsync; NoSync flushes nothing. With its
// submission journal (fsync mode where a syncfs reaches the disk), a
// submit of a job without a key writes its record unsynced and makes only
// its journal entry durable, with one fdatasync, and so does a batch.
func TestDurabilityModes(t *testing.T) {
	batch := make([]jobstore.Spec, syncFSBatch)
	for i := range batch {
		batch[i] = jobstore.Spec{Kind: "k"}
	}
	for _, tc := range []struct {
		name        string
		opts        Options
		submit      []string
		batchSyncFS bool
		batchFile   string
	}{
		{"Fsync", Options{noJournal: true}, []string{"file sync=false", "fsync file", "fsync queued/"}, true, "file sync=false"},
		{"Journal", Options{}, []string{"file sync=false", "journal-write", "journal-sync"}, false, "file sync=false"},
		{"SyncFS", Options{SyncFS: true}, []string{"file sync=false", "syncfs"}, true, "file sync=false"},
		{"NoSync", Options{NoSync: true}, []string{"file sync=false"}, false, "file sync=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.SyncFS && runtime.GOOS != "linux" {
				t.Skip("syncfs(2) is Linux only")
			}
			l := &syncLog{fileOps: osFS{}, info: &ext4Disk}
			opts := tc.opts
			opts.RecoverInterval = time.Hour
			opts.journalCoverEvery = time.Hour
			s := openAtFS(t, t.TempDir(), &opts, l)
			if tc.name == "Journal" {
				// A submit after the first takes a journal: made, written,
				// fsynced.
				journalFromNow(s)
				_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
				require.NoError(t, err)
				require.NotNil(t, s.jr)
			}
			l.take()
			_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			require.Equal(t, tc.submit, l.take())

			_, err = s.SubmitBatch(t.Context(), batch)
			require.NoError(t, err)
			got := l.take()
			for _, op := range got {
				if strings.HasPrefix(op, "file ") {
					require.Equal(t, tc.batchFile, op)
				}
			}
			require.Equal(t, tc.batchSyncFS, slices.Contains(got, "syncfs"), "%v", got)
			if tc.name == "Fsync" {
				require.Contains(t, got, "fsync queued/")
			}
			if tc.name == "Journal" {
				require.Equal(t, []string{"journal-write", "journal-sync"}, slices.DeleteFunc(got, func(op string) bool { return op == "file sync=false" }))
			}
			if tc.opts.NoSync || tc.opts.SyncFS || tc.name == "Journal" {
				for _, op := range got {
					require.False(t, strings.HasPrefix(op, "fsync "), "%v", got)
				}
			}
		})
	}
}

// TestNoSyncFSOnUnknownFS: on a file system where a syncfs(2) is not known
// to reach the disk (FUSE, whose daemon never sees a syncfs; a file system
// of unknown type; ext4 not on a block device) no durability rests on a
// syncfs: a Submit and a large SubmitBatch fsync every new file and each
// directory, also under Options.SyncFS, which says why in the log, and
// Durability says so.
func TestNoSyncFSOnUnknownFS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the file system is told only on Linux")
	}
	batch := make([]jobstore.Spec, syncFSBatch)
	for i := range batch {
		batch[i] = jobstore.Spec{Kind: "k"}
	}
	for _, fi := range []fsInfo{
		{Type: 0x65735546},                               // FUSE
		{Type: 0x12345678, BlockDev: true},               // unknown
		{Type: 0xef53},                                   // ext4 on no block device
		{Type: 0xef53, BlockDev: true, Kernel: "5.10.0"}, // a kernel whose syncfs drops errors
	} {
		for _, syncFS := range []bool{false, true} {
			t.Run(fmt.Sprintf("%#x/SyncFS=%v", fi.Type, syncFS), func(t *testing.T) {
				l := &syncLog{fileOps: osFS{}, info: &fi}
				logs := &logBuffer{}
				s := openAtFS(t, t.TempDir(), &Options{SyncFS: syncFS, RecoverInterval: time.Hour,
					Logger: slog.New(slog.NewTextHandler(logs, nil))}, l)
				if syncFS {
					require.Contains(t, logs.String(), "Options.SyncFS is not used")
					require.Contains(t, logs.String(), "not known to reach the disk")
				}
				require.Contains(t, s.Durability(), "never syncfs(2)")
				l.take()
				_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "a"})
				require.NoError(t, err)
				require.Equal(t, []string{"file sync=false", "fsync file", "fsync keys/", "fsync queued/"}, l.take())

				_, err = s.SubmitBatch(t.Context(), batch)
				require.NoError(t, err)
				got := l.take()
				require.NotContains(t, got, "syncfs")
				require.Contains(t, got, "fsync queued/")
				files := 0
				for _, op := range got {
					if strings.HasPrefix(op, "file ") {
						require.Equal(t, "file sync=true", op)
						files++
					}
				}
				require.Equal(t, len(batch), files)
			})
		}
	}
}

// TestDurabilityReported: Durability names the mode Open chose.
func TestDurabilityReported(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("syncfs(2) is Linux only")
	}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "fsync: each new file and each changed directory; a batch of 32 jobs or more, and the new records of operations that wait at the same moment, with one syncfs(2) of the store's file system (ext4), shared with the store's other processes; a submit of a job without a key through a submission journal"},
		{Options{SyncFS: true}, "syncfs: one syncfs(2) of the store's file system (ext4)"},
		{Options{NoSync: true}, "none (NoSync)"},
	} {
		opts := tc.opts
		opts.RecoverInterval = time.Hour
		s := openAtFS(t, t.TempDir(), &opts, &syncLog{fileOps: osFS{}, info: &ext4Disk})
		require.Contains(t, s.Durability(), tc.want)
	}
}

// TestFlushGroup: a caller alone gets a flush of its own; the callers that
// arrive while a flush runs are covered together by the next one, which
// begins after each of them arrived; each gets the error of the flush
// that covered it, and a failed flush fails no later caller.
func TestFlushGroup(t *testing.T) {
	g := newFlushGroup()
	var cov flushCoverage
	var ones, alls atomic.Int32
	one := func(*flushWaiter) error {
		ones.Add(1)
		cov.flushed(t, time.Millisecond)
		return nil
	}
	all := func([]*flushWaiter) error {
		alls.Add(1)
		cov.flushed(t, time.Millisecond)
		return nil
	}
	const n = 64
	cov.callers(t, n, func() error { return g.flush(&flushWaiter{}, one, all) })
	require.Positive(t, alls.Load(), "no flush was shared")
	require.Less(t, ones.Load()+alls.Load(), int32(n), "no flush was shared")
	t.Logf("%d callers: %d flushes of one, %d of several", n, ones.Load(), alls.Load())

	// A lone caller flushes its own file.
	ones.Store(0)
	require.NoError(t, g.flush(&flushWaiter{path: "p"}, func(w *flushWaiter) error {
		require.Equal(t, "p", w.path)
		return one(w)
	}, all))
	require.Equal(t, int32(1), ones.Load())

	// A failed flush of several fails exactly the callers it covered.
	boom := errors.New("EIO")
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- g.flush(&flushWaiter{}, func(*flushWaiter) error { <-release; return nil }, all)
	}()
	waitPending := func(k int) {
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.running && len(g.pending) == k
		}, 10*time.Second, time.Millisecond)
	}
	waitPending(0)
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- g.flush(&flushWaiter{}, one, func([]*flushWaiter) error { return boom }) }()
	}
	waitPending(3)
	close(release)
	require.NoError(t, <-first, "the flush of the first caller succeeded")
	for range 3 {
		require.ErrorIs(t, <-errs, boom)
	}
	require.NoError(t, g.flush(&flushWaiter{}, one, all), "a later flush is not failed by an earlier one")
}

// flushGate, once armed, holds the first fsync of a new file until release
// is closed, so that the operations that come meanwhile wait together for
// the next flush; it fails every syncfs while failSyncFS is set, and every
// later fsync of a file while failFsync is.
type flushGate struct {
	fileOps
	armed      atomic.Bool
	once       sync.Once
	held       chan struct{} // closed once the first fsync of a file waits
	release    chan struct{}
	failSyncFS atomic.Bool
	failFsync  atomic.Bool
}

func newFlushGate() *flushGate {
	return &flushGate{fileOps: osFS{}, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *flushGate) SyncFile(path string) error {
	first := false
	if g.armed.Load() {
		g.once.Do(func() { first = true })
	}
	if first {
		close(g.held)
		<-g.release
	} else if g.failFsync.Load() {
		return &os.PathError{Op: "sync", Path: path, Err: syscall.EIO}
	}
	return g.fileOps.SyncFile(path)
}

func (g *flushGate) SyncFS(dir string) (syncer, error) {
	sy, err := g.fileOps.SyncFS(dir)
	if err != nil {
		return nil, err
	}
	return hookedSyncer{sy, func() error {
		if g.failSyncFS.Load() {
			return &os.PathError{Op: "syncfs", Path: "(test)", Err: syscall.EIO}
		}
		return nil
	}}, nil
}

// gateMoves runs op n times at once on s: the first holds its flush at
// gate until the other n-1 wait in s's flush group, so that one flush
// covers them. It returns the errors in the order of the calls. A flush of
// claimed/ by the claim flusher, which may join the group when it likes,
// is not counted.
func gateMoves(t *testing.T, s *Store, gate *flushGate, n int, op func(i int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate.armed.Store(true)
	wg.Go(func() { errs[0] = op(0) })
	<-gate.held
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = op(i) })
	}
	require.Eventually(t, func() bool { return pendingFiles(s) == n-1 }, 10*time.Second, time.Millisecond)
	close(gate.release)
	wg.Wait()
	return errs
}

// onlyFirstSubmitted checks what gateMoves's Submits leave when the
// group's flush failed: the first, which flushed alone, succeeded; the
// others failed with EIO, and only the first's job exists. what names the
// failed flush.
func onlyFirstSubmitted(t *testing.T, s *Store, errs []error, what string) {
	t.Helper()
	require.NoError(t, errs[0], "the first Submit flushed alone")
	for i, err := range errs[1:] {
		require.ErrorIs(t, err, syscall.EIO, "submit %d", i+1)
	}
	page, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1, "a Submit whose %s failed left its job", what)
}

// runningJobs submits and claims n jobs on s and returns their leases,
// once the claims' flush is over: no other comes, so the claim flusher
// does not join the groups of what the test does next.
func runningJobs(t *testing.T, s *Store, n int) []jobstore.Lease {
	t.Helper()
	var leases []jobstore.Lease
	for range n {
		_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		leases = append(leases, j.Lease())
	}
	require.NoError(t, s.waitClaimsDurable(t.Context()))
	return leases
}

// pendingFiles counts the callers with a new file that wait in s's flush
// group for the next flush.
func pendingFiles(s *Store) int {
	g := s.durable.moves
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, w := range g.pending {
		if w.path != "" {
			n++
		}
	}
	return n
}

// TestMovesShareSyncFS: in the default mode, on a file system where a
// syncfs(2) reaches the disk, the new records of Submits and Completes
// that wait at the same moment are made durable by one syncfs instead of
// two fsyncs each, while one alone fsyncs its record and directory; a
// failed syncfs fails each operation it covered as a failed fsync would:
// a Submit creates no job, a Complete returns jobstore.ErrNotDurable and a
// retry with the same lease ends the attempt.
func TestMovesShareSyncFS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("syncfs(2) is Linux only")
	}
	const n = 6
	spec := jobstore.Spec{Kind: "k"}
	open := func(t *testing.T) (*Store, *syncLog, *flushGate) {
		gate := newFlushGate()
		l := &syncLog{fileOps: gate, info: &ext4Disk}
		s := openAtFS(t, t.TempDir(), &Options{RecoverInterval: time.Hour, noJournal: true}, l)
		require.NotNil(t, s.durable.moves, "no shared flush of moves on ext4")
		l.take()
		return s, l, gate
	}
	// flushes are the fsyncs and syncfs in ops, but for the claim
	// flusher's fsyncs of claimed/, which come when they come.
	flushes := func(ops []string) (got []string) {
		for _, op := range ops {
			if op == "syncfs" || strings.HasPrefix(op, "fsync ") && op != "fsync claimed/" {
				got = append(got, op)
			}
		}
		return got
	}

	t.Run("Submit", func(t *testing.T) {
		s, l, gate := open(t)
		for i, err := range gateMoves(t, s, gate, n, func(int) error { _, _, err := s.Submit(t.Context(), spec); return err }) {
			require.NoError(t, err, "submit %d", i)
		}
		require.Equal(t, []string{"fsync file", "fsync queued/", "syncfs"}, flushes(l.take()))
		page, err := s.List(t.Context(), jobstore.ListOptions{})
		require.NoError(t, err)
		require.Len(t, page.Jobs, n)
	})

	t.Run("ClaimJoins", func(t *testing.T) {
		// The claim flusher joins the group: a claim made while a
		// Submit's flush is held is made durable by the next group's
		// syncfs, with no fsync of claimed/ of its own.
		s, l, gate := open(t)
		_, _, err := s.Submit(t.Context(), spec)
		require.NoError(t, err)
		l.take()
		gate.armed.Store(true)
		var wg sync.WaitGroup
		submit := func() {
			_, _, err := s.Submit(t.Context(), spec)
			assert.NoError(t, err)
		}
		wg.Go(submit)
		<-gate.held
		_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			g := s.durable.moves
			g.mu.Lock()
			defer g.mu.Unlock()
			return slices.ContainsFunc(g.pending, func(w *flushWaiter) bool { return w.path == "" && w.dir == dirClaimed })
		}, 10*time.Second, time.Millisecond, "the claim flusher did not join the group")
		for range n - 2 {
			wg.Go(submit)
		}
		require.Eventually(t, func() bool { return pendingFiles(s) == n-2 }, 10*time.Second, time.Millisecond)
		close(gate.release)
		wg.Wait()
		require.NoError(t, s.waitClaimsDurable(t.Context()))
		ops := l.take()
		require.Equal(t, []string{"fsync file", "fsync queued/", "syncfs"}, flushes(ops))
		require.NotContains(t, ops, "fsync claimed/", "the claim was fsynced apart from the group")
	})

	t.Run("SubmitFails", func(t *testing.T) {
		s, _, gate := open(t)
		gate.failSyncFS.Store(true)
		errs := gateMoves(t, s, gate, n, func(i int) error {
			_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: fmt.Sprint("key-", i)})
			return err
		})
		onlyFirstSubmitted(t, s, errs, "syncfs")
		require.False(t, s.durable.cost.useSyncFS(time.Now().Add(time.Hour)), "a syncfs used after one failed")
		gate.failSyncFS.Store(false)
		for i := 1; i < n; i++ {
			_, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: fmt.Sprint("key-", i)})
			require.NoError(t, err)
			require.True(t, created, "the key of a failed Submit stayed taken")
		}
	})

	t.Run("SharedWithOtherProcesses", func(t *testing.T) {
		// A group's syncfs goes through locks/syncfs (syncShare), which
		// it opens at the first: here its lock is held by a process that
		// does not let go, so the group flushes alone, and a later group
		// opens it and notes its syncfs there for the others.
		s, l, gate := open(t)
		p := s.locksPath(syncShareName)
		fd, err := openSharedFile(p, 0o644)
		require.NoError(t, err)
		defer syscall.Close(fd)
		require.NoError(t, syscall.Flock(fd, syscall.LOCK_EX))
		for i, err := range gateMoves(t, s, gate, n, func(int) error { _, _, err := s.Submit(t.Context(), spec); return err }) {
			require.NoError(t, err, "submit %d", i)
		}
		require.Equal(t, []string{"fsync file", "fsync queued/", "syncfs"}, flushes(l.take()))
		require.Nil(t, s.durable.share.Load())
		require.False(t, s.durable.shareJoin.IsZero(), "no later try to share")
		require.NoError(t, syscall.Flock(fd, syscall.LOCK_UN))
		s.durable.shareJoin = time.Time{} // a second later
		gate = newFlushGate()
		l.fileOps = gate
		for i, err := range gateMoves(t, s, gate, n, func(int) error { _, _, err := s.Submit(t.Context(), spec); return err }) {
			require.NoError(t, err, "submit %d", i)
		}
		require.Equal(t, []string{"fsync file", "fsync queued/", "syncfs"}, flushes(l.take()))
		sh := s.durable.share.Load()
		require.NotNil(t, sh, "the Store did not share its flushes")
		st := readShare(t, s.dir)
		require.Equal(t, sh.opened, st.doneBy)
		require.Equal(t, st.started, st.done)
	})

	t.Run("SharedSyncFSOpenedAfterTheRecords", func(t *testing.T) {
		// Submits (or Completes) that wait in a group, their records
		// written, while another process opens the store and makes a
		// syncfs: it began after their call, but its descriptor was
		// opened after their records were written, so the group makes a
		// syncfs of its own (each notes its mark before it writes).
		for _, tc := range []struct {
			name string
			dir  string // where the records go
			op   func(s *Store) func(i int) error
		}{
			{"Submit", "queued/", func(s *Store) func(int) error {
				return func(int) error { _, _, err := s.Submit(t.Context(), spec); return err }
			}},
			{"Complete", "done/", func(s *Store) func(int) error {
				leases := runningJobs(t, s, 2*n)
				next := 0
				var mu sync.Mutex
				return func(int) error {
					mu.Lock()
					l := leases[next]
					next++
					mu.Unlock()
					_, err := s.Complete(t.Context(), l, jobstore.Succeeded(nil))
					return err
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, l, gate := open(t)
				op := tc.op(s)
				for i, err := range gateMoves(t, s, gate, n, op) {
					require.NoError(t, err, "%s %d", tc.name, i)
				}
				sh := s.durable.share.Load()
				require.NotNil(t, sh)
				l.take()

				gate = newFlushGate()
				l.fileOps = gate
				errs := make([]error, n)
				var wg sync.WaitGroup
				gate.armed.Store(true)
				wg.Go(func() { errs[0] = op(0) })
				recv(t, gate.held)
				for i := 1; i < n; i++ {
					wg.Go(func() { errs[i] = op(i) })
				}
				require.Eventually(t, func() bool { return pendingFiles(s) == n-1 }, 10*time.Second, time.Millisecond)
				otherOwn := &countSyncer{}
				other := joinShare(t, s.dir, otherOwn)
				ok, err := other.tryLock()
				require.NoError(t, err)
				require.True(t, ok)
				waited := waits(sh)
				close(gate.release)
				recv(t, waited)
				require.NoError(t, leadFlush(other, readShare(t, s.dir).started, math.MaxUint64))
				wg.Wait()
				for i, err := range errs {
					require.NoError(t, err, "%s %d", tc.name, i)
				}
				require.EqualValues(t, 1, otherOwn.calls.Load())
				require.Equal(t, []string{"fsync file", "fsync " + tc.dir, "syncfs"}, flushes(l.take()),
					"the group counted on a syncfs whose descriptor was opened after its records were written")
			})
		}
	})

	t.Run("SlowSyncFS", func(t *testing.T) {
		// After a slow syncfs, a group fsyncs each file, and its
		// directory once.
		s, l, gate := open(t)
		s.durable.cost.fsyncUntil = time.Now().Add(time.Hour)
		for i, err := range gateMoves(t, s, gate, n, func(int) error { _, _, err := s.Submit(t.Context(), spec); return err }) {
			require.NoError(t, err, "submit %d", i)
		}
		want := []string{"fsync file", "fsync queued/"}
		for range n - 1 {
			want = append(want, "fsync file")
		}
		require.Equal(t, append(want, "fsync queued/"), flushes(l.take()))
	})

	t.Run("SlowSyncFSFsyncFails", func(t *testing.T) {
		// A failed fsync of one file of such a group fails the whole
		// group: no job of its Submits is left.
		s, _, gate := open(t)
		s.durable.cost.fsyncUntil = time.Now().Add(time.Hour)
		gate.failFsync.Store(true)
		errs := gateMoves(t, s, gate, n, func(int) error { _, _, err := s.Submit(t.Context(), spec); return err })
		onlyFirstSubmitted(t, s, errs, "fsync")
	})

	t.Run("Complete", func(t *testing.T) {
		s, l, gate := open(t)
		leases := runningJobs(t, s, n)
		l.take()
		gate.failSyncFS.Store(true)
		errs := gateMoves(t, s, gate, n, func(i int) error {
			_, err := s.Complete(t.Context(), leases[i], jobstore.Succeeded(nil))
			return err
		})
		require.Equal(t, []string{"fsync file", "fsync done/", "syncfs"}, flushes(l.take()))
		require.NoError(t, errs[0], "the first Complete flushed alone")
		for i, err := range errs[1:] {
			require.ErrorIs(t, err, jobstore.ErrNotDurable, "complete %d", i+1)
		}
		gate.failSyncFS.Store(false)
		l.take()
		for i := 1; i < n; i++ {
			j, err := s.Complete(t.Context(), leases[i], jobstore.Succeeded(nil))
			require.NoError(t, err, "the retried Complete")
			require.Equal(t, jobstore.StateSucceeded, j.State)
		}
		// Each retry wrote its record again, fsynced, rather than trust an
		// fsync of the one whose flush failed.
		retried := l.take()
		files := 0
		for _, op := range retried {
			if op == "rewrite sync=true" {
				files++
			}
		}
		require.Equal(t, n-1, files, "%v", retried)
		st, err := s.Stats(t.Context())
		require.NoError(t, err)
		require.Equal(t, n, st.Counts[jobstore.StateSucceeded])
	})
}

// TestFlushCost: syncfs flushes stay in use while a moving average of
// how long they take against fsyncs of their files (a lone flush per
// batchWriters files) stays within syncFSSlowFactor: one late syncfs
// among quick ones does not count, a few slow ones in a row, or one very
// slow one, make groups fsync each file for syncFSBackoff, and after
// that the average starts over; each slow spell with no quick syncfs
// between lasts twice as long as the one before, up to
// syncFSBackoffMax. Before a lone flush was timed, no syncfs is slow.
// After a failed syncfs, groups fsync each file for good.
func TestFlushCost(t *testing.T) {
	var c flushCost
	now := time.Now()
	_, _, slow := c.shared(2, time.Hour, now)
	require.False(t, slow, "slow before any lone flush was timed")
	require.True(t, c.useSyncFS(now))

	c.lone(2 * time.Millisecond)
	c.lone(4 * time.Millisecond)
	lone := 2*time.Millisecond + (2*time.Millisecond)/8
	require.Equal(t, lone, c.loneAvg)
	fsyncs, _, slow := c.shared(2, syncFSSlowFactor*lone, now)
	require.False(t, slow)
	require.Equal(t, lone, fsyncs)
	fsyncs, _, slow = c.shared(batchWriters+1, 2*syncFSSlowFactor*lone, now)
	require.False(t, slow, "a syncfs of more files than are fsynced at once may take longer")
	require.Equal(t, 2*lone, fsyncs)

	// One syncfs in ten ten times too slow, as a journal commit under
	// load makes now and then, is not a slow spell.
	for range 50 {
		for range 9 {
			_, _, slow = c.shared(2, lone, now)
			require.False(t, slow)
		}
		_, _, slow = c.shared(2, 10*lone, now)
		require.False(t, slow, "one late syncfs among quick ones counted as slow")
	}
	require.True(t, c.useSyncFS(now))

	// A few a little too slow in a row are.
	tooSlow := 2 * syncFSSlowFactor * lone
	var backoff time.Duration
	n := 0
	for !slow {
		n++
		require.Less(t, n, 20, "syncfs flushes twice too slow in a row never counted as slow")
		_, backoff, slow = c.shared(2, tooSlow, now)
	}
	require.Greater(t, n, 2, "a syncfs or two a little too slow counted as a slow spell")
	require.Equal(t, syncFSBackoff, backoff)
	require.False(t, c.useSyncFS(now))
	require.False(t, c.useSyncFS(now.Add(syncFSBackoff-time.Millisecond)))
	require.True(t, c.useSyncFS(now.Add(syncFSBackoff)), "no syncfs tried again after the back-off")

	// The average starts over: one very slow syncfs (another program's
	// gigabyte of dirty data) is a slow spell by itself, and each spell
	// with no quick syncfs between lasts twice as long.
	verySlow := 1000 * lone
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		_, backoff, slow = c.shared(2, verySlow, now)
		require.True(t, slow)
		require.Equal(t, want, backoff, "the back-off after slow spells in a row")
	}
	_, backoff, slow = c.shared(2, lone, now)
	require.False(t, slow)
	require.Zero(t, backoff)
	_, backoff, _ = c.shared(2, verySlow, now)
	require.Equal(t, syncFSBackoff, backoff, "a quick syncfs did not end the doubling")

	c.failed()
	require.False(t, c.useSyncFS(now.Add(time.Hour)), "a syncfs used after one failed")
}
