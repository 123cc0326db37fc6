package filestore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// Hostile inputs: what a careless or malicious caller, a confused operator
// or a second program sharing the volume can do to a store. Each test works
// on a real store in a temporary directory and checks that the store
// refuses clearly, touches nothing outside its directory, follows no
// symbolic link and keeps serving the jobs that are fine.

// badIDs are strings passed where a job ID is expected.
var badIDs = []string{
	"",
	".",
	"..",
	"../x",
	"a/b",
	"/etc/passwd",
	"../../../../../../../../etc/passwd",
	"\x00",
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Q\x00",
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Q7\x00",
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Q/",
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Q7/..",
	"../queued/01KB7Y3R6X8QJ0A7Z2M4N5P6Q7",
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Q7.json",
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Q7\n",
	"01kb7y3r6x8qj0a7z2m4n5p6q7", // lower case is not canonical
	"81KB7Y3R6X8QJ0A7Z2M4N5P6Q7", // overflows the timestamp
	"01KB7Y3R6X8QJ0A7Z2M4N5P6QI", // I is not Crockford base32
	"О1KB7Y3R6X8QJ0A7Z2M4N5P6Q7", // Cyrillic capital O for 0
	"０1KB7Y3R6X8QJ0A7Z2M4N5P6Q7", // fullwidth digit zero
	"０１ＫＢ７Ｙ３Ｒ６Ｘ８ＱＪ０Ａ７Ｚ２Ｍ４Ｎ５Ｐ６Ｑ７", // all fullwidth
	"01KB7Y3R6X8QJ0A7Z2M4N5P6Qⅶ", // Roman numeral seven
	"01ΚΒ7Y3R6X8QJ0A7Z2M4N5P6Q7", // Greek Kappa and Beta
	"%2e%2e%2fx",
	"..\\..\\x",
	strings.Repeat("0", 10000),
}

// TestHostileIDsTouchNothing passes bad IDs to every operation that takes
// one: each is refused with ErrInvalidID, and no file in or around the
// store appears, changes or disappears.
func TestHostileIDsTouchNothing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	job, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "k"})
	require.NoError(t, err)
	before := snapshotTree(t, parent)
	passwd, err := os.Stat("/etc/passwd")
	passwdOK := err == nil

	for _, id := range badIDs {
		name := fmt.Sprintf("%.40q", id)
		_, err := s.Get(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "get %s", name)
		_, err = s.Cancel(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "cancel %s", name)
		_, err = s.Retry(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "retry %s", name)
		_, err = s.Wait(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "wait %s", name)
		_, err = s.Complete(ctx, jobstore.Lease{ID: id, Worker: "w", Attempt: 1}, jobstore.Succeeded(nil))
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "complete %s", name)
		err = s.WatchCancel(ctx, jobstore.Lease{ID: id, Worker: "w", Attempt: 1})
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "watch cancel %s", name)
		if id != "" {
			_, err = s.List(ctx, jobstore.ListOptions{Cursor: id})
			require.ErrorIs(t, err, jobstore.ErrInvalidID, "list cursor %s", name)
		}
		require.Less(t, len(err.Error()), 512, "the error quotes a bounded part of the ID")
	}

	// Other strings that end up near paths or logs.
	for _, tc := range []struct {
		name string
		spec jobstore.Spec
	}{
		{"10,000-byte key", jobstore.Spec{Kind: "k", Key: strings.Repeat("k", 10000)}},
		{"key one byte over", jobstore.Spec{Kind: "k", Key: strings.Repeat("k", jobstore.MaxKeyLen+1)}},
		{"key with NUL", jobstore.Spec{Kind: "k", Key: "a\x00b"}},
		{"key with newline", jobstore.Spec{Kind: "k", Key: "a\nb"}},
		{"key not UTF-8", jobstore.Spec{Kind: "k", Key: "\xff\xfe"}},
		{"kind with NUL", jobstore.Spec{Kind: "k\x00"}},
		{"kind with a space", jobstore.Spec{Kind: "rm -rf"}},
		{"10,000-byte kind", jobstore.Spec{Kind: strings.Repeat("k", 10000)}},
	} {
		_, _, err := s.Submit(ctx, tc.spec)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, tc.name)
		require.Less(t, len(err.Error()), 512, tc.name)
	}
	for _, w := range []string{"", "a b", "w\x00", "w\n", strings.Repeat("w", 10000), "wörker"} {
		_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: w})
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "worker %.40q", w)
	}
	// Kinds are never paths, so "/" and "." are allowed in them; spaces,
	// NUL and other bytes are not.
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"k\x00"}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, err = s.List(ctx, jobstore.ListOptions{Kind: "a b"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, err = s.List(ctx, jobstore.ListOptions{States: []jobstore.State{"../queued"}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)

	require.Equal(t, before, snapshotTree(t, parent), "the tree around the store changed")
	if passwdOK {
		after, err := os.Stat("/etc/passwd")
		require.NoError(t, err)
		require.Equal(t, passwd.ModTime(), after.ModTime())
		require.Equal(t, passwd.Size(), after.Size())
	}
	got, err := s.Get(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

// TestHostileKeysStayInKeysDir submits keys that look like paths and keys
// that look like each other: each gets its own job, every key file is
// directly inside keys/, and nothing is created outside the store.
func TestHostileKeysStayInKeysDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	keys := []string{
		"../../x", "/etc/passwd", "a/b", "..", ".", "keys/../../../x",
		"order-0", "order-О", "order-０", "order-O", // digit zero, Cyrillic O, fullwidth zero, Latin O
		"\u202egnp.exe", "ключ", strings.Repeat("k", jobstore.MaxKeyLen),
	}
	ids := map[string]string{}
	for _, k := range keys {
		j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: k})
		require.NoError(t, err, "%.40q", k)
		require.True(t, created, "%.40q", k)
		require.NotContains(t, slices.Collect(maps.Values(ids)), j.ID, "look-alike keys must not share a job")
		ids[k] = j.ID
	}
	for _, k := range keys {
		j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: k})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, ids[k], j.ID, "%.40q", k)
	}
	ents, err := os.ReadDir(filepath.Join(dir, dirKeys))
	require.NoError(t, err)
	require.Len(t, ents, len(keys))
	for _, e := range ents {
		require.True(t, e.Type().IsRegular(), e.Name())
		require.Len(t, e.Name(), 64+len(recordExt))
	}
	top, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, top, 1, "only the store directory is in its parent")
	var stray []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if strings.Contains(filepath.Base(p), "passwd") || filepath.Base(p) == "x" || filepath.Base(p) == "b" {
			stray = append(stray, p)
		}
		return err
	}))
	require.Empty(t, stray)
}

