//go:build linux

package filestore

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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
