//go:build linux

package crashfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// mount serves f on a new directory for the test, and unmounts it at the
// end.
func mount(t *testing.T, f *FS) string {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(dir, 0o755))
	m, err := f.Mount(dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Unmount()) })
	return dir
}

func writeFile(t *testing.T, p, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(data)
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func syncDir(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// data returns the contents of the file at p in img, and whether it is
// there.
func data(img *Image, p string) (string, bool) {
	n := img.Lookup(p)
	if n == nil {
		return "", false
	}
	return string(n.Data), true
}

func TestFileDataDurableOnlyWhenFsynced(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	writeFile(t, filepath.Join(dir, "a"), "unsynced", false)
	writeFile(t, filepath.Join(dir, "b"), "synced", true)
	syncDir(t, dir)
	got, err := os.ReadFile(filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.Equal(t, "unsynced", string(got), "what is written is read back before a cut")

	img := f.Durable()
	a, ok := data(img, "a")
	require.True(t, ok, "the entry is durable: its directory was fsynced")
	require.Empty(t, a, "data never fsynced is lost")
	b, _ := data(img, "b")
	require.Equal(t, "synced", b)

	// A rewrite in place that is not fsynced leaves the old data.
	writeFile(t, filepath.Join(dir, "b"), "rewritten", false)
	b, _ = data(f.Durable(), "b")
	require.Equal(t, "synced", b)
}

func TestNewFileLostUntilItsDirectoryIsFsynced(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o700))
	syncDir(t, dir)
	writeFile(t, filepath.Join(dir, "d", "f"), "data", true)
	img := f.Durable()
	require.NotNil(t, img.Lookup("d"))
	_, ok := data(img, "d/f")
	require.False(t, ok, "a file fsynced in a directory that was not is lost")

	syncDir(t, filepath.Join(dir, "d"))
	got, ok := data(f.Durable(), "d/f")
	require.True(t, ok)
	require.Equal(t, "data", got)

	// A directory whose parent was not fsynced is lost with all it holds,
	// even when it was fsynced itself.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "e"), 0o700))
	writeFile(t, filepath.Join(dir, "e", "f"), "data", true)
	syncDir(t, filepath.Join(dir, "e"))
	require.Nil(t, f.Durable().Lookup("e"))
}

func TestRenameDurableOnlyInTheDirectoriesFsynced(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	for _, d := range []string{"a", "b"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o700))
	}
	writeFile(t, filepath.Join(dir, "a", "f"), "data", true)
	syncDir(t, filepath.Join(dir, "a"))
	syncDir(t, dir)

	require.NoError(t, os.Rename(filepath.Join(dir, "a", "f"), filepath.Join(dir, "b", "f")))
	img := f.Durable()
	_, inA := data(img, "a/f")
	_, inB := data(img, "b/f")
	require.True(t, inA, "a rename made durable nowhere is undone")
	require.False(t, inB)

	syncDir(t, filepath.Join(dir, "b"))
	img = f.Durable()
	require.Same(t, img.Lookup("a/f"), img.Lookup("b/f"), "destination fsynced, source not: the file is under both names")
	out := t.TempDir()
	require.NoError(t, img.Materialize(out))
	fa, err := os.Stat(filepath.Join(out, "a", "f"))
	require.NoError(t, err)
	fb, err := os.Stat(filepath.Join(out, "b", "f"))
	require.NoError(t, err)
	require.True(t, os.SameFile(fa, fb), "materialized as hard links")

	syncDir(t, filepath.Join(dir, "a"))
	img = f.Durable()
	require.Nil(t, img.Lookup("a/f"))
	got, _ := data(img, "b/f")
	require.Equal(t, "data", got)

	// Replacing rename: the replaced file comes back until the directory
	// is fsynced.
	writeFile(t, filepath.Join(dir, "b", "g"), "new", true)
	require.NoError(t, os.Rename(filepath.Join(dir, "b", "g"), filepath.Join(dir, "b", "f")))
	got, _ = data(f.Durable(), "b/f")
	require.Equal(t, "data", got)
	syncDir(t, filepath.Join(dir, "b"))
	got, _ = data(f.Durable(), "b/f")
	require.Equal(t, "new", got)
	require.Nil(t, f.Durable().Lookup("b/g"))
}

func TestLinkAndUnlinkDurableWhenTheDirectoryIs(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	writeFile(t, filepath.Join(dir, "f"), "data", true)
	syncDir(t, dir)
	require.NoError(t, os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "g")))
	err := os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "g"))
	require.ErrorIs(t, err, os.ErrExist)
	fi, err := os.Stat(filepath.Join(dir, "f"))
	require.NoError(t, err)
	require.Equal(t, uint64(2), uint64(fi.Sys().(*syscall.Stat_t).Nlink))
	require.Nil(t, f.Durable().Lookup("g"), "a link not made durable is lost")
	syncDir(t, dir)
	img := f.Durable()
	require.Same(t, img.Lookup("f"), img.Lookup("g"))

	require.NoError(t, os.Remove(filepath.Join(dir, "f")))
	_, err = os.Stat(filepath.Join(dir, "f"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotNil(t, f.Durable().Lookup("f"), "a removal not made durable is undone")
	syncDir(t, dir)
	require.Nil(t, f.Durable().Lookup("f"))
	got, _ := data(f.Durable(), "g")
	require.Equal(t, "data", got)
}

func TestExclusiveCreateAndNoReplaceRename(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	p := filepath.Join(dir, "f")
	fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	require.NoError(t, fd.Close())
	_, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.ErrorIs(t, err, os.ErrExist)
	writeFile(t, filepath.Join(dir, "g"), "g", false)
	err = unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "g"), unix.AT_FDCWD, p, unix.RENAME_NOREPLACE)
	require.ErrorIs(t, err, unix.EEXIST)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o700))
	writeFile(t, filepath.Join(dir, "d", "x"), "", false)
	require.ErrorIs(t, os.Remove(filepath.Join(dir, "d")), unix.ENOTEMPTY)
}

