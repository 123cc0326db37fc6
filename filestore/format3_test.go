package filestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestGetSeesMovingJob: a Get, which takes no lock, finds a whole record
// of a job that exists throughout the call while another process moves it
// between queued/, claimed/ and done/ as fast as it can (claims, failed
// attempts queued again, final failures, retries), and never returns a
// record older than one an earlier call returned: its revision never goes
// back, as it would if a call returned a copy already superseded when the
// call began.
func TestGetSeesMovingJob(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	moving, _, err := s.Submit(ctx, jobstore.Spec{Kind: cycleKind, MaxAttempts: 3})
	require.NoError(t, err)
	c := startChild(t, dir, "cycle", childNoSync+"=1")
	require.Equal(t, "cycling", c.Next(t))

	const calls = 3000
	states := map[jobstore.State]int{}
	var last record
	for i := range calls {
		rec, err := s.readShared(ctx, moving.ID)
		require.NoError(t, err, "Get %d of %d", i+1, calls)
		require.Equal(t, moving.ID, rec.Job.ID)
		require.GreaterOrEqual(t, rec.Rev, last.Rev, "Get %d of %d went back from revision %d to %d: %s %s attempt %d, then %s %s attempt %d",
			i+1, calls, last.Rev, rec.Rev, last.dir, last.Job.State, last.Job.Attempt, rec.dir, rec.Job.State, rec.Job.Attempt)
		last = rec
		states[rec.Job.State]++
	}
	j, err := s.Get(ctx, moving.ID)
	require.NoError(t, err)
	require.Equal(t, moving.ID, j.ID)
	t.Logf("states seen: %v; last revision %d", states, last.Rev)
	require.Greater(t, len(states), 1, "the job moved during the Gets")
}

// TestLockFilesDoNotPileUp: the lock files of jobs that are submitted,
// claimed, completed and pruned are all gone once the jobs are; locks/ does
// not grow with the number of jobs a store has seen. With range locks
// (Linux) no job has a lock file; with a lock file per job (elsewhere)
// each goes with its job.
func TestLockFilesDoNotPileUp(t *testing.T) {
	forEachLockProtocol(t, testLockFilesDoNotPileUp)
}

func testLockFilesDoNotPileUp(t *testing.T, dir string) {
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	const jobs = 2000
	specs := make([]jobstore.Spec, jobs)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k", Key: fmt.Sprintf("key-%d", i%2)}
		if i%2 == 0 {
			specs[i].Key = ""
		}
	}
	for _, spec := range specs {
		_, _, err := s.Submit(ctx, spec)
		require.NoError(t, err)
	}
	for {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		if errors.Is(err, jobstore.ErrNoJob) {
			break
		}
		require.NoError(t, err)
		_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Positive(t, n)
	require.Empty(t, jobLockFiles(t, dir), "files left in locks/ after %d jobs were pruned", n)
}

// TestPrunedCandidateLeavesNoLeaseFile: a claim whose candidate was
// pruned after it was listed, and a recovery pass that meets a pruned job,
// make its lease file again (tryLease creates it) and find no record: each
// removes the file, which nothing else would.
func TestPrunedCandidateLeavesNoLeaseFile(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true, RecoverInterval: time.Hour})
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	locks := func() []string { return jobLockFiles(t, s.Dir()) }
	require.Empty(t, locks())

	_, ok, err := s.claimOne(ctx, j.ID, jobstore.ClaimRequest{Worker: "w"}, time.Now(), false)
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, locks(), "a claim of a pruned job left a file")

	prob, err := s.recoverOne(ctx, j.ID, true, nil)
	require.NoError(t, err)
	require.Nil(t, prob)
	require.Empty(t, locks(), "a recovery of a pruned job left a file")
}

// TestPruneWhileAnotherProcessCompletes: Prune, run again and again while
// another process claims and completes jobs, removes each job only once it
// is finished, with its lock files; every job is completed once, and none
// is lost or left half removed.
func TestPruneWhileAnotherProcessCompletes(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	const jobs = 300
	for range jobs {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	c := startChild(t, dir, "claim-all", childNoSync+"=1")
	exited := make(chan error, 1)
	go func() { exited <- c.Wait(context.Background()) }()
	pruned := 0
	for running := true; running; {
		select {
		case err := <-exited:
			require.NoError(t, err, c.Output())
			running = false
		default:
		}
		n, err := s.Prune(ctx, 0)
		require.NoError(t, err)
		pruned += n
	}
	claimed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(c.Output()), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, line)
		require.False(t, claimed[f[1]], "job %s claimed twice", f[1])
		claimed[f[1]] = true
	}
	require.Len(t, claimed, jobs)
	require.Equal(t, jobs, pruned)
	require.Empty(t, jobLockFiles(t, dir), "a file left in locks/")
}

