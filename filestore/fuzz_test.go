package filestore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// The fuzz tests run their seeds, and the corpora under testdata/fuzz, as
// ordinary tests; `go test -fuzz=FuzzX ./filestore` explores further.

const fuzzID = "01KB7Y3R6X8QJ0A7Z2M4N5P6Q7"

// recordSeeds returns record files to start the decoder from: valid ones
// in every state, and damaged ones of the kinds a crash, a bad disk or a
// person with an editor produces.
func recordSeeds(t testing.TB) [][]byte {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	j := jobstore.NewJob(jobstore.Spec{Kind: "email.send", Key: "order-42", Payload: []byte(`{"to":"a@example.com","n":[1,2.5,null]}`), Priority: 3}, now)
	j.ID = fuzzID
	var seeds [][]byte
	add := func(env envelope) {
		data, err := encodeRecord(env)
		require.NoError(t, err)
		seeds = append(seeds, data)
	}
	add(envelope{Rev: 1, Job: j})
	r, err := storekit.ApplyClaim(j, "host-1-4242", now.Add(time.Second))
	require.NoError(t, err)
	add(envelope{Rev: 2, Job: r})
	done, err := storekit.ApplyOutcome(r, r.Lease(), jobstore.Succeeded([]byte(`{"sent":true}`)), now.Add(2*time.Second), nil)
	require.NoError(t, err)
	add(envelope{Rev: 3, Job: done})
	failed, err := storekit.ApplyOutcome(r, r.Lease(), jobstore.Outcome{Error: "smtp: 421 \"try later\"\n\x01", Permanent: true}, now.Add(2*time.Second), nil)
	require.NoError(t, err)
	add(envelope{Rev: 3, Job: failed})

	good := seeds[0]
	seeds = append(seeds,
		good[:len(good)/2],          // truncated
		good[:len(good)-2],          // lost the closing brace
		bytes.Repeat([]byte{0}, 64), // a block of zeros after a crash
		[]byte(""),
		[]byte("null"),
		[]byte("[]"),
		[]byte(`{}`),
		[]byte(`{"format":1,"rev":1,"job":null}`),
		[]byte(`{"format":2,"rev":1,"job":{"id":"`+fuzzID+`","state":"queued"}}`),
		[]byte(`{"format":1,"rev":0,"job":{"id":"`+fuzzID+`","state":"queued"}}`),
		[]byte(`{"format":1,"rev":-9223372036854775808,"job":{"id":"`+fuzzID+`","state":"queued"}}`),
		[]byte(`{"format":1,"rev":1e400,"job":{"id":"`+fuzzID+`","state":"queued"}}`),
		[]byte(`{"format":1,"rev":1,"job":{"id":"../../etc/passwd","state":"queued"}}`),
		[]byte(`{"format":1,"rev":1,"job":{"id":"`+fuzzID+`","state":"exploded"}}`),
		[]byte(`{"format":1,"rev":1,"job":{"id":"`+fuzzID+`","state":"queued","run_at":"not a time"}}`),
		[]byte(`{"FORMAT":1,"Rev":1,"JOB":{"ID":"`+fuzzID+`","State":"queued","payload":{"a":[]}}}`),
		[]byte(`{"format":1,"rev":1,"rev":2,"job":{"id":"`+fuzzID+`","state":"running","key":"\ud800","worker":"\u0000"}}`),
		[]byte(`{"format":1,"rev":1,"job":{"id":"`+fuzzID+`","state":"queued","payload":  [ 1 , 2 ] ,"timeout_ns":-1}}`+"\n\n"),
		[]byte("{\"format\":1,\"rev\":1,\"job\":{\"id\":\""+fuzzID+"\",\"state\":\"queued\",\"kind\":\"\xff\xfe\"}}"),
		// A record of the old single-process store: a bare job.
		[]byte(`{"id":"`+fuzzID+`","kind":"k","state":"running","attempt":1}`),
	)
	return seeds
}

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder, directly
// and through a file read as a store reads it. A file that is not a valid
// record never panics and is reported as a *CorruptError that wraps
// jobstore.ErrCorrupt and names the file; a file that decodes passes every
// check a reader relies on, and re-encodes to a record that decodes to the
// same job and encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range recordSeeds(f) {
		f.Add(s)
	}
	dir := f.TempDir()
	s := &Store{dir: dir, opts: (&Options{MaxPayload: 4096}).withDefaults()}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, dirQueued, fuzzID+recordExt)
		env, err := decodeRecord(path, "", data, s.maxRecord())
		requireDecoded(t, path, data, env, err)

		// A file with the same bytes reads the same, and a record of
		// another job is refused.
		fp := filepath.Join(dir, fuzzID+recordExt) // one worker runs one input at a time
		require.NoError(t, os.WriteFile(fp, data, 0o600))
		fenv, ferr := s.readRecord(fp, "")
		require.Equal(t, err == nil, ferr == nil, "file read and decoder disagree: %v / %v", err, ferr)
		if err != nil {
			requireCorrupt(t, fp, ferr)
		} else {
			requireSameRecord(t, env, fenv)
			_, ierr := s.readRecord(fp, other(env.Job.ID))
			requireCorrupt(t, fp, ierr)
		}

		// Anything over the size limit is refused before it is parsed.
		if len(data) > 0 {
			_, err := decodeRecord(path, "", data, int64(len(data)-1))
			requireCorrupt(t, path, err)
		}
	})
}

