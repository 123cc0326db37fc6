package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestCorruptFilesReportedAndSkipped plants a truncated record, a record
// that is not JSON, one naming another job, a symbolic link, a directory
// and a foreign file, and requires each to be reported with its path and
// skipped, never followed and never fatal. Fsck with repair removes none
// of them; it sets aside the two that a crash leaves (truncated and empty:
// ProblemTornRecord) in quarantine/, and only those.
func TestCorruptFilesReportedAndSkipped(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	good, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "good"})
	require.NoError(t, err)

	secret := filepath.Join(t.TempDir(), "secret.json")
	data, err := os.ReadFile(s.recordPath(dirQueued, good.ID))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(secret, data, 0o600))

	ids := map[string]string{}
	plant := func(name string, fn func(p string) error, dirName string) string {
		id := jobstore.NewID(time.Now())
		p := s.recordPath(dirName, id)
		require.NoError(t, fn(p))
		// A lock file, as Submit would have made, so Get reaches the record.
		require.NoError(t, os.WriteFile(s.lockPath(id), nil, 0o600))
		ids[name] = id
		return p
	}
	plant("truncated", func(p string) error { return os.WriteFile(p, data[:len(data)/2], 0o600) }, dirQueued)
	plant("notjson", func(p string) error { return os.WriteFile(p, []byte("hello"), 0o600) }, dirDone)
	plant("otherid", func(p string) error { return os.WriteFile(p, data, 0o600) }, dirDone)
	plant("symlink", func(p string) error { return os.Symlink(secret, p) }, dirQueued)
	plant("directory", func(p string) error { return os.Mkdir(p, 0o700) }, dirClaimed)
	plant("empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, dirQueued)
	foreign := filepath.Join(dir, dirQueued, "notes.txt")
	require.NoError(t, os.WriteFile(foreign, []byte("hi"), 0o600))
	// Top-level entries that are not the store's are ignored.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o700))

	for name, id := range ids {
		_, err := s.Get(t.Context(), id)
		require.ErrorIs(t, err, jobstore.ErrCorrupt, name)
		var ce *CorruptError
		require.True(t, errors.As(err, &ce), name)
		require.Contains(t, ce.Path, id, name)
	}

	page, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, good.ID, page.Jobs[0].ID)
	require.Len(t, page.Errors, len(ids)+1)
	for _, e := range page.Errors {
		require.ErrorIs(t, e, jobstore.ErrCorrupt)
	}

	// Claim skips what it cannot read and takes the good job.
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, good.ID, j.ID)
	_, err = s.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)

	// The symlink's target was never touched.
	after, err := os.ReadFile(secret)
	require.NoError(t, err)
	require.Equal(t, data, after)

	r, err := s.Fsck(t.Context(), true)
	require.NoError(t, err)
	kinds := map[ProblemKind]int{}
	for _, p := range r.Problems {
		kinds[p.Kind]++
		require.Equal(t, p.Kind == ProblemTornRecord, p.Repaired, "fsck must not remove what it cannot read: %v", p)
	}
	require.Equal(t, map[ProblemKind]int{ProblemCorrupt: len(ids) - 2, ProblemTornRecord: 2, ProblemUnexpected: 1}, kinds, "%v", r.Problems)
	require.False(t, r.OK())
	for _, name := range []string{"truncated", "empty"} {
		require.FileExists(t, filepath.Join(dir, dirQuarantine, dirQueued, ids[name]+recordExt), "set aside, not removed")
		delete(ids, name)
	}

	// Reopening works; the files are still reported, not removed. Clean up
	// so the test's own consistency check passes.
	require.NoError(t, s.Close())
	s2, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	r, err = s2.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.Len(t, r.Problems, len(ids)+1)
	require.NoError(t, s2.Close())
	for _, d := range stateDirs {
		for _, id := range ids {
			require.NoError(t, os.RemoveAll(s.recordPath(d, id)))
		}
	}
	require.NoError(t, os.Remove(foreign))
}

