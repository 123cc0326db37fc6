//go:build linux

package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// A real filesystem that fills up, and one that turns read-only: a
// size-limited tmpfs mounted for the test. Both need root (or a user
// namespace that allows mounts); elsewhere the tests skip and say why.

// mountTmpfs mounts a tmpfs with the given options (such as "size=2m")
// on a fresh directory and unmounts it when the test ends.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a size-limited tmpfs")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts+",mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s here: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			// Something still has a file open: detach it so the
			// directory can be removed; the kernel frees it at last close.
			t.Logf("unmount %s: %v; detaching", mnt, err)
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

// listAll returns every job in the store, all pages, and the errors List
// reported.
func listAll(t *testing.T, s *Store) ([]jobstore.Job, []error) {
	t.Helper()
	var jobs []jobstore.Job
	var errs []error
	opts := jobstore.ListOptions{Limit: jobstore.MaxListLimit, Order: jobstore.OldestFirst}
	for {
		page, err := s.List(t.Context(), opts)
		require.NoError(t, err)
		jobs = append(jobs, page.Jobs...)
		errs = append(errs, page.Errors...)
		if page.Next == "" {
			return jobs, errs
		}
		opts.Cursor = page.Next
	}
}

// requireExactly checks that List, Get, Stats and Fsck agree that the
// store holds exactly the jobs in want (by ID, with their payloads), in
// the given states, and nothing else: no job a failed call left half
// visible, no temp file, no stray key. Fsck may report only problems of the
// pending kinds, repairs that wait for space.
func requireExactly(t *testing.T, s *Store, want map[string]jobstore.Job, pending ...ProblemKind) {
	t.Helper()
	jobs, errs := listAll(t, s)
	require.Empty(t, errs)
	got := map[string]jobstore.State{}
	for _, j := range jobs {
		got[j.ID] = j.State
	}
	require.Len(t, got, len(want), "List sees jobs that no call returned, or misses some")
	counts := map[jobstore.State]int{}
	for id, w := range want {
		require.Equal(t, w.State, got[id], "job %s", id)
		j, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, w.State, j.State)
		require.Equal(t, string(w.Payload), string(j.Payload))
		counts[w.State]++
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	for _, state := range jobstore.States() {
		require.Equal(t, counts[state], st.Counts[state], "stats of %s", state)
	}
	r, err := s.Fsck(t.Context(), false)
	require.NoError(t, err)
	for _, p := range r.Problems {
		require.Contains(t, pending, p.Kind, "fsck: %v", r.Problems)
	}
	require.Equal(t, len(want), r.Records)
}

