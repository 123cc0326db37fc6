//go:build linux

package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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
// each file, and so do the disk file systems on a Linux older than 5.17,
// whose syncfs does not report every write error.
func TestSyncFSReaches(t *testing.T) {
	for _, tc := range []struct {
		fi   fsInfo
		ok   bool
		name string
	}{
		{fsInfo{Type: 0xef53, BlockDev: true, Kernel: "6.1.0-18-amd64"}, true, "ext4"},
		{fsInfo{Type: 0xef53, Kernel: "6.1.0"}, false, "ext4"},
		{fsInfo{Type: 0x58465342, BlockDev: true, Kernel: "5.17.0"}, true, "xfs"},
		{fsInfo{Type: 0x58465342, Kernel: "6.1.0"}, false, "xfs"},
		{fsInfo{Type: 0x9123683e, Kernel: "6.1.0"}, true, "btrfs"},
		{fsInfo{Type: 0x9123683e, BlockDev: true, Kernel: "6.1.0"}, true, "btrfs"},
		{fsInfo{Type: 0x01021994}, true, "tmpfs"},
		{fsInfo{Type: 0xef53, BlockDev: true, Kernel: "5.16.20"}, false, "ext4 on Linux 5.16.20 (a syncfs(2) reports every write error from Linux 5.17 on)"},
		{fsInfo{Type: 0x58465342, BlockDev: true, Kernel: "4.18.0-513.el8.x86_64"}, false, "xfs on Linux 4.18.0-513.el8.x86_64 (a syncfs(2) reports every write error from Linux 5.17 on)"},
		{fsInfo{Type: 0x9123683e}, false, "btrfs on Linux an unknown version (a syncfs(2) reports every write error from Linux 5.17 on)"},
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
	for release, ok := range map[string]bool{
		"5.17.0": true, "5.17": true, "6.18.44-fc-v657": true, "10.0.1": true, "5.18-rc1": true,
		"5.16.20": false, "5.8.0": false, "4.18.0-513.el8.x86_64": false, "": false, "6": false, "x.y": false,
	} {
		require.Equal(t, ok, kernelReportsSyncFSErrors(release), release)
	}
	// The store's own directory here: the real statfs, stat and uname.
	fi, err := fsInfoOf(t.TempDir())
	require.NoError(t, err)
	ok, name := syncFSReaches(fi)
	t.Logf("t.TempDir() is on %s (block device %v, Linux %s): syncfs used: %v", name, fi.BlockDev, fi.Kernel, ok)
}

// TestLinkUnnamedWays: a file without a name is named whole by either way
// linkUnnamed has, AT_EMPTY_PATH (which this kernel allows the process
// that opened the file) and /proc/self/fd (the way of a process refused
// the other), and the way it found working is the one it keeps; an
// existing name is an error either way, and the file it named is kept.
func TestLinkUnnamedWays(t *testing.T) {
	was := emptyPathLinks.Load()
	t.Cleanup(func() { emptyPathLinks.Store(was) })
	for _, tc := range []struct {
		name        string
		state, then int32
	}{
		{"AT_EMPTY_PATH untried", 0, 1},
		{"AT_EMPTY_PATH", 1, 1},
		{"/proc/self/fd", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			require.NoError(t, err)
			defer unix.Close(d)
			name := func(data string) error {
				fd, ok, err := openUnnamed(d, 0o600)
				require.True(t, ok, "this file system has files without a name: %v", err)
				require.NoError(t, err)
				defer unix.Close(fd)
				_, err = unix.Write(fd, []byte(data))
				require.NoError(t, err)
				ok, err = linkUnnamed(fd, d, "a.json")
				require.True(t, ok)
				return err
			}
			emptyPathLinks.Store(tc.state)
			require.NoError(t, name("first"))
			require.Equal(t, tc.then, emptyPathLinks.Load())
			require.ErrorIs(t, name("second"), unix.EEXIST)
			got, err := os.ReadFile(filepath.Join(dir, "a.json"))
			require.NoError(t, err)
			require.Equal(t, "first", string(got))
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, ents, 1, "a file without a name was left named")
		})
	}
	// A directory removed since it was opened refuses either way; that
	// says nothing of AT_EMPTY_PATH, which stays the way that worked.
	t.Run("removed directory", func(t *testing.T) {
		dir := t.TempDir()
		d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(d)
		gone := filepath.Join(dir, "gone")
		require.NoError(t, os.Mkdir(gone, 0o700))
		g, err := unix.Open(gone, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(g)
		require.NoError(t, os.Remove(gone))
		fd, ok, err := openUnnamed(d, 0o600)
		require.True(t, ok)
		require.NoError(t, err)
		defer unix.Close(fd)
		emptyPathLinks.Store(1)
		ok, err = linkUnnamed(fd, g, "a.json")
		require.False(t, ok)
		require.ErrorIs(t, err, unix.ENOENT)
		require.EqualValues(t, 1, emptyPathLinks.Load())
	})
}