func TestInvalidIDsNeverBecomePaths(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	for _, id := range []string{"", "../../etc/passwd", "01M8M73018EJMB236B7KBF97Z/", ".", "01m8m73018ejmb236b7kbf97ze", "81M8M73018EJMB236B7KBF97ZE"} {
		_, err := s.Get(t.Context(), id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, id)
		_, err = s.Cancel(t.Context(), id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, id)
		_, err = s.Wait(t.Context(), id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, id)
	}
	// A valid ID that does not exist leaves no file behind.
	_, err := s.Get(t.Context(), jobstore.NewID(time.Now()))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.Empty(t, jobLockFiles(t, s.Dir()))
}

func TestPayloadLimit(t *testing.T) {
	s := openTest(t, &Options{NoSync: true, MaxPayload: 64})
	big := json.RawMessage(`"` + string(make([]byte, 0)) + `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`)
	_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Payload: big})
	require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(big))
	require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	_ = j
}

func TestFormatVersion(t *testing.T) {
	t.Run("Recorded", func(t *testing.T) {
		s := openTest(t, &Options{NoSync: true})
		data, err := os.ReadFile(filepath.Join(s.Dir(), formatFile))
		require.NoError(t, err)
		require.JSONEq(t, `{"store":"jobdir","format":8}`, string(data))
	})
	t.Run("UpgradedFrom1", func(t *testing.T) {
		// A format-1 store: its records (format 1, rewritten at claim)
		// read as they are, and FORMAT now says 5, so that programs of
		// format 1 refuse it.
		s := openTest(t, &Options{NoSync: true})
		queued, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "one"})
		require.NoError(t, err)
		dir := s.Dir()
		require.NoError(t, s.Close())
		old := func(j jobstore.Job, rev int64) []byte {
			data, err := json.Marshal(envelope{Format: 1, Rev: rev, Job: j})
			require.NoError(t, err)
			return append(data, '\n')
		}
		require.NoError(t, os.WriteFile(s.recordPath(dirQueued, queued.ID), old(queued, 1), 0o600))
		running := jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now().Add(-time.Minute))
		running.State, running.Attempt, running.Worker, running.StartedAt = jobstore.StateRunning, 1, "gone", running.CreatedAt
		require.NoError(t, os.WriteFile(s.recordPath(dirClaimed, running.ID), old(running, 2), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, formatFile), []byte(`{"store":"jobdir","format":1}`+"\n"), 0o600))

		s2, err := Open(t.Context(), dir, &Options{NoSync: true})
		require.NoError(t, err)
		defer s2.Close()
		data, err := os.ReadFile(filepath.Join(dir, formatFile))
		require.NoError(t, err)
		require.JSONEq(t, `{"store":"jobdir","format":8}`, string(data))
		j, err := s2.Get(t.Context(), queued.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State)
		again, created, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "one"})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, queued.ID, again.ID)
		// The format-1 running job's worker is gone: queued again, the
		// attempt counted.
		j, err = s2.Get(t.Context(), running.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State)
		require.Equal(t, 1, j.Attempt)
	})
	t.Run("UpgradedFrom2", func(t *testing.T) {
		// A format-2 store: shared record lock files, none per job. Its
		// records read as they are, a change makes the job's own lock
		// file, and FORMAT now says 5, so that programs of format 2
		// refuse it.
		s := openTest(t, &Options{NoSync: true})
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "two"})
		require.NoError(t, err)
		dir := s.Dir()
		require.NoError(t, s.Close())
		data, err := json.Marshal(envelope{Format: 2, Rev: 1, Job: j})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(s.recordPath(dirQueued, j.ID), append(data, '\n'), 0o600))
		if err := os.Remove(s.lockPath(j.ID)); !errors.Is(err, fs.ErrNotExist) {
			require.NoError(t, err) // made by a store with a lock file per job
		}
		stripe := filepath.Join(dir, dirLocks, "rec-1d2.lock")
		require.NoError(t, os.WriteFile(stripe, nil, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, formatFile), []byte(`{"store":"jobdir","format":2}`+"\n"), 0o600))

		s2, err := Open(t.Context(), dir, &Options{NoSync: true})
		require.NoError(t, err)
		defer s2.Close()
		data, err = os.ReadFile(filepath.Join(dir, formatFile))
		require.NoError(t, err)
		require.JSONEq(t, `{"store":"jobdir","format":8}`, string(data))
		got, err := s2.Get(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, j, got)
		got, err = s2.Cancel(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateCanceled, got.State)
		if s2.ranges == nil {
			require.FileExists(t, s2.lockPath(j.ID), "the change made the job's lock file")
		} else {
			require.NoFileExists(t, s2.lockPath(j.ID), "a change with range locks made a lock file")
		}
		require.FileExists(t, stripe, "a format-2 lock file is left alone")
	})
	t.Run("UpgradedFrom3", func(t *testing.T) {
		// A format-3 store, as the release before queues wrote it
		// (testdata/format3): its records have no queue, and their jobs
		// are in the default queue. FORMAT now says 5, so that programs
		// of format 3, which know no pauses, refuse it.
		s2 := openFixture(t, "testdata/format3")
		const id = "01M8ZHR6DR5VSG15YN34ZCVX45"
		got, err := s2.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, jobstore.DefaultQueue, got.Queue)
		require.Equal(t, "report", got.Kind)
		page, err := s2.List(t.Context(), jobstore.ListOptions{Queue: jobstore.DefaultQueue})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 1)
		_, err = s2.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"other"}})
		require.ErrorIs(t, err, jobstore.ErrNoJob)
		j, err := s2.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{jobstore.DefaultQueue}})
		require.NoError(t, err)
		require.Equal(t, id, j.ID)
		require.Equal(t, jobstore.DefaultQueue, j.Queue)
	})
	t.Run("UpgradedFrom4", func(t *testing.T) {
		// A format-4 store, as the release before tags and metadata wrote
		// it (testdata/format4): a queued job of a limited queue, with a
		// key and a partition. It reads as it is and gets tags from its
		// next change on; FORMAT now says 5, so that programs of format 4,
		// which would drop a job's tags and metadata, refuse it.
		s2 := openFixture(t, "testdata/format4")
		const id = "01M95JCT6D2FHCZ1F2C9JSR0P6"
		got, err := s2.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, "emails", got.Queue)
		require.Equal(t, "customer-42", got.Partition)
		require.Nil(t, got.Tags)
		require.Nil(t, got.Meta)
		again, created, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "exec", Key: "nightly-export"})
		require.NoError(t, err)
		require.False(t, created, "the key of a format-4 job names it")
		require.Equal(t, id, again.ID)
		qs, err := s2.Queues(t.Context())
		require.NoError(t, err)
		require.Len(t, qs, 1)
		require.Equal(t, 2, qs[0].Limit, "a format-4 queue setting holds")
		j, err := s2.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, id, j.ID)
		done, err := s2.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, done.State)
		tagged, _, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "exec", Tags: []string{"after"}, Meta: map[string]string{"m": "v"}})
		require.NoError(t, err)
		got, err = s2.Get(t.Context(), tagged.ID)
		require.NoError(t, err)
		require.Equal(t, []string{"after"}, got.Tags)
		require.Equal(t, map[string]string{"m": "v"}, got.Meta)
	})
	t.Run("UpgradedFrom5", func(t *testing.T) {
		// A format-5 store, as the release before dependencies wrote it
		// (testdata/format5): a queued job with a key, tags and metadata,
		// and a schedule. It reads as it is, a new job may wait for it,
		// and FORMAT now says 6, so that programs of format 5, which
		// would take a waiting job for corrupt, refuse the store.
		s2 := openFixture(t, "testdata/format5")
		const id = "01M95T6FKH6RNPRGHXHXF4XYZQ"
		got, err := s2.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, []string{"team=ops"}, got.Tags)
		require.Equal(t, map[string]string{"owner": "ops"}, got.Meta)
		scheds, err := s2.Schedules(t.Context())
		require.NoError(t, err)
		require.Len(t, scheds, 1)
		dep, _, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "exec", AfterKeys: []string{"nightly-report"}})
		require.NoError(t, err)
		require.Equal(t, jobstore.StateWaiting, dep.State)
		j, err := s2.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, id, j.ID)
		_, err = s2.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
		got, err = s2.Get(t.Context(), dep.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State)
		data, err := os.ReadFile(filepath.Join(s2.dir, formatFile))
		require.NoError(t, err)
		require.JSONEq(t, `{"store":"jobdir","format":8}`, string(data))
	})
	t.Run("UpgradedFrom6", func(t *testing.T) {
		// A format-6 store, as the release before range locks wrote it
		// (testdata/format6): a succeeded job, a queued job with a key
		// and a job waiting for it, each with its record lock file. Its
		// files read as they are; on Linux the jobs are locked in
		// locks/records.lock from now on, their old lock files are no
		// problem for Fsck and go with their jobs, and new jobs get none.
		// FORMAT now says 7, so that programs of format 6, whose lock
		// files would not exclude these locks, refuse the store.
		s2 := openFixture(t, "testdata/format6")
		const succeeded, queued, waiting = "01M9787866QD7DT3YNEH4JQ9WD", "01M978786A0VXSTBG119CN6CRH", "01M978786CSAV2D96APQMYYQC2"
		data, err := os.ReadFile(filepath.Join(s2.dir, formatFile))
		require.NoError(t, err)
		require.JSONEq(t, `{"store":"jobdir","format":8}`, string(data))
		r, err := s2.Fsck(t.Context(), false)
		require.NoError(t, err)
		require.True(t, r.OK(), "%v", r.Problems)
		again, created, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "exec", Key: "nightly-report"})
		require.NoError(t, err)
		require.False(t, created, "the key of a format-6 job names it")
		require.Equal(t, queued, again.ID)
		j, err := s2.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, queued, j.ID)
		_, err = s2.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
		got, err := s2.Get(t.Context(), waiting)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State)
		fresh, _, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "exec"})
		require.NoError(t, err)
		require.NoError(t, s2.Delete(t.Context(), succeeded))
		if s2.ranges == nil {
			return // a lock file per job, as in format 6
		}
		require.FileExists(t, filepath.Join(s2.dir, dirLocks, recordLocksName))
		require.NoFileExists(t, s2.lockPath(succeeded), "a deleted job's old lock file stays")
		require.NoFileExists(t, s2.lockPath(fresh.ID), "a new job got a lock file")
		require.FileExists(t, s2.lockPath(waiting), "the old lock file of a job that is still there")
	})
	t.Run("UpgradedFrom7", func(t *testing.T) {
		// A format-7 store, as the release before range leases wrote it
		// (testdata/format7): a succeeded job, a queued job with a key,
		// and a job whose worker died while it ran, with the claim notes
		// in lease files. Open recovers the dead worker's job, whose
		// note it reads from its lease file; new claims lease bytes of
		// locks/leases.lock and make no lease file. FORMAT now says 8, so
		// that programs of format 7, whose lease files would not exclude
		// these leases, refuse the store.
		s2 := openFixture(t, "testdata/format7")
		const succeeded, died, queued = "01M97W4S44524X097NS9A1X6SK", "01M97W4S46BEY09GNW9T855A4P", "01M97W4S479J6GVKFTZ2R1ENHT"
		j, err := s2.Get(t.Context(), died)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State, "the dead worker's job was not recovered")
		require.Equal(t, 1, j.Attempt)
		require.Len(t, j.History, 1)
		require.Equal(t, "gone-worker", j.History[0].Worker, "the note in the lease file was not read")
		require.Equal(t, jobstore.EndWorkerLost, j.History[0].End)
		r, err := s2.Fsck(t.Context(), false)
		require.NoError(t, err)
		require.True(t, r.OK(), "%v", r.Problems)
		again, created, err := s2.Submit(t.Context(), jobstore.Spec{Kind: "exec", Key: "nightly-report"})
		require.NoError(t, err)
		require.False(t, created, "the key of a format-7 job names it")
		require.Equal(t, queued, again.ID)
		ran := map[string]bool{}
		for range 2 {
			c, err := s2.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
			require.NoError(t, err)
			got, err := s2.Get(t.Context(), c.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateRunning, got.State)
			require.Equal(t, "w", got.Worker)
			_, err = s2.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
			require.NoError(t, err)
			ran[c.ID] = true
		}
		require.Equal(t, map[string]bool{died: true, queued: true}, ran)
		require.NoError(t, s2.Delete(t.Context(), succeeded))
		require.NoFileExists(t, s2.leasePath(succeeded), "a deleted job's old lease file stays")
		if s2.ranges == nil {
			return // a lease file per job, as in format 7
		}
		require.FileExists(t, filepath.Join(s2.dir, dirLocks, leasesName))
		require.NoFileExists(t, s2.leasePath(queued), "a claim made a lease file")
	})
	t.Run("TooNew", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, formatFile), []byte(`{"store":"jobdir","format":9}`), 0o600))
		_, err := Open(t.Context(), dir, nil)
		require.ErrorIs(t, err, ErrFormatTooNew)
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, ents, 1, "a refused directory is left untouched")
	})
	t.Run("Foreign", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, formatFile), []byte("v1\n"), 0o600))
		_, err := Open(t.Context(), dir, nil)
		require.ErrorIs(t, err, ErrNotStore)
	})
	t.Run("NotADirectory", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		_, err := Open(t.Context(), p, nil)
		require.Error(t, err)
	})
}