// TestHostilePayloadAtLimit: a payload or result of exactly the limit is
// accepted and returned byte for byte; one byte more is refused with
// ErrPayloadTooLarge and leaves nothing behind. It checks a small limit and
// the default one.
func TestHostilePayloadAtLimit(t *testing.T) {
	for _, limit := range []int{4096, 0} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			dir := t.TempDir()
			s := openAt(t, dir, &Options{NoSync: true, MaxPayload: limit})
			ctx := t.Context()
			n := limit
			if n == 0 {
				n = jobstore.DefaultMaxPayload
			}
			exact := jsonString(n)
			over := jsonString(n + 1)
			require.Len(t, exact, n)

			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: exact})
			require.NoError(t, err)
			got, err := s.Get(ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, string(exact), string(got.Payload))

			before := snapshotTree(t, dir)
			_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: over})
			require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
			_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "big", Payload: over})
			require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
			require.Equal(t, before, snapshotTree(t, dir), "a refused submit leaves nothing behind")

			c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			require.NoError(t, err)
			_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(over))
			require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
			still, err := s.Get(ctx, c.ID)
			require.NoError(t, err)
			require.True(t, still.Holds(c.Lease()), "a refused result leaves the attempt running")
			done, err := s.Complete(ctx, c.Lease(), jobstore.Succeeded(exact))
			require.NoError(t, err)
			require.Equal(t, jobstore.StateSucceeded, done.State)
			got, err = s.Get(ctx, c.ID)
			require.NoError(t, err)
			require.Equal(t, string(exact), string(got.Result))
		})
	}
}

// jsonString returns a JSON string value of exactly n bytes.
func jsonString(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}

// outsideFile is a file outside the store that a planted symbolic link
// points to, and what it held.
type outsideFile struct {
	path string
	data []byte
	info os.FileInfo
}

func plantOutside(t *testing.T, dir, name string, data []byte) outsideFile {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(p, old, old))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	return outsideFile{path: p, data: data, info: fi}
}

// requireUntouched checks that the file was not written, truncated,
// renamed over, removed or re-moded through the link.
func (o outsideFile) requireUntouched(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(o.path)
	require.NoError(t, err, "the link's target is gone")
	require.Equal(t, string(o.data), string(data), "the link's target was written")
	fi, err := os.Stat(o.path)
	require.NoError(t, err)
	require.True(t, os.SameFile(o.info, fi), "the link's target was replaced")
	require.Equal(t, o.info.Mode(), fi.Mode())
	require.Equal(t, o.info.ModTime(), fi.ModTime())
}

// recordBytes returns the record file a store would write for j.
func recordBytes(t *testing.T, j jobstore.Job, rev int64) []byte {
	t.Helper()
	data, err := encodeRecord(envelope{Rev: rev, Job: j})
	require.NoError(t, err)
	return data
}