// TestDiskFull fills a 2 MiB tmpfs with submits until the disk is full.
// The submit that fails says so (its error wraps syscall.ENOSPC) and
// leaves nothing behind; every job whose submit returned is intact; claim
// and cancel on the full disk fail cleanly or succeed; the store reopens
// on the full disk; and once space is freed, by Prune or by deleting a
// file, submits work again.
func TestDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, "size=2m")
	dir := filepath.Join(mnt, "store")
	ctx := t.Context()
	s, err := Open(ctx, dir, nil) // durable: every fsync made
	require.NoError(t, err)
	defer func() { _ = s.Close() }()

	want := map[string]jobstore.Job{}
	// Seven pages a record: the disk fills after about 60 jobs.
	payload := jsonString(28000)
	// Finished jobs, for Prune to free later.
	for i := range 8 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: fmt.Sprint("old-", i), Payload: payload})
		require.NoError(t, err)
		j, err = s.Cancel(ctx, j.ID)
		require.NoError(t, err)
		want[j.ID] = j
	}
	filler := filepath.Join(mnt, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 256<<10), 0o600))

	var full error
	var fullKey string
	for i := 0; i < 10000 && full == nil; i++ {
		spec := jobstore.Spec{Kind: "k", Payload: payload}
		if i%2 == 0 {
			spec.Key = fmt.Sprint("key-", i)
		}
		j, created, err := s.Submit(ctx, spec)
		if err != nil {
			full, fullKey = err, spec.Key
			break
		}
		require.True(t, created)
		want[j.ID] = j
	}
	require.Error(t, full, "the disk never filled up")
	t.Logf("full after %d jobs: %v", len(want), full)
	require.ErrorIs(t, full, syscall.ENOSPC)
	require.Contains(t, full.Error(), "no space left on device")
	requireExactly(t, s, want)

	// A second failing submit, with a key this time if the first had none.
	key := fullKey
	if key == "" {
		key = "full-key"
		_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Key: key, Payload: payload})
		require.ErrorIs(t, err, syscall.ENOSPC)
	}

	// Claim and cancel on a full disk: whatever fails must fail clearly
	// and leave the job as it was.
	var queuedID string
	for id, j := range want {
		if j.State == jobstore.StateQueued {
			queuedID = id
			break
		}
	}
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	if err != nil {
		t.Logf("claim on a full disk: %v", err)
		require.ErrorIs(t, err, syscall.ENOSPC)
		ents, err := os.ReadDir(filepath.Join(dir, dirClaimed))
		require.NoError(t, err)
		require.Empty(t, ents, "a failed claim left a record in claimed/")
	} else {
		done, err := s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			t.Logf("claimed on a full disk, but could not complete: %v", err)
			c, err = s.Get(ctx, c.ID)
			require.NoError(t, err)
		} else {
			c = done
		}
		want[c.ID] = c
	}
	if j, err := s.Cancel(ctx, queuedID); err != nil {
		t.Logf("cancel on a full disk: %v", err)
		require.ErrorIs(t, err, syscall.ENOSPC)
	} else {
		want[queuedID] = j
	}
	requireExactly(t, s, want)

	// Reopen on the full disk: it works, and finds no temp file left.
	require.NoError(t, s.Close())
	s, err = Open(ctx, dir, nil)
	require.NoError(t, err)
	ents, err := os.ReadDir(filepath.Join(dir, dirTmp))
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.Len(t, names, 2, "tmp/ holds only this Store's staging directory and its lock: %v", names)
	// A job claimed by the closed Store is a dead worker's: queuing it
	// again needs a new record, which waits for space (the open did not
	// fail for it).
	var dead []string
	for id, j := range want {
		if j.State == jobstore.StateRunning {
			dead = append(dead, id)
		}
	}
	requireExactly(t, s, want, ProblemDeadWorker)

	// Free space by pruning the finished jobs: submits work again, the
	// key whose submit failed is free, and recovery queues the dead
	// worker's job.
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 8)
	for id, j := range want {
		if j.State.Terminal() {
			delete(want, id)
		}
	}
	// The Store's own recovery pass may be at the job when this one
	// looks (the job's lease is then busy, and this pass leaves it to
	// that one): look until both are done.
	for _, id := range dead {
		var j jobstore.Job
		require.Eventually(t, func() bool {
			_, err := s.recoverDead(ctx, true)
			require.NoError(t, err)
			j, err = s.Get(ctx, id)
			require.NoError(t, err)
			return j.State == jobstore.StateQueued
		}, 10*time.Second, 10*time.Millisecond, "a dead worker's job once there is space")
		want[id] = j
	}
	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: key, Payload: payload})
	require.NoError(t, err, "submit after prune")
	require.True(t, created, "the key of a failed submit is free")
	want[j.ID] = j

	// Fill up again, then free space by deleting a file.
	for {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: payload})
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
		want[j.ID] = j
	}
	require.NoError(t, os.Remove(filler))
	for range 8 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: payload})
		require.NoError(t, err, "submit after a file was deleted")
		want[j.ID] = j
	}
	requireExactly(t, s, want)
}