// other returns a valid job ID different from id.
func other(id string) string {
	if id == fuzzID {
		return "01KB7Y3R6X8QJ0A7Z2M4N5P6Q8"
	}
	return fuzzID
}

func requireCorrupt(t *testing.T, path string, err error) {
	t.Helper()
	require.ErrorIs(t, err, jobstore.ErrCorrupt)
	var ce *CorruptError
	require.True(t, errors.As(err, &ce), "%T: %v", err, err)
	require.Equal(t, path, ce.Path)
	require.NotEmpty(t, ce.Reason)
	require.Contains(t, err.Error(), path)
}

func requireDecoded(t *testing.T, path string, data []byte, env envelope, err error) {
	t.Helper()
	if err != nil {
		requireCorrupt(t, path, err)
		return
	}
	require.GreaterOrEqual(t, env.Format, 1)
	require.LessOrEqual(t, env.Format, FormatVersion)
	require.GreaterOrEqual(t, env.Rev, int64(1))
	require.NoError(t, jobstore.ValidateID(env.Job.ID))
	require.True(t, env.Job.State.Valid())

	// Encoding what was decoded gives a record that decodes to the same
	// thing, and from then on the bytes are stable.
	enc, err := encodeRecord(env)
	require.NoError(t, err, "a decoded record must encode: %q", data)
	back, err := decodeRecord(path, env.Job.ID, enc, int64(len(enc)))
	require.NoError(t, err, "re-encoded record refused: %q", enc)
	requireSameRecord(t, env, back)
	enc2, err := encodeRecord(back)
	require.NoError(t, err)
	require.Equal(t, string(enc), string(enc2))
}

// requireSameRecord compares two decoded records field by field; times are
// compared as instants, since a decoded time's location is not comparable.
func requireSameRecord(t *testing.T, a, b envelope) {
	t.Helper()
	require.Equal(t, a.Rev, b.Rev)
	ja, jb := a.Job, b.Job
	for _, p := range [][2]time.Time{
		{ja.RunAt, jb.RunAt}, {ja.CreatedAt, jb.CreatedAt}, {ja.UpdatedAt, jb.UpdatedAt},
		{ja.StartedAt, jb.StartedAt}, {ja.FinishedAt, jb.FinishedAt},
	} {
		require.True(t, p[0].Equal(p[1]), "%v != %v", p[0], p[1])
	}
	ja.RunAt, ja.CreatedAt, ja.UpdatedAt, ja.StartedAt, ja.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	jb.RunAt, jb.CreatedAt, jb.UpdatedAt, jb.StartedAt, jb.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	requireSameJSON(t, ja.Payload, jb.Payload)
	requireSameJSON(t, ja.Result, jb.Result)
	ja.Payload, jb.Payload, ja.Result, jb.Result = nil, nil, nil, nil
	require.Equal(t, ja, jb)
}

func requireSameJSON(t *testing.T, a, b []byte) {
	t.Helper()
	if len(a) == 0 || len(b) == 0 {
		require.Equal(t, len(a) == 0, len(b) == 0)
		return
	}
	require.JSONEq(t, string(a), string(b))
}