// TestFsckRemovesOrphanLockFile: a record lock file left by a process
// killed after it created and locked the file but before it wrote the
// job's record is reported by Fsck, and removed by Fsck with repair, once
// that process is gone; while the process holds the lock (a submit under
// way), or it is younger than orphanLockAge, Fsck leaves the file alone.
// Open removes such a file too. The lock files of jobs that exist stay.
// It is a store with a lock file per job (outside Linux); with range
// locks only a program of format 6 or older made lock files, and the same
// check removes those of jobs that are gone (TestFormatVersion/UpgradedFrom6).
func TestFsckRemovesOrphanLockFile(t *testing.T) {
	dir := t.TempDir()
	useLockFiles(t, dir)
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	ctx := t.Context()
	kept, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	orphan := jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now())
	orphanLock := s.lockPath(orphan.ID)
	orphans := func(r Report) []Problem {
		var ps []Problem
		for _, p := range r.Problems {
			if p.Kind == ProblemOrphanLock {
				ps = append(ps, p)
			}
		}
		return ps
	}

	holder := startChild(t, dir, "hold-locks", childKey+"="+orphan.ID)
	require.Equal(t, "locked", holder.Next(t))
	r, err := s.Fsck(ctx, true)
	require.NoError(t, err)
	require.Empty(t, orphans(r), "a lock file in use was reported")
	require.FileExists(t, orphanLock)

	require.NoError(t, holder.Signal(syscall.SIGKILL))
	_ = holder.Wait(t.Context())
	require.FileExists(t, orphanLock, "the killed process left its lock file")
	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Empty(t, orphans(r), "a lock file made a moment ago was taken for a dead submitter's")
	aged := func(p string) {
		old := time.Now().Add(-2 * orphanLockAge)
		require.NoError(t, os.Chtimes(p, old, old))
	}
	aged(orphanLock)
	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Equal(t, []Problem{{Kind: ProblemOrphanLock, Path: orphanLock, ID: orphan.ID,
		Detail: "job " + orphan.ID + " has no record"}}, orphans(r))
	require.False(t, r.OK())
	require.FileExists(t, orphanLock, "Fsck without repair removed a file")

	r, err = s.Fsck(ctx, true)
	require.NoError(t, err)
	ps := orphans(r)
	require.Len(t, ps, 1)
	require.True(t, ps[0].Repaired)
	require.True(t, r.OK(), "%v", r.Problems)
	require.NoFileExists(t, orphanLock)
	require.FileExists(t, s.lockPath(kept.ID), "the lock file of a job that exists was removed")

	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	j, err := s.Get(ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)

	// Repair removes one too.
	again := jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now())
	holder = startChild(t, dir, "hold-locks", childKey+"="+again.ID)
	require.Equal(t, "locked", holder.Next(t))
	require.NoError(t, holder.Signal(syscall.SIGKILL))
	_ = holder.Wait(t.Context())
	require.FileExists(t, s.lockPath(again.ID))
	// One made a moment ago may be a submit's that has not locked it yet,
	// as when processes start together: the background Repair of a
	// Store opened now leaves it, and warns of nothing.
	logs := &logBuffer{}
	s3 := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.Eventually(t, s3.repairedInBackground.Load, 10*time.Second, 10*time.Millisecond)
	require.FileExists(t, s.lockPath(again.ID), "Repair took a lock file made a moment ago for a dead submitter's")
	require.NotContains(t, logs.String(), string(ProblemOrphanLock))
	aged(s.lockPath(again.ID))
	r, err = openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour}).Repair(ctx)
	require.NoError(t, err)
	require.Len(t, problemsOf(r, ProblemOrphanLock), 1, "%v", r.Problems)
	require.NoFileExists(t, s.lockPath(again.ID), "Repair left the old lock file of a job that has no record")
	require.FileExists(t, s.lockPath(kept.ID))
}