// TestHostileSymlinks plants a symbolic link pointing outside the store in
// each of its subdirectories, named as the store would name its own file,
// with a target that would pass for the real thing. The store never
// follows one and never writes through one: every operation that meets it
// refuses clearly or skips it, Fsck reports it (and with repair leaves the
// target alone), and the good jobs keep working.
func TestHostileSymlinks(t *testing.T) {
	now := time.Now().Add(-time.Hour).UTC()
	newJob := func(st jobstore.State, key string) jobstore.Job {
		j := jobstore.NewJob(jobstore.Spec{Kind: "k", Key: key}, now)
		j.State = st
		switch st {
		case jobstore.StateRunning:
			j.Attempt, j.Worker, j.StartedAt = 1, "gone", now
		case jobstore.StateSucceeded:
			j.Attempt, j.FinishedAt = 1, now
		}
		return j
	}
	type env struct {
		s           *Store
		dir         string
		good, spare jobstore.Job
		outside     string
	}
	cases := []struct {
		name string
		// plant creates the link and the file it points to, and returns
		// the link's path and the target.
		plant func(t *testing.T, e env) (string, outsideFile)
		// use exercises the store on it.
		use func(t *testing.T, e env, link string)
		// fsck is the problem Fsck (with repair) must report at the link,
		// and repaired whether it removes the link.
		fsck     ProblemKind
		repaired bool
	}{
		{
			name: "queued",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				j := newJob(jobstore.StateQueued, "")
				o := plantOutside(t, e.outside, "queued.json", recordBytes(t, j, 1))
				link := e.s.recordPath(dirQueued, j.ID)
				require.NoError(t, os.Symlink(o.path, link))
				require.NoError(t, os.WriteFile(e.s.lockPath(j.ID), nil, 0o600))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				id := strings.TrimSuffix(filepath.Base(link), recordExt)
				requireCorruptAt(t, link, func() error { _, err := e.s.Get(t.Context(), id); return err })
				requireCorruptAt(t, link, func() error { _, err := e.s.Cancel(t.Context(), id); return err })
				requireCorruptAt(t, link, func() error { _, err := e.s.Retry(t.Context(), id); return err })
				requireClaimsOnly(t, e.s, e.good.ID)
			},
			fsck: ProblemCorrupt,
		},
		{
			name: "claimed",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				j := newJob(jobstore.StateRunning, "")
				o := plantOutside(t, e.outside, "claimed.json", recordBytes(t, j, 2))
				link := e.s.recordPath(dirClaimed, j.ID)
				require.NoError(t, os.Symlink(o.path, link))
				require.NoError(t, os.WriteFile(e.s.lockPath(j.ID), nil, 0o600))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				id := strings.TrimSuffix(filepath.Base(link), recordExt)
				// Its "worker" is dead: recovery must look at it and leave
				// it alone rather than write the recovered job through it.
				_, err := e.s.recoverDead(t.Context(), true)
				require.NoError(t, err)
				requireCorruptAt(t, link, func() error { _, err := e.s.Cancel(t.Context(), id); return err })
				requireClaimsOnly(t, e.s, e.good.ID)
			},
			fsck: ProblemCorrupt,
		},
		{
			name: "done",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				j := newJob(jobstore.StateSucceeded, "")
				o := plantOutside(t, e.outside, "done.json", recordBytes(t, j, 3))
				link := e.s.recordPath(dirDone, j.ID)
				require.NoError(t, os.Symlink(o.path, link))
				require.NoError(t, os.WriteFile(e.s.lockPath(j.ID), nil, 0o600))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				id := strings.TrimSuffix(filepath.Base(link), recordExt)
				requireCorruptAt(t, link, func() error { _, err := e.s.Retry(t.Context(), id); return err })
				// An old finished job: prune must not delete the target.
				_, err := e.s.Prune(t.Context(), 0)
				require.NoError(t, err)
			},
			fsck: ProblemCorrupt,
		},
		{
			name: "keys",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				j := newJob(jobstore.StateQueued, "planted")
				o := plantOutside(t, e.outside, "key.json", recordBytes(t, j, 1))
				link := e.s.keyPath(keyName("planted"))
				require.NoError(t, os.Symlink(o.path, link))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				requireCorruptAt(t, link, func() error {
					_, _, err := e.s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "planted"})
					return err
				})
			},
			fsck: ProblemCorrupt,
		},
		{
			name: "locks",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				// The good job's record lock.
				o := plantOutside(t, e.outside, "lock", []byte("not a lock\n"))
				link := e.s.lockPath(e.good.ID)
				require.NoError(t, os.Remove(link))
				require.NoError(t, os.Symlink(o.path, link))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				// Reads take no record lock: the job reads as it is.
				j, err := e.s.Get(t.Context(), e.good.ID)
				require.NoError(t, err)
				require.Equal(t, e.good.ID, j.ID)
				requireCorruptAt(t, link, func() error { _, err := e.s.Cancel(t.Context(), e.good.ID); return err })
				requireClaimsOnly(t, e.s, e.spare.ID)
				page, err := e.s.List(t.Context(), jobstore.ListOptions{})
				require.NoError(t, err)
				require.Empty(t, page.Errors)
			},
			fsck: ProblemCorrupt,
		},
		{
			name: "records.lock",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				// The file whose bytes are the record locks (Linux).
				o := plantOutside(t, e.outside, "records", []byte("not a lock\n"))
				link := e.s.locksPath(recordLocksName)
				require.NoError(t, os.Remove(link))
				require.NoError(t, os.Symlink(o.path, link))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				// Reads take no record lock; every change fails, naming
				// the link, and changes nothing.
				j, err := e.s.Get(t.Context(), e.good.ID)
				require.NoError(t, err)
				require.Equal(t, e.good, j)
				_, err = e.s.Cancel(t.Context(), e.good.ID)
				require.ErrorContains(t, err, link)
				_, err = e.s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
				require.ErrorContains(t, err, link)
				j, err = e.s.Get(t.Context(), e.good.ID)
				require.NoError(t, err)
				require.Equal(t, e.good, j)
				page, err := e.s.List(t.Context(), jobstore.ListOptions{})
				require.NoError(t, err)
				require.Empty(t, page.Errors)
			},
			fsck:     ProblemCorrupt,
			repaired: true,
		},
		{
			name: "leases.lock",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				// The file whose bytes are the leases (Linux).
				o := plantOutside(t, e.outside, "leases", []byte("not a lock\n"))
				link := e.s.locksPath(leasesName)
				_ = os.Remove(link) // made by the first claim
				require.NoError(t, os.Symlink(o.path, link))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				// Every claim fails, naming the link, and changes nothing;
				// other changes go on.
				_, err := e.s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
				require.ErrorContains(t, err, link)
				j, err := e.s.Get(t.Context(), e.good.ID)
				require.NoError(t, err)
				require.Equal(t, e.good, j)
				_, err = e.s.recoverDead(t.Context(), true)
				require.NoError(t, err)
				_, err = e.s.Cancel(t.Context(), e.good.ID)
				require.NoError(t, err)
			},
			fsck:     ProblemCorrupt,
			repaired: true,
		},
		{
			name: "lease",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				// The good job's lease lock.
				o := plantOutside(t, e.outside, "lease", []byte("not a lease\n"))
				link := e.s.leasePath(e.good.ID)
				require.NoError(t, os.Symlink(o.path, link))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				if e.s.ranges != nil {
					// A lease is a byte of locks/leases.lock, and the claim's
					// note an extended attribute of the record: the link is
					// never opened. Both jobs run, the good one first (its
					// priority).
					for _, want := range []string{e.good.ID, e.spare.ID} {
						j, err := e.s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
						require.NoError(t, err)
						require.Equal(t, want, j.ID)
						_, err = e.s.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
						require.NoError(t, err)
					}
					return
				}
				// The bad job is skipped; once it is the only one left,
				// Claim says why it cannot be claimed.
				j, err := e.s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
				require.NoError(t, err)
				require.Equal(t, e.spare.ID, j.ID)
				_, err = e.s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
				require.Error(t, err)
				require.Contains(t, err.Error(), link)
				_, err = e.s.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
				require.NoError(t, err)
				_, err = e.s.recoverDead(t.Context(), true)
				require.NoError(t, err)
			},
			fsck: ProblemCorrupt,
		},
		{
			name: "tmp",
			plant: func(t *testing.T, e env) (string, outsideFile) {
				// The staging directory of a Store that is gone, except
				// that it is a link to a directory outside with a file in
				// it.
				target := filepath.Join(e.outside, "stage")
				require.NoError(t, os.Mkdir(target, 0o700))
				o := plantOutside(t, target, "precious", []byte("keep me\n"))
				link := filepath.Join(e.dir, dirTmp, jobstore.NewID(now))
				require.NoError(t, os.Symlink(target, link))
				require.NoError(t, os.WriteFile(link+recordLock, nil, 0o600))
				// And a link to a file, as a stray temp file.
				require.NoError(t, os.WriteFile(filepath.Join(e.outside, "stray"), []byte("keep me too\n"), 0o644))
				require.NoError(t, os.Symlink(filepath.Join(e.outside, "stray"), filepath.Join(e.dir, dirTmp, ".new.1.2.3")))
				return link, o
			},
			use: func(t *testing.T, e env, link string) {
				stray := filepath.Join(e.dir, dirTmp, ".new.1.2.3")
				r, err := e.s.Fsck(t.Context(), true)
				require.NoError(t, err)
				require.True(t, slices.ContainsFunc(r.Problems, func(p Problem) bool {
					return p.Kind == ProblemTempFile && p.Path == stray && p.Repaired
				}), "%v", r.Problems)
				require.True(t, slices.ContainsFunc(r.Problems, func(p Problem) bool {
					return p.Kind == ProblemTempFile && p.Path == link && p.Repaired
				}), "%v", r.Problems)
				_, err = os.Lstat(stray)
				require.ErrorIs(t, err, fs.ErrNotExist)
				data, err := os.ReadFile(filepath.Join(e.outside, "stray"))
				require.NoError(t, err)
				require.Equal(t, "keep me too\n", string(data))
			},
			fsck:     ProblemTempFile,
			repaired: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "store")
			outside := filepath.Join(parent, "outside")
			require.NoError(t, os.Mkdir(outside, 0o755))
			if tc.name == "locks" {
				useLockFiles(t, dir) // the protocol with a lock file per job
			}
			s, err := Open(t.Context(), dir, &Options{NoSync: true})
			require.NoError(t, err)
			defer s.Close()
			if tc.name == "records.lock" || tc.name == "leases.lock" {
				requireRangeLocks(t, s)
			}
			good, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "good", Priority: 1})
			require.NoError(t, err)
			e := env{s: s, dir: dir, good: good, outside: outside}
			if tc.name == "locks" || tc.name == "lease" {
				// A second job, with its own record lock file, to show that
				// claims go on past the bad one.
				e.spare, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
				require.NoError(t, err)
			}
			link, target := tc.plant(t, e)
			outsideBefore := snapshotTree(t, outside)

			tc.use(t, e, link)
			_, err = s.List(t.Context(), jobstore.ListOptions{})
			require.NoError(t, err)
			r, err := s.Fsck(t.Context(), true)
			require.NoError(t, err)
			if tc.repaired {
				// Reported by the Fsck in use above.
				_, err := os.Lstat(link)
				require.ErrorIs(t, err, fs.ErrNotExist, "the link is removed, not followed")
			} else {
				require.True(t, slices.ContainsFunc(r.Problems, func(p Problem) bool {
					return p.Kind == tc.fsck && p.Path == link && !p.Repaired
				}), "fsck does not report %s at %s: %v", tc.fsck, link, r.Problems)
			}
			target.requireUntouched(t)
			require.Equal(t, outsideBefore, snapshotTree(t, outside))

			// Once the link is gone the store is whole again.
			require.NoError(t, s.Close())
			_ = os.Remove(link)
			if tc.name == "locks" {
				require.NoError(t, os.WriteFile(link, nil, 0o600))
			}
			requireConsistent(t, dir)
			target.requireUntouched(t)
		})
	}

	// A state directory that is itself a link is refused at open.
	t.Run("state directory", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "store")
		s, err := Open(t.Context(), dir, &Options{NoSync: true})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		outside := filepath.Join(parent, "outside")
		require.NoError(t, os.Mkdir(outside, 0o700))
		for _, d := range []string{dirQueued, dirClaimed, dirDone, dirKeys, dirLocks, dirTmp} {
			p := filepath.Join(dir, d)
			require.NoError(t, os.Rename(p, p+".real"))
			require.NoError(t, os.Symlink(outside, p))
			_, err := Open(t.Context(), dir, &Options{NoSync: true})
			require.Error(t, err, d)
			require.Contains(t, err.Error(), p)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Rename(p+".real", p))
		}
		ents, err := os.ReadDir(outside)
		require.NoError(t, err)
		require.Empty(t, ents, "nothing was created through a linked state directory")
		requireConsistent(t, dir)
	})
}

