//go:build linux

package filestore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFilesystemKinds: the filesystems where flock, rename and inotify do
// not hold across clients are refused by default; overlayfs only warns.
func TestFilesystemKinds(t *testing.T) {
	for _, tc := range []struct {
		magic  int64
		name   string
		unsafe bool
	}{
		{0x6969, "NFS", true},
		{0xfe534d42, "SMB2", true},
		{0xff534d42, "CIFS", true},
		{0x65735546, "FUSE", true},
		{0x00c36400, "Ceph", true},
		{0x794c7630, "overlayfs", false},
		{0xef53, "", false},     // ext4
		{0x01021994, "", false}, // tmpfs
	} {
		name, unsafe := fsKind(tc.magic)
		require.Equal(t, tc.name, name)
		require.Equal(t, tc.unsafe, unsafe, tc.name)
	}
}
