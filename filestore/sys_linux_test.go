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

// TestSyncFSReaches: syncfs(2) carries durability only on the file systems
// known to honour it: ext4 and xfs on a block device, btrfs (whose device
// is anonymous even on a disk) and tmpfs (nothing to reach); FUSE,
// overlayfs, NFS, ext4 without a block device and every unknown type fsync
// each file.
func TestSyncFSReaches(t *testing.T) {
	for _, tc := range []struct {
		fi   fsInfo
		ok   bool
		name string
	}{
		{fsInfo{Type: 0xef53, BlockDev: true}, true, "ext4"},
		{fsInfo{Type: 0xef53}, false, "ext4"},
		{fsInfo{Type: 0x58465342, BlockDev: true}, true, "xfs"},
		{fsInfo{Type: 0x58465342}, false, "xfs"},
		{fsInfo{Type: 0x9123683e}, true, "btrfs"},
		{fsInfo{Type: 0x9123683e, BlockDev: true}, true, "btrfs"},
		{fsInfo{Type: 0x01021994}, true, "tmpfs"},
		{fsInfo{Type: 0x65735546}, false, "FUSE"},
		{fsInfo{Type: 0x65735546, BlockDev: true}, false, "FUSE"},
		{fsInfo{Type: 0x794c7630}, false, "overlayfs"},
		{fsInfo{Type: 0x6969}, false, "NFS"},
		{fsInfo{Type: 0x2fc12fc1, BlockDev: true}, false, "a file system of type 0x2fc12fc1"},
	} {
		ok, name := syncFSReaches(tc.fi)
		require.Equal(t, tc.ok, ok, "%+v", tc.fi)
		require.Equal(t, tc.name, name)
	}
	// The store's own directory here: the real statfs and stat.
	fi, err := fsInfoOf(t.TempDir())
	require.NoError(t, err)
	ok, name := syncFSReaches(fi)
	t.Logf("t.TempDir() is on %s (block device %v): syncfs used: %v", name, fi.BlockDev, ok)
}