// requireCorruptAt requires fn to fail with a *CorruptError naming path.
func requireCorruptAt(t *testing.T, path string, fn func() error) {
	t.Helper()
	err := fn()
	require.ErrorIs(t, err, jobstore.ErrCorrupt)
	var ce *CorruptError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, path, ce.Path)
}

// requireClaimsOnly claims until ErrNoJob and requires exactly job id to
// have been claimed, then completes it.
func requireClaimsOnly(t *testing.T, s *Store, id string) {
	t.Helper()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, id, j.ID)
	_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	_, err = s.Complete(t.Context(), j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
}

// TestHostileLockFileNotRegular plants a FIFO and a directory where two
// jobs' record lock files are. A change of either job fails at once with
// an error that names the file, instead of waiting forever to open the
// FIFO; neither planted file is removed, and the job's record is left as
// it was.
func TestHostileLockFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	useLockFiles(t, dir) // the protocol with a lock file per job
	s, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	ctx := t.Context()
	fifoJob, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	dirJob, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	fifo, sub := s.lockPath(fifoJob.ID), s.lockPath(dirJob.ID)
	require.NoError(t, os.Remove(fifo))
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Remove(sub))
	require.NoError(t, os.Mkdir(sub, 0o700))

	for _, c := range []struct {
		id, path, why string
	}{{fifoJob.ID, fifo, "not a regular file"}, {dirJob.ID, sub, "is a directory"}} {
		done := make(chan error, 1)
		go func() { _, err := s.Cancel(ctx, c.id); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err)
			require.ErrorContains(t, err, c.path)
			require.ErrorContains(t, err, c.why)
		case <-time.After(10 * time.Second):
			t.Fatalf("Cancel of a job whose lock file is not a regular file did not return")
		}
		j, err := s.Get(ctx, c.id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, j.State)
	}
	fi, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, fi.Mode().Type())
	fi, err = os.Lstat(sub)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
}