func TestPermissions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		group     bool
		dir, file os.FileMode
	}{
		{"Private", false, 0o700, 0o600},
		{"GroupAccess", true, 0o770, 0o660},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s := openAt(t, dir, &Options{GroupAccess: tc.group})
			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "k1"})
			require.NoError(t, err)
			c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
			require.NoError(t, err)
			_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
			require.NoError(t, err)
			err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				require.NoError(t, err)
				fi, err := d.Info()
				require.NoError(t, err)
				want := tc.file
				if d.IsDir() {
					want = tc.dir
				}
				require.Equal(t, want, fi.Mode().Perm(), p)
				return nil
			})
			require.NoError(t, err)
			_ = j
		})
	}
}

// TestStaleCopyHighestRevWins: an interrupted move leaves a record in two
// directories; every reader takes the higher revision and Open removes the
// other.
func TestStaleCopyHighestRevWins(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	old, err := os.ReadFile(s.recordPath(dirQueued, j.ID))
	require.NoError(t, err)
	_, err = s.Cancel(t.Context(), j.ID)
	require.NoError(t, err)
	// The queued copy reappears, as an unlink that was never fsynced can.
	require.NoError(t, os.WriteFile(s.recordPath(dirQueued, j.ID), old, 0o600))
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "a stale queued copy must not be claimed")
	require.NoError(t, os.WriteFile(s.recordPath(dirQueued, j.ID), old, 0o600))
	require.NoError(t, s.Close())
	s2 := openAt(t, dir, &Options{NoSync: true})
	got, err = s2.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	_, err = s2.Repair(t.Context())
	require.NoError(t, err)
	_, err = os.Lstat(s2.recordPath(dirQueued, j.ID))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestDanglingKeyRolledBack: a key file whose submitter died before