// TestInodesFull: a filesystem that runs out of inodes rather than bytes.
// Every job has a lock file, so that is what the failing submit cannot
// create; the rest is as with a full disk.
func TestInodesFull(t *testing.T) {
	mnt := mountTmpfs(t, "size=8m,nr_inodes=96")
	dir := filepath.Join(mnt, "store")
	ctx := t.Context()
	s, err := Open(ctx, dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	want := map[string]jobstore.Job{}
	for i := range 4 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: fmt.Sprint("old-", i)})
		require.NoError(t, err)
		j, err = s.Cancel(ctx, j.ID)
		require.NoError(t, err)
		want[j.ID] = j
	}
	var full error
	for i := 0; i < 1000; i++ {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: fmt.Sprint("key-", i)})
		if err != nil {
			full = err
			break
		}
		want[j.ID] = j
	}
	require.Error(t, full, "the inodes never ran out")
	t.Logf("out of inodes after %d jobs: %v", len(want), full)
	require.ErrorIs(t, full, syscall.ENOSPC)
	requireExactly(t, s, want)

	require.NoError(t, s.Close())
	s, err = Open(ctx, dir, &Options{NoSync: true})
	require.NoError(t, err, "reopen with no inode free")
	requireExactly(t, s, want)
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for id, j := range want {
		if j.State.Terminal() {
			delete(want, id)
		}
	}
	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "after"})
	require.NoError(t, err, "submit after prune")
	require.True(t, created)
	want[j.ID] = j
	requireExactly(t, s, want)
}

// TestReadOnlyRemount turns the filesystem under an open store read-only.
// Every write fails with an error wrapping syscall.EROFS and changes
// nothing; reads go on working; Open on the read-only filesystem refuses
// clearly; and once it is writable again the store is exactly as before.
func TestReadOnlyRemount(t *testing.T) {
	mnt := mountTmpfs(t, "size=4m")
	dir := filepath.Join(mnt, "store")
	ctx := t.Context()
	s, err := Open(ctx, dir, nil)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	want := map[string]jobstore.Job{}
	var queued, canceled jobstore.Job
	for i := range 4 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: fmt.Sprint("k", i), Payload: jsonString(100)})
		require.NoError(t, err)
		want[j.ID] = j
		queued = j
	}
	canceled, err = s.Cancel(ctx, queued.ID)
	require.NoError(t, err)
	want[canceled.ID] = canceled
	for _, j := range want {
		if j.State == jobstore.StateQueued {
			queued = j
			break
		}
	}

	if err := syscall.Mount("", mnt, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount %s read-only: %v", mnt, err)
	}
	remounted := false
	t.Cleanup(func() {
		if !remounted {
			_ = syscall.Mount("", mnt, "", syscall.MS_REMOUNT, "")
		}
	})

	for name, op := range map[string]func() error{
		"submit":           func() error { _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"}); return err },
		"submit with key":  func() error { _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "new"}); return err },
		"cancel":           func() error { _, err := s.Cancel(ctx, queued.ID); return err },
		"retry":            func() error { _, err := s.Retry(ctx, canceled.ID); return err },
		"claim":            func() error { _, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"}); return err },
		"open another one": func() error { s2, err := Open(ctx, dir, nil); closeIf(s2); return err },
		"ping":             func() error { return s.Ping(ctx) },
	} {
		err := op()
		require.ErrorIs(t, err, syscall.EROFS, name)
		require.Contains(t, err.Error(), "read-only file system", name)
	}
	// Prune has nothing old enough to remove; reads work.
	n, err := s.Prune(ctx, 0)
	if err != nil {
		require.ErrorIs(t, err, syscall.EROFS)
	} else {
		require.Zero(t, n)
	}
	want[canceled.ID] = canceled
	requireReadable(t, s, want)

	require.NoError(t, syscall.Mount("", mnt, "", syscall.MS_REMOUNT, ""))
	remounted = true
	require.NoError(t, s.Close())
	s, err = Open(ctx, dir, nil)
	require.NoError(t, err)
	if n == 0 {
		requireExactly(t, s, want)
	}
	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "new"})
	require.NoError(t, err)
	require.True(t, created, "the key of a refused submit is free")
	_, err = s.Get(ctx, j.ID)
	require.NoError(t, err)
}