// TestHostileRecordIsDirectory replaces a queued record, a finished record
// and a key file with directories holding a file. Every operation on them
// reports a *CorruptError naming the path; nothing removes them, not even
// Fsck with repair or Prune; the store opens and serves the other jobs.
func TestHostileRecordIsDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	ctx := t.Context()
	queued, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "q"})
	require.NoError(t, err)
	finished, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = s.Cancel(ctx, finished.ID)
	require.NoError(t, err)
	good, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)

	toDir := func(p string) {
		require.NoError(t, os.Remove(p))
		require.NoError(t, os.Mkdir(p, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(p, "inside"), []byte("x"), 0o600))
	}
	qp := s.recordPath(dirQueued, queued.ID)
	dp := s.recordPath(dirDone, finished.ID)
	kp := s.keyPath(keyName("q"))
	toDir(qp)
	toDir(dp)
	toDir(kp)
	// A FIFO, which blocks a reader that opens it without O_NONBLOCK, as
	// a record and as a key file.
	fifoJob, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "fifo"})
	require.NoError(t, err)
	fp := s.recordPath(dirQueued, fifoJob.ID)
	fkp := s.keyPath(keyName("fifo"))
	for _, p := range []string{fp, fkp} {
		require.NoError(t, os.Remove(p))
		require.NoError(t, syscall.Mkfifo(p, 0o600))
	}
	s.mu.Lock()
	clear(s.keys) // as in another process, which has not seen this key yet
	s.mu.Unlock()

	requireCorruptAt(t, qp, func() error { _, err := s.Get(ctx, queued.ID); return err })
	requireCorruptAt(t, qp, func() error { _, err := s.Cancel(ctx, queued.ID); return err })
	requireCorruptAt(t, dp, func() error { _, err := s.Retry(ctx, finished.ID); return err })
	requireCorruptAt(t, dp, func() error { _, err := s.Wait(ctx, finished.ID); return err })
	requireCorruptAt(t, kp, func() error {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "q"})
		return err
	})
	requireCorruptAt(t, fp, func() error { _, err := s.Get(ctx, fifoJob.ID); return err })
	requireCorruptAt(t, fkp, func() error {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "fifo"})
		return err
	})
	requireClaimsOnly(t, s, good.ID)

	page, err := s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Len(t, page.Errors, 3)
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the good job is pruned")

	r, err := s.Fsck(ctx, true)
	require.NoError(t, err)
	for _, p := range []string{qp, dp, kp, fp, fkp} {
		require.True(t, slices.ContainsFunc(r.Problems, func(pr Problem) bool {
			return pr.Kind == ProblemCorrupt && pr.Path == p && !pr.Repaired
		}), "fsck does not report %s: %v", p, r.Problems)
	}
	require.NoError(t, s.Close())

	s2, err := Open(ctx, dir, &Options{NoSync: true})
	require.NoError(t, err)
	defer s2.Close()
	for _, p := range []string{qp, dp, kp} {
		data, err := os.ReadFile(filepath.Join(p, "inside"))
		require.NoError(t, err, "%s was removed", p)
		require.Equal(t, "x", string(data))
	}
	j, _, err := s2.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = s2.Get(ctx, j.ID)
	require.NoError(t, err)
}

