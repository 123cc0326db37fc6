package filestore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// openCostStore makes a closed store in a new directory holding what an
// Open that reads the whole store would act on: keyed jobs, queued and
// finished, a torn key file of a submit a power cut lost, a stale copy of
// a finished job's record left in queued/ by an interrupted move, and the
// old lock file of a job that has no record. It returns the directory,
// a queued job, a finished one and the paths of the three leftovers.
func openCostStore(t *testing.T) (dir string, queued, finished jobstore.Job, torn, stale, orphan string) {
	t.Helper()
	ctx := t.Context()
	dir = t.TempDir()
	s, err := Open(ctx, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err)
	queued, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "queued"})
	require.NoError(t, err)
	finished, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "finished"})
	require.NoError(t, err)
	old, err := os.ReadFile(s.recordPath(dirQueued, finished.ID))
	require.NoError(t, err)
	finished, err = s.Cancel(ctx, finished.ID)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	stale = s.recordPath(dirQueued, finished.ID)
	require.NoError(t, os.WriteFile(stale, old, 0o600))
	torn = s.keyPath(keyName("lost"))
	require.NoError(t, os.WriteFile(torn, nil, 0o600))
	orphan = s.lockPath("01JCXZ8ZQ4V6Y2W0M8R5T3N7PB")
	require.NoError(t, os.WriteFile(orphan, nil, 0o600))
	long := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(orphan, long, long))
	return dir, queued, finished, torn, stale, orphan
}

// TestOpenCostsNothingThatGrows: opening a store reads no key file, lists
// no state directory but claimed/, reads no queued record and watches no
// directory, so that a command that opens the store for one operation
// costs the same at 100,000 jobs as at 1,000 (docs/format.md, "Opening a
// store"; the bench's cli figures measure it). The leftovers that such
// reads would find (a torn key file, a stale copy, an orphan lock file)
// are still there after Open, Get, Cancel, Submit and the Wait of a
// finished job, none of which started the watcher or filled the candidate
// set; reads were right all along (the stale copy is older, and loses),
// and Repair then removes all three.
func TestOpenCostsNothingThatGrows(t *testing.T) {
	ctx := t.Context()
	dir, queued, finished, torn, stale, orphan := openCostStore(t)
	log := &logBuffer{}
	s := openAt(t, dir, &Options{RecoverInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(log, nil))})

	got, err := s.Get(ctx, finished.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State, "the newer copy wins over the stale one")
	got, err = s.Wait(ctx, finished.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	s.mu.Lock()
	n := s.cands.len()
	s.mu.Unlock()
	require.Zero(t, n, "no queued record was read into the candidate set")
	_, err = s.Cancel(ctx, queued.ID)
	require.NoError(t, err)
	_, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "new"})
	require.NoError(t, err)
	require.True(t, created)

	for _, p := range []string{torn, stale, orphan} {
		_, err := os.Lstat(p)
		require.NoError(t, err, "Open and these calls leave %s for Repair", p)
	}
	require.False(t, s.watchStarted(), "no call so far needs events")
	s.mu.Lock()
	claimer := s.claimer
	s.mu.Unlock()
	require.False(t, claimer)
	require.Empty(t, log.String())

	r, err := s.Repair(ctx)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
	kinds := map[ProblemKind]int{}
	for _, p := range r.Problems {
		kinds[p.Kind]++
	}
	require.Equal(t, map[ProblemKind]int{ProblemTornRecord: 1, ProblemStaleCopy: 1, ProblemOrphanLock: 1}, kinds, "%v", r.Problems)
	for _, p := range []string{torn, stale, orphan} {
		_, err := os.Lstat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
}

// TestRepairRunsInTheBackground: a Store makes the repairs of Repair by
// itself at its first recovery pass repairDelay or more after Open, and
// logs each; a Claim before that finds the queued job, and a Wait of a
// job still queued starts the watcher.
func TestRepairRunsInTheBackground(t *testing.T) {
	ctx := t.Context()
	dir, queued, _, torn, stale, orphan := openCostStore(t)
	log := &logBuffer{}
	opened := time.Now()
	s := openAt(t, dir, &Options{RecoverInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(log, nil))})

	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := s.Wait(waitCtx, queued.ID)
	require.ErrorIs(t, err, waitCtx.Err())
	require.True(t, s.watchStarted(), "a Wait that blocks watches")
	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err, "the first Claim scans queued/")
	require.Equal(t, queued.ID, j.ID)

	// The pass logs its findings once it has made every repair: wait for
	// both.
	require.Eventually(t, func() bool {
		for _, p := range []string{torn, stale, orphan} {
			if _, err := os.Lstat(p); err == nil {
				return false
			}
		}
		for _, kind := range []ProblemKind{ProblemTornRecord, ProblemStaleCopy, ProblemOrphanLock} {
			if !strings.Contains(log.String(), fmt.Sprintf("filestore: repair: %s: ", kind)) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the repairs, and their lines in the log")
	require.GreaterOrEqual(t, time.Since(opened), repairDelay, "not before repairDelay")
	_, err = os.Stat(filepath.Join(dir, dirQuarantine, dirKeys, filepath.Base(torn)))
	require.NoError(t, err, "the torn key file is set aside, not deleted")
}
