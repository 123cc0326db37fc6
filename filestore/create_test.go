package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// opLog is the real file operations, recording the directories made, the
// files written and the directories fsynced, in order, with their paths.
type opLog struct {
	fileOps
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *opLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.ops
	l.ops = nil
	return out
}

func (l *opLog) Mkdir(dir string, perm os.FileMode) error {
	l.add("mkdir " + dir)
	return l.fileOps.Mkdir(dir, perm)
}

func (l *opLog) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	l.add("write " + path)
	return l.fileOps.WriteFile(path, tmpDir, data, perm, sync)
}

func (l *opLog) SyncDir(dir string) error {
	l.add("fsync " + dir)
	return l.fileOps.SyncDir(dir)
}

// syncedAfter requires that ops has "fsync dir" after the operation made.
func syncedAfter(t *testing.T, ops []string, made, dir string) {
	t.Helper()
	i := slices.Index(ops, made)
	require.GreaterOrEqual(t, i, 0, "no %q in %v", made, ops)
	require.Contains(t, ops[i+1:], "fsync "+dir, "%q is not followed by an fsync of %s: %v", made, dir, ops)
}

// TestCreateIsDurable: Open of a new store fsyncs the parent of every
// directory it makes, the store's own and those above it, and the store's
// directory after its state directories and after FORMAT, all before it
// returns; FORMAT comes last, so that a store with FORMAT is complete. An
// existing empty directory (a volume's mount point) becomes a store the
// same way. An Open of an existing store fsyncs nothing.
func TestCreateIsDurable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exists bool
	}{{"NewDirectory", false}, {"EmptyDirectory", true}} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "a", "b", "store")
			if tc.exists {
				require.NoError(t, os.MkdirAll(dir, 0o700))
			}
			l := &opLog{fileOps: osFS{}}
			s, err := open(t.Context(), dir, &Options{RecoverInterval: time.Hour}, l)
			require.NoError(t, err)
			ops := l.take()
			if !tc.exists {
				syncedAfter(t, ops, "mkdir "+dir, filepath.Dir(dir))
				// Made by os.MkdirAll, outside the seam, before the store's.
				require.Contains(t, ops, "fsync "+filepath.Join(base, "a"))
				require.Contains(t, ops, "fsync "+base)
			}
			for _, d := range []string{dirTmp, dirQueued, dirClaimed, dirDone, dirKeys, dirLocks} {
				syncedAfter(t, ops, "mkdir "+filepath.Join(dir, d), dir)
				require.Less(t, slices.Index(ops, "mkdir "+filepath.Join(dir, d)), slices.Index(ops, "write "+filepath.Join(dir, formatFile)),
					"FORMAT written before %s/: %v", d, ops)
			}
			syncedAfter(t, ops, "write "+filepath.Join(dir, formatFile), dir)
			require.FileExists(t, filepath.Join(dir, createLockFile))
			require.NoError(t, s.Close())

			s, err = open(t.Context(), dir, &Options{RecoverInterval: time.Hour}, l)
			require.NoError(t, err)
			for _, op := range l.take() {
				require.False(t, strings.HasPrefix(op, "fsync ") || strings.HasPrefix(op, "write "), "an Open of an existing store: %s", op)
			}
			require.NoError(t, s.Close())
		})
	}
}

// TestCreateCrashAtEveryStep: a process that dies at any step of creating
// a store leaves a directory that IsStore accepts and holds no other
// files, so the command does not refuse it; the next Open finishes the
// store, and it is sound.
func TestCreateCrashAtEveryStep(t *testing.T) {
	steps := 0
	for failAt := 1; ; failAt++ {
		require.Less(t, failAt, 50, "Open never finishes")
		dir := filepath.Join(t.TempDir(), "store")
		ffs := &faultFS{inner: osFS{}}
		ffs.arm(failAt, true, errCrashed)
		s, err := open(t.Context(), dir, &Options{RecoverInterval: time.Hour}, ffs)
		ffs.mu.Lock()
		hit, ops := ffs.hit, ffs.ops
		ffs.mu.Unlock()
		if !hit {
			require.NoError(t, err)
			require.NoError(t, s.Close())
			break
		}
		steps++
		require.Error(t, err, "crash at %v", ops)
		if _, err := os.Stat(dir); err == nil {
			is, err := IsStore(dir)
			require.NoError(t, err)
			names, err := OtherFiles(dir, 4)
			require.NoError(t, err)
			require.True(t, is || len(names) == 0, "after a crash at %v: not a store, and holds %v", ops, names)
		}
		s, err = Open(t.Context(), dir, &Options{NoSync: true, RecoverInterval: time.Hour})
		require.NoError(t, err, "reopen after a crash at %v", ops)
		r, err := s.Fsck(t.Context(), false)
		require.NoError(t, err)
		require.True(t, r.OK(), "after a crash at %v: %v", ops, r.Problems)
		require.NoError(t, s.Close())
		is, err := IsStore(dir)
		require.NoError(t, err)
		require.True(t, is)
	}
	t.Logf("%d steps", steps)
	require.Positive(t, steps)
}

// TestCreateInterrupted: a directory left by a process that died while it
// created a store (the creation lock and the state directories, no
// FORMAT) is a store to IsStore and has no other files; Open finishes it.
func TestCreateInterrupted(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{dirTmp, dirQueued, dirLocks} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, createLockFile), nil, 0o600))
	is, err := IsStore(dir)
	require.NoError(t, err)
	require.True(t, is)
	names, err := OtherFiles(dir, 4)
	require.NoError(t, err)
	require.Empty(t, names)
	s := openAt(t, dir, &Options{NoSync: true})
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, formatFile))
}

// TestCreateConcurrentOpens: Opens of one new store at once, in one
// process, all succeed and make one store.
func TestCreateConcurrentOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			s, err := Open(t.Context(), dir, &Options{RecoverInterval: time.Hour})
			if err == nil {
				_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
				_ = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	s := openAt(t, dir, &Options{NoSync: true})
	page, err := s.List(t.Context(), jobstore.ListOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Jobs, len(errs))
}

// TestCreateWaitEndsWithCtx: an Open that finds a store being created
// waits for its creator, and a ctx that ends ends the wait (a creator
// stopped while it holds the creation lock); once the lock is free, Open
// creates the store.
func TestCreateWaitEndsWithCtx(t *testing.T) {
	dir := t.TempDir()
	held := flock.New(filepath.Join(dir, createLockFile))
	ok, err := held.TryLock()
	require.NoError(t, err)
	require.True(t, ok)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = Open(ctx, dir, &Options{NoSync: true})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.NoFileExists(t, filepath.Join(dir, formatFile))
	require.NoError(t, held.Unlock())
	openAt(t, dir, &Options{NoSync: true})
	require.FileExists(t, filepath.Join(dir, formatFile))
}