// Child processes of the hostile tests re-run this test binary
// (internal/testproc) with the test and its role selected; the test then
// plays the child and prints "RESULT <json>" lines. hostileDirEnv names the
// store and hostileIDEnv a job.
const (
	hostileDirEnv = "FILESTORE_HOSTILE_DIR"
	hostileIDEnv  = "FILESTORE_HOSTILE_ID"
)

// opResult is one operation's outcome as a child reports it.
type opResult struct {
	Op         string `json:"op"`
	Err        string `json:"err,omitempty"`
	Permission bool   `json:"permission,omitempty"`
	Corrupt    bool   `json:"corrupt,omitempty"`
	NotFound   bool   `json:"not_found,omitempty"`
	NotExist   bool   `json:"not_exist,omitempty"`
	ReadOnly   bool   `json:"read_only,omitempty"`
	NoSpace    bool   `json:"no_space,omitempty"`
	Detail     string `json:"detail,omitempty"`
}

func report(op string, err error, detail string) {
	r := opResult{Op: op, Detail: detail}
	if err != nil {
		r.Err = err.Error()
		r.Permission = errors.Is(err, fs.ErrPermission)
		r.Corrupt = errors.Is(err, jobstore.ErrCorrupt)
		r.NotFound = errors.Is(err, jobstore.ErrNotFound)
		r.NotExist = errors.Is(err, fs.ErrNotExist)
		r.ReadOnly = errors.Is(err, syscall.EROFS)
		r.NoSpace = errors.Is(err, syscall.ENOSPC)
	}
	data, _ := json.Marshal(r)
	fmt.Printf("RESULT %s\n", data)
}

// childResults parses a child's output into its results by operation.
func childResults(t *testing.T, out string) map[string]opResult {
	t.Helper()
	res := map[string]opResult{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "RESULT ")
		if !ok {
			continue
		}
		var r opResult
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		res[r.Op] = r
	}
	return res
}

// runAs runs the test named test in the binary bin (a copy made by
// testproc.Unprivileged) with the credentials cred, role and env, requires
// that it passed without a panic, and returns its output. It skips the
// test if the system does not let it switch users.
func runAs(t *testing.T, cred *syscall.Credential, bin, test, role string, env ...string) string {
	t.Helper()
	out, err := testproc.Run(t.Context(), t, role, &testproc.Options{
		Test: test, Exe: bin, Dir: filepath.Dir(bin), BareEnv: true, Cred: cred, Env: env})
	require.NoError(t, err, "child failed:\n%s", out)
	require.NotContains(t, out, "panic:", "the child crashed:\n%s", out)
	return out
}

// TestHostileUnreadableRecord: a record owned by root with mode 0000, read
// by a process that is not root. Open, Get, List, Claim, Cancel and Fsck
// all keep running and say which file they cannot read; the other jobs
// are served.
func TestHostileUnreadableRecord(t *testing.T) {
	if testproc.Name() == "unreadable" {
		unreadableChild(t)
		return
	}
	base, bin := testproc.Unprivileged(t)
	dir := filepath.Join(base, "store")
	s, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	locked, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	good, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, chownTree(dir, 65534, 65534))
	rp := s.recordPath(dirQueued, locked.ID)
	require.NoError(t, os.Chown(rp, 0, 0))
	require.NoError(t, os.Chmod(rp, 0))

	out := runAs(t, testproc.Nobody(), bin, "TestHostileUnreadableRecord", "unreadable",
		hostileDirEnv+"="+dir, hostileIDEnv+"="+locked.ID)
	res := childResults(t, out)
	t.Logf("child:\n%s", out)

	require.Empty(t, res["open"].Err, "open")
	for _, op := range []string{"get", "cancel"} {
		r := res[op]
		require.True(t, r.Permission, "%s: %+v", op, r)
		require.True(t, r.Corrupt, "%s: %+v", op, r)
		require.Contains(t, r.Err, rp, "%s names the file", op)
		require.Contains(t, r.Err, "permission denied")
	}
	require.Empty(t, res["list"].Err, "one unreadable record does not stop List")
	require.Contains(t, res["list"].Detail, good.ID)
	require.Contains(t, res["list"].Detail, rp, "list reports the file it skipped")
	require.Empty(t, res["claim"].Err, "claim takes the readable job")
	require.Equal(t, good.ID, res["claim"].Detail)
	require.Empty(t, res["complete"].Err)
	require.Empty(t, res["fsck"].Err, "one unreadable record does not stop Fsck")
	require.Contains(t, res["fsck"].Detail, "corrupt: "+rp, "fsck names the file")

	// The record is untouched.
	fi, err := os.Stat(rp)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0), fi.Mode().Perm())
}