// publishing the record does not block the key.
func TestDanglingKeyRolledBack(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "k1"})
	require.NoError(t, err)
	// Make it look as if the record was never published.
	require.NoError(t, os.Remove(s.recordPath(dirQueued, j.ID)))
	s.mu.Lock()
	clear(s.keys)
	s.mu.Unlock()
	j2, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "k1"})
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, j.ID, j2.ID)
}

// TestLostEventsClaimFindsJob: with no filesystem events at all (as on a
// filesystem that sends none, or after lost events) a job another Store
// submitted is still claimed, and AwaitWork still wakes within the poll.
func TestLostEventsClaimFindsJob(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, PollInterval: 100 * time.Millisecond})
	// Stop this Store's watcher and keep it stopped: every event is lost.
	s.watch()
	s.watchMu.Lock()
	require.NoError(t, s.watcher.Close())
	s.watcher = nil
	s.watchMu.Unlock()
	other := openAt(t, dir, &Options{NoSync: true})
	j, _, err := other.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	got, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err, "an empty candidate set must be checked against queued/")
	require.Equal(t, j.ID, got.ID)
	_, err = s.Complete(t.Context(), got.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)

	// Wait in the blind Store still sees the other's completion (poll).
	j2, _, err := other.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	c, err := other.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2"})
	require.NoError(t, err)
	require.Equal(t, j2.ID, c.ID)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = other.Complete(context.Background(), c.Lease(), jobstore.Succeeded(nil))
	}()
	done, err := s.Wait(t.Context(), j2.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
}

