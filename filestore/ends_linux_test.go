//go:build linux

package filestore

import (
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// inotifyEvent encodes one event as the kernel does: the header, then the
// name padded with NULs to pad bytes.
func inotifyEvent(mask uint32, name string, pad int) []byte {
	b := make([]byte, unix.SizeofInotifyEvent+pad)
	binary.NativeEndian.PutUint32(b[4:8], mask)
	binary.NativeEndian.PutUint32(b[12:16], uint32(pad))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

// TestEndIn: only the close of a staging lock opened for writing, or a
// lost event, is another Store's end; the close of a staging directory's
// name or of a lock opened read-only (a sweep) is not.
func TestEndIn(t *testing.T) {
	lock := "01JEXAMPLE0000000000000000.lock"
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"lock closed", inotifyEvent(unix.IN_CLOSE_WRITE, lock, 48), true},
		{"lock closed after another name", append(inotifyEvent(unix.IN_CLOSE_WRITE, "01JEXAMPLE0000000000000000", 32), inotifyEvent(unix.IN_CLOSE_WRITE, lock, 32)...), true},
		{"not a lock", inotifyEvent(unix.IN_CLOSE_WRITE, "stray", 16), false},
		{"read-only close", inotifyEvent(unix.IN_CLOSE_NOWRITE, lock, 32), false},
		{"overflow", inotifyEvent(unix.IN_Q_OVERFLOW, "", 0), true},
		{"torn", inotifyEvent(unix.IN_CLOSE_WRITE, lock, 48)[:20], true},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, endIn(tc.b))
		})
	}
}

// TestEndMarkOnlyOnceClaiming: a Store holds its end mark from its first
// Claim, and not before, so that a Store that only reads (a command such
// as jobdir get) starts no recovery pass anywhere when it ends; Close
// closes the mark.
func TestEndMarkOnlyOnceClaiming(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	_, err = s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	s.watchMu.Lock()
	require.Nil(t, s.endMark, "a Store that has not claimed holds an end mark")
	s.watchMu.Unlock()

	_, err = s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	s.watchMu.Lock()
	mark := s.endMark
	s.watchMu.Unlock()
	require.NotNil(t, mark, "a Store that claimed holds no end mark")
	require.True(t, sameFile(mark, s.tmpLock), "the end mark is not the staging lock")

	require.NoError(t, s.Close())
	require.ErrorIs(t, mark.Close(), os.ErrClosed, "Close left the end mark open")
}

// TestEndMarkRefusesReplacedLock: a staging lock whose name another file
// took (by hand, or a tool) is not marked: the first Claim says so in the
// log, claims all the same, and the Store still watches for the ends of
// others.
func TestEndMarkRefusesReplacedLock(t *testing.T) {
	logs := &logBuffer{}
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	other := filepath.Join(dir, "other")
	require.NoError(t, os.WriteFile(other, nil, 0o600))
	require.NoError(t, os.Rename(other, s.tmpLock.Path()))
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)

	got, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	require.Nil(t, s.endMark, "a replaced staging lock was marked")
	require.NotNil(t, s.stopEnds, "no watch of other Stores' ends")
	require.Contains(t, logs.String(), "cannot mark this store")
}