func unreadableChild(t *testing.T) {
	ctx := t.Context()
	dir, id := os.Getenv(hostileDirEnv), os.Getenv(hostileIDEnv)
	s, err := Open(ctx, dir, &Options{NoSync: true})
	report("open", err, "")
	if err != nil {
		return
	}
	defer s.Close()
	_, err = s.Get(ctx, id)
	report("get", err, "")
	_, err = s.Cancel(ctx, id)
	report("cancel", err, "")
	page, err := s.List(ctx, jobstore.ListOptions{})
	var detail []string
	for _, j := range page.Jobs {
		detail = append(detail, j.ID)
	}
	for _, e := range page.Errors {
		detail = append(detail, e.Error())
	}
	report("list", err, strings.Join(detail, "; "))
	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "nobody"})
	report("claim", err, j.ID)
	if err == nil {
		_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		report("complete", err, "")
	}
	r, err := s.Fsck(ctx, false)
	var probs []string
	for _, p := range r.Problems {
		probs = append(probs, p.String())
	}
	report("fsck", err, strings.Join(probs, "; "))
}

func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// countingStore counts the calls a runner makes, to tell a worker that
// waits from one that spins.
type countingStore struct {
	jobstore.Store
	calls atomic.Int64
}

func (c *countingStore) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	c.calls.Add(1)
	return c.Store.Claim(ctx, req)
}

func (c *countingStore) AwaitWork(ctx context.Context) error {
	c.calls.Add(1)
	return c.Store.AwaitWork(ctx)
}

func (c *countingStore) Complete(ctx context.Context, l jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	c.calls.Add(1)
	return c.Store.Complete(ctx, l, o)
}

func (c *countingStore) WatchCancel(ctx context.Context, l jobstore.Lease) error {
	c.calls.Add(1)
	return c.Store.WatchCancel(ctx, l)
}

// TestHostileStoreRemovedUnderRunner removes the whole store directory
// while a worker process (runner.Runner on a filestore) is running a job.
// The worker must neither crash nor spin: over the next seconds it makes
// few store calls and uses little CPU; it stops cleanly on SIGTERM; and
// every operation it tries afterwards fails with an error that says what
// is missing.
func TestHostileStoreRemovedUnderRunner(t *testing.T) {
	if testproc.Name() == "runner" {
		removedRunnerChild(t)
		return
	}
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(t.Context(), dir, &Options{NoSync: true})
	require.NoError(t, err)
	for range 3 {
		_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "quick"})
		require.NoError(t, err)
	}
	slow, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "slow", Priority: -1})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	c := testproc.Start(t, "runner", &testproc.Options{Test: "TestHostileStoreRemovedUnderRunner",
		Env: []string{hostileDirEnv + "=" + dir, hostileIDEnv + "=" + slow.ID}})
	var all strings.Builder
	var calls int64
	// seen counts the lines read so far by prefix, so that lines the child
	// prints in another order than awaited are not lost.
	seen := map[string]int{}
	prefixes := []string{"done ", "started " + slow.ID, "calls "}
	// await reads lines until n lines beginning with want have been read
	// in all, counting those read by earlier calls.
	await := func(want string, n int) {
		t.Helper()
		for seen[want] < n {
			l := c.Next(t)
			all.WriteString(l + "\n")
			if n, ok := strings.CutPrefix(l, "calls "); ok {
				_, _ = fmt.Sscan(n, &calls)
			}
			for _, p := range prefixes {
				if strings.HasPrefix(l, p) {
					seen[p]++
				}
			}
		}
	}
	next := func(want string) { t.Helper(); await(want, seen[want]+1) }
	await("done ", 3)
	await("started "+slow.ID, 1)

	// The worker may create a lock file while the tree is removed; remove
	// until nothing is left.
	require.Eventually(t, func() bool { return os.RemoveAll(dir) == nil }, 10*time.Second, 10*time.Millisecond)
	cpu0 := processCPU(t, c.Pid())
	next("calls ")
	calls0, start := calls, time.Now()
	time.Sleep(3 * time.Second) // a window in which to watch it idle
	next("calls ")
	calls1, elapsed := calls, time.Since(start)
	cpu1 := processCPU(t, c.Pid())
	t.Logf("after removal: %d store calls and %s of CPU in %s", calls1-calls0, cpu1-cpu0, elapsed.Round(time.Millisecond))
	require.Less(t, calls1-calls0, int64(100), "the worker spins on a store that is gone")
	require.Less(t, cpu1-cpu0, elapsed/2, "the worker burns CPU on a store that is gone")
	require.NotContains(t, c.Output(), "panic:")

	require.NoError(t, c.Signal(syscall.SIGTERM))
	for _, l := range c.Lines(t) { // the worker stops cleanly
		all.WriteString(l + "\n")
	}
	res := childResults(t, all.String())
	t.Logf("child:\n%s", all.String())
	require.Contains(t, all.String(), "ended "+slow.ID, "the running job's handler was stopped")
	require.Empty(t, res["run"].Err, "the runner stops cleanly on SIGTERM")
	for _, op := range []string{"submit", "get", "cancel", "list", "stats", "claim", "prune", "fsck"} {
		r, ok := res[op]
		require.True(t, ok, "no result for %s", op)
		require.NotEmpty(t, r.Err, "%s succeeded on a store that is gone", op)
		require.True(t, r.NotExist || r.NotFound, "%s: %s", op, r.Err)
		if r.NotFound {
			require.Contains(t, r.Err, "directory is missing", "%s does not say the store is gone", op)
		}
	}
}