func TestSetgidDirectoryAndChmod(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	d := filepath.Join(dir, "shared")
	require.NoError(t, os.Mkdir(d, 0o770))
	require.NoError(t, os.Chown(d, 0, 1234))
	require.NoError(t, os.Chmod(d, 0o770|os.ModeSetgid))
	require.NoError(t, os.Mkdir(filepath.Join(d, "sub"), 0o770))
	writeFile(t, filepath.Join(d, "f"), "", false)
	for _, p := range []string{"sub", "f"} {
		fi, err := os.Stat(filepath.Join(d, p))
		require.NoError(t, err)
		require.Equal(t, uint32(1234), fi.Sys().(*syscall.Stat_t).Gid, p)
	}
	fi, err := os.Stat(filepath.Join(d, "sub"))
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSetgid, "a directory inherits the setgid bit")
	syncDir(t, dir)
	require.Zero(t, f.Durable().Lookup("shared").Mode&syscall.S_ISGID, "a chmod is durable once the inode is fsynced")
	syncDir(t, d)
	require.NotZero(t, f.Durable().Lookup("shared").Mode&syscall.S_ISGID)
}

// syncfs(2) never reaches a FUSE daemon: it makes nothing durable here.
func TestSyncfsMakesNothingDurable(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	writeFile(t, filepath.Join(dir, "f"), "data", false)
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, unix.Syncfs(int(d.Fd())))
	unix.Sync()
	require.Nil(t, f.Durable().Lookup("f"))
}

func TestCutFailsEveryRequest(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	writeFile(t, filepath.Join(dir, "f"), "data", true)
	syncDir(t, dir)
	f.CutAfter(1)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o700), "one more operation is served")
	err := os.Mkdir(filepath.Join(dir, "e"), 0o700)
	require.ErrorIs(t, err, syscall.EIO)
	cut, op := f.IsCut()
	require.True(t, cut)
	require.Equal(t, "mkdir /e", op)
	_, err = os.ReadFile(filepath.Join(dir, "f"))
	require.ErrorIs(t, err, syscall.EIO, "reads fail too after the cut")
	_, err = os.Stat(filepath.Join(dir, "f"))
	require.ErrorIs(t, err, syscall.EIO)

	img := f.Durable()
	require.Nil(t, img.Lookup("d"), "the mkdir served before the cut was never made durable")
	got, _ := data(img, "f")
	require.Equal(t, "data", got)
}

// The operations are counted and logged in the order they are served, the
// same in every run of the same program.
func TestOperationsCountedAlike(t *testing.T) {
	run := func() []string {
		f := New(nil)
		dir := mount(t, f)
		base := f.Ops()
		writeFile(t, filepath.Join(dir, "f"), "data", true)
		require.NoError(t, os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")))
		syncDir(t, dir)
		require.Equal(t, len(f.Log())-base, f.Ops()-base)
		return f.Log()[base:]
	}
	first := run()
	require.Equal(t, []string{"create /f", "write /f 4@0", "fsync /f", "rename /f /g", "fsync-dir /"}, first)
	require.Equal(t, first, run())
}

// flock(2) is the kernel's, between open file descriptions, as on a local
// file system.
func TestFlockWorksOverTheMount(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	p := filepath.Join(dir, "lock")
	writeFile(t, p, "", false)
	a, err := os.Open(p)
	require.NoError(t, err)
	defer a.Close()
	b, err := os.Open(p)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	err = unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	require.True(t, errors.Is(err, unix.EWOULDBLOCK), "a second description cannot take the lock: %v", err)
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
	require.NoError(t, unix.Flock(int(a.Fd()), unix.LOCK_UN))
	require.NoError(t, unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB))
}

// An image mounts again as a file system whose contents are all durable,
// and materializes on the real file system with its modes.
func TestImageMountsAndMaterializes(t *testing.T) {
	f := New(nil)
	dir := mount(t, f)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o750))
	writeFile(t, filepath.Join(dir, "d", "f"), "data", true)
	require.NoError(t, os.Chmod(filepath.Join(dir, "d", "f"), 0o640))
	img := f.Current()

	g := New(img)
	dir2 := mount(t, g)
	got, err := os.ReadFile(filepath.Join(dir2, "d", "f"))
	require.NoError(t, err)
	require.Equal(t, "data", string(got))
	g.Cut()
	got2, _ := data(g.Durable(), "d/f")
	require.Equal(t, "data", got2, "everything in the image is durable")

	out := t.TempDir()
	require.NoError(t, img.Materialize(out))
	fi, err := os.Stat(filepath.Join(out, "d", "f"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	fi, err = os.Stat(filepath.Join(out, "d"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o750), fi.Mode().Perm())
	require.Equal(t, []string{"/", "/d/", "/d/f"}, img.Paths())
}
