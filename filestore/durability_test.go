package filestore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestGroupSync: concurrent callers share fsyncs, every caller is covered
// by an fsync that started after it arrived, and a failed fsync is
// reported to every caller it covered.
func TestGroupSync(t *testing.T) {
	g := newGroupSync()
	var calls, inFlight atomic.Int32
	var mu sync.Mutex
	changes := 0 // "directory changes" made so far
	synced := 0  // changes covered by the last finished fsync
	fsync := func() error {
		assert.Equal(t, int32(1), inFlight.Add(1), "fsyncs overlap")
		defer inFlight.Add(-1)
		calls.Add(1)
		mu.Lock()
		upTo := changes
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		synced = max(synced, upTo)
		mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	const n = 64
	for range n {
		wg.Go(func() {
			mu.Lock()
			changes++
			mine := changes
			mu.Unlock()
			assert.NoError(t, g.sync(fsync)) // assert: not on the test goroutine
			mu.Lock()
			assert.GreaterOrEqual(t, synced, mine, "returned before its change was synced")
			mu.Unlock()
		})
	}
	wg.Wait()
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
var ext4Disk = fsInfo{Type: 0xef53, BlockDev: true}

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
	return loggedSyncer{sy, l}, nil
}

type loggedSyncer struct {
	syncer
	l *syncLog
}

func (s loggedSyncer) Sync() error {
	s.l.add("syncfs")
	return s.syncer.Sync()
}

// TestDurabilityModes: the three modes of durability, seen in the file
// operations of a Submit and of a large SubmitBatch. fsync (the default)
// renames the new file into place, then fsyncs it and its directory (one
// journal commit for both, see durability.placed), or makes one syncfs
// for a large batch;
// shared syncfs (Options.SyncFS) fsyncs no file and makes one syncfs
// instead of the directory's fsync; NoSync flushes nothing.
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
		{"Fsync", Options{}, []string{"file sync=false", "fsync file", "fsync queued/"}, true, "file sync=false"},
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
			s := openAtFS(t, t.TempDir(), &opts, l)
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
			if !tc.opts.NoSync && !tc.opts.SyncFS {
				require.Contains(t, got, "fsync queued/")
			}
			if tc.opts.NoSync || tc.opts.SyncFS {
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
		{Type: 0x65735546},                 // FUSE
		{Type: 0x12345678, BlockDev: true}, // unknown
		{Type: 0xef53},                     // ext4 on no block device
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
		{Options{}, "fsync: each new file and each changed directory, and a batch of 32 jobs or more with one syncfs(2) of the store's file system (ext4)"},
		{Options{SyncFS: true}, "syncfs: one syncfs(2) of the store's file system (ext4)"},
		{Options{NoSync: true}, "none (NoSync)"},
	} {
		opts := tc.opts
		opts.RecoverInterval = time.Hour
		s := openAtFS(t, t.TempDir(), &opts, &syncLog{fileOps: osFS{}, info: &ext4Disk})
		require.Contains(t, s.Durability(), tc.want)
	}
}