// TestStatsRereadsOnlyChanges: Stats, which rereads only records whose
// file changed, is right after every kind of change, including a record
// replaced in done/ by a retried job that finished again, and forgets
// pruned records.
func TestStatsRereadsOnlyChanges(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	ctx := t.Context()
	var ids []string
	for range 5 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 1})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	counts := func() map[jobstore.State]int {
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		return st.Counts
	}
	require.Equal(t, 5, counts()[jobstore.StateQueued])
	run := func(o jobstore.Outcome) {
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		_, err = s.Complete(ctx, c.Lease(), o)
		require.NoError(t, err)
	}
	run(jobstore.Outcome{Error: "no"})
	run(jobstore.Succeeded(nil))
	_, err := s.Cancel(ctx, ids[4])
	require.NoError(t, err)
	c := counts()
	require.Equal(t, 1, c[jobstore.StateFailed])
	require.Equal(t, 1, c[jobstore.StateSucceeded])
	require.Equal(t, 1, c[jobstore.StateCanceled])
	require.Equal(t, 2, c[jobstore.StateQueued])
	for _, id := range ids[2:4] {
		_, err = s.Cancel(ctx, id)
		require.NoError(t, err)
	}
	// The failed job runs again and succeeds: its done/ record is replaced.
	_, err = s.Retry(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, 1, counts()[jobstore.StateQueued])
	c2, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, ids[0], c2.ID)
	require.Equal(t, 1, counts()[jobstore.StateRunning])
	_, err = s.Complete(ctx, c2.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	c = counts()
	require.Equal(t, 0, c[jobstore.StateFailed])
	require.Equal(t, 2, c[jobstore.StateSucceeded])
	_, err = s.Prune(ctx, 0)
	require.NoError(t, err)
	c = counts()
	require.Equal(t, 0, c[jobstore.StateSucceeded]+c[jobstore.StateCanceled])
	s.stats.mu.Lock()
	require.Empty(t, s.stats.m, "the cache forgets pruned records")
	s.stats.mu.Unlock()
}

