package filestore

import (
	"encoding/json"
	"os"
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

// TestClaimNoteLost: a power cut can keep a claim's rename and lose its
// note (neither is fsynced). The record in claimed/ then still says queued
// and no note names it: an interrupted claim, moved back unchanged (no
// attempt counted) once the lease is free. A note that survived makes it a
// dead worker's job, queued again with the attempt counted.
func TestClaimNoteLost(t *testing.T) {
	for _, tc := range []struct {
		name        string
		note        func(t *testing.T, s *Store, id string)
		wantAttempt int
	}{
		{"NoteKept", func(*testing.T, *Store, string) {}, 1},
		{"NoteEmpty", func(t *testing.T, s *Store, id string) {
			require.NoError(t, os.WriteFile(s.leasePath(id), nil, 0o600))
		}, 0},
		{"NoteOfAnotherRevision", func(t *testing.T, s *Store, id string) {
			n, ok := s.readClaimNote(id)
			require.True(t, ok)
			n.Rev++
			require.NoError(t, osFS{}.Overwrite(s.leasePath(id), mustJSON(t, n))) // s is closed
		}, 0},
		{"NoteGarbage", func(t *testing.T, s *Store, id string) {
			require.NoError(t, os.WriteFile(s.leasePath(id), []byte("\x00\x00\x00"), 0o600))
		}, 0},
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
			require.Equal(t, tc.wantAttempt, j.Attempt)
			_, err = os.Stat(s.recordPath(dirQueued, sub.ID))
			require.NoError(t, err)
			r, err := s.Fsck(t.Context(), false)
			require.NoError(t, err)
			require.True(t, r.OK(), "%v", r.Problems)
			c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2"})
			require.NoError(t, err)
			require.Equal(t, sub.ID, c.ID)
			require.Equal(t, tc.wantAttempt+1, c.Attempt)
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestReadNeedsNoLockFile: a job whose record lock file does not exist
// (a job of a format-2 store, or one whose lock file was removed) can be
// read, and reading it does not make one, so a store on a read-only mount
// stays readable (docs/format.md, Locks). The first change makes the file.
func TestReadNeedsNoLockFile(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
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