// processCPU returns the CPU time (user and system) process pid has used.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime 14 and stime 15, in clock ticks of 1/100 s.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var utime, stime int64
	_, err = fmt.Sscan(f[11], &utime)
	require.NoError(t, err)
	_, err = fmt.Sscan(f[12], &stime)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func removedRunnerChild(t *testing.T) {
	dir, slowID := os.Getenv(hostileDirEnv), os.Getenv(hostileIDEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s, err := Open(ctx, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	cs := &countingStore{Store: s}
	r := runner.New(cs, &runner.Options{
		Concurrency: 2, PollInterval: 200 * time.Millisecond,
		CompleteTimeout: 2 * time.Second, ShutdownGrace: -1,
	})
	r.Handle("quick", runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		fmt.Println("done", j.ID)
		return nil, nil
	}))
	r.Handle("slow", runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		fmt.Println("started", j.ID)
		<-ctx.Done()
		fmt.Println("ended", j.ID, context.Cause(ctx))
		return nil, ctx.Err()
	}))
	tick := make(chan struct{})
	go func() {
		defer close(tick)
		for {
			fmt.Println("calls", cs.calls.Load())
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	err = r.Run(ctx)
	report("run", err, "")
	<-tick

	op, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = s.Submit(op, jobstore.Spec{Kind: "quick"})
	report("submit", err, "")
	_, err = s.Get(op, slowID)
	report("get", err, "")
	_, err = s.Cancel(op, slowID)
	report("cancel", err, "")
	_, err = s.List(op, jobstore.ListOptions{})
	report("list", err, "")
	_, err = s.Stats(op)
	report("stats", err, "")
	_, err = s.Claim(op, jobstore.ClaimRequest{Worker: "w"})
	report("claim", err, "")
	_, err = s.Prune(op, 0)
	report("prune", err, "")
	_, err = s.Fsck(op, true)
	report("fsck", err, "")
}

// TestStateDirSwapped replaces state directories with symbolic links to a
// foreign directory after Open, as a local attacker with write access to the
// store's parent might. The store resolves its paths from the directory it
// opened, so the operations that would write there fail, and nothing lands in
// the foreign directory.
func TestStateDirSwapped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(t.Context(), dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()

	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	claimed, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)

	foreign := t.TempDir()
	swap := func(name string) {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.Rename(p, p+".moved"))
		require.NoError(t, os.Symlink(foreign, p))
	}
	requireForeignEmpty := func() {
		t.Helper()
		entries, err := os.ReadDir(foreign)
		require.NoError(t, err)
		require.Empty(t, entries, "a write went through a swapped state directory")
	}

	swap(dirDone)
	_, err = s.Complete(ctx, claimed.Lease(), jobstore.Outcome{})
	require.Error(t, err, "Complete wrote through done/ swapped for a link")
	requireForeignEmpty()

	swap(dirQueued)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.Error(t, err, "Submit wrote through queued/ swapped for a link")
	requireForeignEmpty()

	swap(dirKeys)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "a-key"})
	require.Error(t, err, "Submit wrote a key through keys/ swapped for a link")
	requireForeignEmpty()
}

// TestWriteAfterCloseIsErrClosed: a write still in flight when Close
// released the store's directory fails with jobstore.ErrClosed, as it would
// had it started a moment later, not with a raw "file already closed".
func TestWriteAfterCloseIsErrClosed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(t.Context(), dir, nil)
	require.NoError(t, err)
	fsys := s.fs
	require.NoError(t, s.Close())
	err = fsys.Mkdir(filepath.Join(dir, "late"), 0o700)
	require.ErrorIs(t, err, jobstore.ErrClosed)
	require.NoDirExists(t, filepath.Join(dir, "late"))
	// A change made relative to a state directory's descriptor (dirpins.go)
	// too: the descriptors were closed with the store.
	late := filepath.Join(dir, dirQueued, "late.json")
	early := filepath.Join(dir, dirDone, "early.json")
	require.NoError(t, os.WriteFile(early, nil, 0o600))
	require.ErrorIs(t, fsys.Rename(early, late), jobstore.ErrClosed)
	require.ErrorIs(t, fsys.Remove(filepath.Join(dir, dirDone, "x.json")), jobstore.ErrClosed)
	require.ErrorIs(t, fsys.SyncDir(filepath.Join(dir, dirQueued)), jobstore.ErrClosed)
	require.NoFileExists(t, late)
}