// FuzzKeyFileName checks where an idempotency key is stored: whatever the
// key (valid or not, 10,000 bytes, path tricks, look-alikes), its file
// name is 64 lower-case hex digits and its path is directly inside keys/.
// A valid key is then submitted to a real store twice: the key file is at
// that path and names the job, and the second submit returns the same job.
func FuzzKeyFileName(f *testing.F) {
	for _, k := range []string{"order-42", "../../../../etc/passwd", "/etc/passwd", "a/b", "..", ".", "a\x00b",
		"order-0", "order-О", "order-０", strings.Repeat("k", 10000), "\xff", "ключ", "\u202egnp.exe"} {
		f.Add(k)
	}
	dir := f.TempDir()
	s, err := Open(context.Background(), dir, &Options{NoSync: true})
	require.NoError(f, err)
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, key string) {
		name := keyName(key)
		require.Len(t, name, 64)
		_, err := hex.DecodeString(name)
		require.NoError(t, err)
		require.Equal(t, strings.ToLower(name), name)
		kp := s.keyPath(name)
		require.Equal(t, filepath.Join(dir, dirKeys), filepath.Dir(kp))
		if jobstore.ValidateKey(key) != nil || key == "" {
			_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: key})
			if key != "" {
				require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			}
			return
		}
		j, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: key})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, key, j.Key)
		env, err := s.readKeyFile(kp)
		require.NoError(t, err)
		require.Equal(t, j.ID, env.Job.ID)
		again, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: key})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, j.ID, again.ID)
		// Free the key so the store stays small however long this runs.
		_, err = s.Cancel(t.Context(), j.ID)
		require.NoError(t, err)
		n, err := s.Prune(t.Context(), 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = os.Lstat(kp)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

// FuzzStoreIDs passes arbitrary strings as job IDs and list cursors to a
// real store holding one job. An invalid ID is refused with ErrInvalidID;
// a valid one names no job and gets ErrNotFound (or ErrNotHeld); in no case
// does any file appear, change or disappear in or around the store: the
// record lock file that a change such as Cancel makes for the unknown ID
// is removed when it finds no record.
func FuzzStoreIDs(f *testing.F) {
	for _, id := range []string{"../x", "/etc/passwd", "a/b", "..", ".", "", "\x00", fuzzID, fuzzID + "\x00",
		"../" + fuzzID, fuzzID + "/..", strings.Repeat("A", 10000), "О1KB7Y3R6X8QJ0A7Z2M4N5P6Q7", "０1KB7Y3R6X8QJ0A7Z2M4N5P6Q7",
		"01kb7y3r6x8qj0a7z2m4n5p6q7", "81KB7Y3R6X8QJ0A7Z2M4N5P6Q7", "locks/" + fuzzID, "FORMAT"} {
		f.Add(id)
	}
	parent := f.TempDir()
	dir := filepath.Join(parent, "store")
	s, err := Open(context.Background(), dir, &Options{NoSync: true})
	require.NoError(f, err)
	f.Cleanup(func() { _ = s.Close() })
	job, _, err := s.Submit(context.Background(), jobstore.Spec{Kind: "k", Key: "k"})
	require.NoError(f, err)
	before := snapshotTree(f, parent)
	f.Fuzz(func(t *testing.T, id string) {
		if id == job.ID {
			return
		}
		valid := jobstore.ValidateID(id) == nil
		check := func(op string, err error, validErr error) {
			t.Helper()
			if !valid {
				require.ErrorIs(t, err, jobstore.ErrInvalidID, op)
				return
			}
			require.ErrorIs(t, err, validErr, op)
		}
		ctx := t.Context()
		_, err := s.Get(ctx, id)
		check("get", err, jobstore.ErrNotFound)
		_, err = s.Cancel(ctx, id)
		check("cancel", err, jobstore.ErrNotFound)
		_, err = s.Retry(ctx, id)
		check("retry", err, jobstore.ErrNotFound)
		_, err = s.Wait(ctx, id)
		check("wait", err, jobstore.ErrNotFound)
		_, err = s.Complete(ctx, jobstore.Lease{ID: id, Worker: "w", Attempt: 1}, jobstore.Succeeded(nil))
		check("complete", err, jobstore.ErrNotHeld)
		err = s.WatchCancel(ctx, jobstore.Lease{ID: id, Worker: "w", Attempt: 1})
		check("watch cancel", err, jobstore.ErrNotHeld)
		page, err := s.List(ctx, jobstore.ListOptions{Cursor: id})
		if !valid && id != "" {
			require.ErrorIs(t, err, jobstore.ErrInvalidID, "list cursor")
		} else {
			require.NoError(t, err)
			require.Empty(t, page.Errors)
		}
		require.Equal(t, before, snapshotTree(t, parent), "the tree around the store changed")
	})
}

// snapshotTree describes every entry under root: path, type, size and
// permissions, and for symbolic links their target.
func snapshotTree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := p + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			line += " size=" + strconv.FormatInt(fi.Size(), 10)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	require.NoError(t, err)
	slices.Sort(out)
	return out
}