func closeIf(s *Store) {
	if s != nil {
		_ = s.Close()
	}
}

// requireReadable checks the reads that must work on a read-only store.
func requireReadable(t *testing.T, s *Store, want map[string]jobstore.Job) {
	t.Helper()
	jobs, errs := listAll(t, s)
	require.Empty(t, errs)
	require.Len(t, jobs, len(want))
	for id, w := range want {
		j, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, w.State, j.State)
	}
	_, err := s.Stats(t.Context())
	require.NoError(t, err)
}

// TestReadOnlyDirectoryAsNobody: a store whose directories its owner, a
// process that is not root, has made read-only (mode 0500) while it has
// the store open. Writes fail with an error wrapping EACCES and leave
// nothing half visible; reads work; Open refuses clearly.
func TestReadOnlyDirectoryAsNobody(t *testing.T) {
	if testproc.Name() == "readonly" {
		readOnlyChild(t)
		return
	}
	base, bin := testproc.Unprivileged(t)
	dir := filepath.Join(base, "store")
	s, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	want := map[string]jobstore.Job{}
	for i := range 3 {
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: fmt.Sprint("k", i)})
		require.NoError(t, err)
		want[j.ID] = j
	}
	var some string
	for id := range want {
		some = id
	}
	require.NoError(t, s.Close())
	require.NoError(t, chownTree(dir, 65534, 65534))

	out := runAs(t, testproc.Nobody(), bin, "TestReadOnlyDirectoryAsNobody", "readonly", hostileDirEnv+"="+dir, hostileIDEnv+"="+some)
	t.Logf("child:\n%s", out)
	res := childResults(t, out)
	require.Empty(t, res["open"].Err)
	for _, op := range []string{"submit", "submit with key", "cancel", "claim", "open another one"} {
		r, ok := res[op]
		require.True(t, ok, "no result for %s", op)
		require.True(t, r.Permission, "%s: %+v", op, r)
		require.Contains(t, r.Err, "permission denied", op)
	}
	for _, op := range []string{"get", "list", "restore"} {
		require.Empty(t, res[op].Err, op)
	}
	require.Equal(t, fmt.Sprint(len(want)), res["list"].Detail)

	s, err = Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	requireExactly(t, s, want)
}

func readOnlyChild(t *testing.T) {
	ctx := t.Context()
	dir, id := os.Getenv(hostileDirEnv), os.Getenv(hostileIDEnv)
	s, err := Open(ctx, dir, &Options{NoSync: true})
	report("open", err, "")
	if err != nil {
		return
	}
	defer s.Close()
	// Every directory of the store, the staging one included.
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	chmodAll := func(mode os.FileMode) error {
		for _, d := range dirs {
			if err := os.Chmod(d, mode); err != nil {
				return err
			}
		}
		return nil
	}
	if err := chmodAll(0o500); err != nil {
		report("chmod", err, "")
		return
	}
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
	report("submit", err, "")
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "new"})
	report("submit with key", err, "")
	_, err = s.Cancel(ctx, id)
	report("cancel", err, "")
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "nobody"})
	report("claim", err, "")
	s2, err := Open(ctx, dir, &Options{NoSync: true})
	closeIf(s2)
	report("open another one", err, "")
	_, err = s.Get(ctx, id)
	report("get", err, "")
	page, err := s.List(ctx, jobstore.ListOptions{})
	var errs []string
	for _, e := range page.Errors {
		errs = append(errs, e.Error())
	}
	detail := fmt.Sprint(len(page.Jobs))
	if len(errs) > 0 {
		detail += ": " + strings.Join(errs, "; ")
	}
	report("list", err, detail)
	err = chmodAll(0o700)
	report("restore", err, "")
	if err != nil {
		return
	}
	_, err = s.Fsck(ctx, true)
	report("fsck", errors.Join(err), "")
}