// TestGetByKeyOfLeftovers: GetByKey reads the key's file and the job it
// names; a key file whose job has no record (its submit never finished)
// or that a power cut left empty names no job, and one that names a job
// with another key is reported as corrupt, with its path.
func TestGetByKeyOfLeftovers(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true, RecoverInterval: time.Hour})
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "dangling"})
	require.NoError(t, err)
	require.NoError(t, os.Remove(s.recordPath(dirQueued, j.ID)))
	_, err = s.GetByKey(ctx, "dangling")
	require.ErrorIs(t, err, jobstore.ErrNotFound)

	require.NoError(t, os.WriteFile(s.keyPath(keyName("torn")), nil, 0o600))
	_, err = s.GetByKey(ctx, "torn")
	require.ErrorIs(t, err, jobstore.ErrNotFound)

	other, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "other"})
	require.NoError(t, err)
	require.NoError(t, os.Link(s.recordPath(dirQueued, other.ID), s.keyPath(keyName("swapped"))))
	_, err = s.GetByKey(ctx, "swapped")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, s.keyPath(keyName("swapped")), ce.Path)
	require.NoError(t, os.Remove(s.keyPath(keyName("swapped"))))
	require.NoError(t, os.Remove(s.keyPath(keyName("torn"))))

	got, err := s.GetByKey(ctx, "other")
	require.NoError(t, err)
	require.Equal(t, other.ID, got.ID)
}

// openFixture opens a copy of the store written by an older release in
// fixture (a directory of testdata) and checks that Open upgraded its
// FORMAT to this format.
func openFixture(t *testing.T, fixture string) *Store {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(fixture)))
	for _, d := range []string{dirClaimed, dirDone, dirTmp} { // git keeps no empty directory
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	s, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	data, err := os.ReadFile(filepath.Join(dir, formatFile))
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"store":"jobdir","format":%d}`, FormatVersion), string(data))
	return s
}
