package filestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// fileOps is the seam through which the store changes the directory. Every
// write, rename, link, removal and fsync goes through it, so tests can make
// any single step fail (EIO, ENOSPC) or stop the process's file activity at
// that step as a crash would, then reopen the store and check what a crash
// there leaves behind (Open's layout and sweep and Close's cleanup too:
// TestCloseCleansUpThroughSeam). Reads do not go through it: a read
// changes nothing. The one exception is FSInfo, the look at the file system
// from which Open decides how changes are made durable, so that tests can
// show that decision on any kind of file system.
//
// Three kinds of change bypass it, because no failure or crash there can
// lose or corrupt anything the store holds:
//   - lock files (locks/, the lease files, tmp/<id>.lock, .FORMAT.lock):
//     each is created (and its mode set) by the code that locks it
//     (locks.go, leasefile.go, open.go) and holds no data; a missing one
//     is created again by the next lock;
//   - the barrier file of List and Stats (moves.go), an empty marker
//     created and removed at once, never read;
//   - the directories above the store that Open creates when they are
//     missing, which are not the store's.
type fileOps interface {
	// WriteFile atomically replaces path with data: a temp file in tmpDir,
	// fsynced when sync is set, renamed over path. On error no temp file is
	// left behind.
	WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error
	// WriteTemp writes data to a new file in tmpDir (fsynced when sync is
	// set) and returns its path.
	WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error)
	// WriteNew writes data, unsynced, to a new file that PlaceNew then
	// names path, which must not exist yet (a new job's record). On
	// Linux it is a file without a name in tmpDir (O_TMPFILE), so that
	// its naming changes path's directory alone and takes no rename lock,
	// and a crash before leaves nothing to sweep; elsewhere, where the
	// file system has none, or when the process holds too many already, a
	// temp file in tmpDir.
	// A file WriteNew returns is placed or dropped (DropNew).
	WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error)
	// PlaceNew names the file nf path, as WriteNew was told. On error nf
	// is dropped.
	PlaceNew(nf *newFile) error
	// DropNew discards nf, written and not placed.
	DropNew(nf *newFile)
	// Link creates newname as a hard link to oldname; it fails with an
	// error matching fs.ErrExist if newname exists.
	Link(oldname, newname string) error
	// Rename renames oldname to newname, replacing newname.
	Rename(oldname, newname string) error
	// Remove removes the file at path.
	Remove(path string) error
	// RemoveAll removes path and anything it holds; a missing path is not
	// an error.
	RemoveAll(path string) error
	// Overwrite replaces the contents of the existing regular file at path
	// with data, in place (the same inode), without fsync. It never
	// follows a symbolic link.
	Overwrite(path string, data []byte) error
	// SetXattr sets the extended attribute name of the existing regular
	// file at path to value, without fsync, or removes it if value is nil
	// (a missing one is no error). It never follows a symbolic link. Where
	// the file system keeps no extended attributes it fails (ENOTSUP;
	// outside Linux an error matching errors.ErrUnsupported).
	SetXattr(path, name string, value []byte) error
	// JournalWrite writes data at off into f, an open submission journal,
	// without fsync; JournalSync makes what was written into f durable
	// (fdatasync(2)).
	JournalWrite(f *os.File, data []byte, off int64) error
	JournalSync(f *os.File) error
	// SyncFS opens the file system that holds dir for one syncfs(2): its
	// Sync makes every file written on it durable at once. Open it before
	// writing the files. Returns an error matching errors.ErrUnsupported
	// where there is no syncfs.
	SyncFS(dir string) (syncer, error)
	// SyncDir fsyncs the directory dir so that its entries are durable.
	SyncDir(dir string) error
	// SyncFile fsyncs the regular file at path, already in place, so that
	// its data is durable; it never follows a symbolic link. Renaming a
	// new file into place before its fsync, and then fsyncing it and its
	// directory, costs one journal commit where the fsync before the
	// rename costs two: the file's fsync commits the rename with it (see
	// docs/format.md, "Durability").
	SyncFile(path string) error
	// FSInfo says what kind of file system holds dir. Returns an error
	// matching errors.ErrUnsupported where the system cannot tell.
	FSInfo(dir string) (fsInfo, error)
	// Mkdir creates dir with perm, which the umask does not limit, keeping
	// the setgid bit dir inherits from its parent; an existing directory
	// is not an error.
	Mkdir(dir string, perm os.FileMode) error
}

// fsInfo is what statfs(2) and stat(2) tell of the file system that holds
// a directory: enough to decide whether a syncfs(2) there reaches the disk
// (syncFSReaches).
type fsInfo struct {
	// Type is statfs(2)'s f_type, the file system's magic number.
	Type int64
	// BlockDev is set when the directory's device (st_dev) has a major
	// number other than 0, as every file system on a block device has
	// (a loop device too), except btrfs, which reports an anonymous
	// device (major 0) for each subvolume. tmpfs, FUSE and overlayfs have
	// major 0.
	BlockDev bool
	// Kernel is the running kernel's release (uname -r), "" where it is
	// not known.
	Kernel string
}

// syncer is a pending syncfs(2), see fileOps.SyncFS.
type syncer interface {
	Sync() error
	Close() error
}

// osFS is the real fileOps. Once Open has pinned the store's directory,
// root holds it open and every path under dir is resolved from it, never
// through a symbolic link that leads out of the store: a state directory
// swapped for a link after Open cannot redirect a write to a foreign
// directory (TestStateDirSwapped). A change of an entry of one of the
// store's own directories is made relative to that directory's descriptor,
// opened once (pins, dirpins.go); other paths under dir are resolved
// component by component through root. Paths outside dir, and every path
// before the directory is pinned, are used as given.
type osFS struct {
	root *os.Root
	dir  string
	pins *dirPins
}

// pinned returns the pinned directory that holds path and path's last
// component, or ok=false when path is not in one (see dirPins.dirOf).
func (f osFS) pinned(path string) (*pinnedDir, string, bool, error) {
	if f.pins == nil {
		return nil, "", false, nil
	}
	d, base, ok, err := f.pins.dirOf(path)
	return d, base, ok, f.abs(err)
}

// dirOps is what osFS needs of a directory tree: an *os.Root, or hostFS for
// plain paths.
type dirOps interface {
	OpenFile(name string, flag int, perm os.FileMode) (*os.File, error)
	Rename(oldname, newname string) error
	Link(oldname, newname string) error
	Remove(name string) error
	RemoveAll(name string) error
	Mkdir(name string, perm os.FileMode) error
	Lstat(name string) (os.FileInfo, error)
	Chmod(name string, mode os.FileMode) error
}

// hostFS resolves paths as given.
type hostFS struct{}

func (hostFS) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (hostFS) Rename(oldname, newname string) error      { return os.Rename(oldname, newname) }
func (hostFS) Link(oldname, newname string) error        { return os.Link(oldname, newname) }
func (hostFS) Remove(name string) error                  { return os.Remove(name) }
func (hostFS) RemoveAll(name string) error               { return os.RemoveAll(name) }
func (hostFS) Mkdir(name string, perm os.FileMode) error { return os.Mkdir(name, perm) }
func (hostFS) Lstat(name string) (os.FileInfo, error)    { return os.Lstat(name) }
func (hostFS) Chmod(name string, mode os.FileMode) error { return os.Chmod(name, mode) }

// at returns the dirOps that resolve paths, and paths relative to it: the
// pinned root when every path is inside the store's directory.
func (f osFS) at(paths ...string) (dirOps, []string) {
	if f.root == nil {
		return hostFS{}, paths
	}
	rel := make([]string, len(paths))
	for i, p := range paths {
		if p == f.dir {
			rel[i] = "."
			continue
		}
		r, ok := strings.CutPrefix(p, f.dir+string(filepath.Separator))
		if !ok || r == "" {
			return hostFS{}, paths
		}
		rel[i] = r
	}
	return f.root, rel
}

// abs puts the store's directory back in front of the relative paths that
// errors from the pinned root carry, so messages name the whole path.
// An operation still in flight when Close released the descriptor fails
// with jobstore.ErrClosed, as it would had it started a moment later.
func (f osFS) abs(err error) error {
	if f.root == nil || err == nil {
		return err
	}
	if errors.Is(err, os.ErrClosed) {
		return jobstore.ErrClosed
	}
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe) && !filepath.IsAbs(pe.Path):
		pe.Path = filepath.Join(f.dir, pe.Path)
	case errors.As(err, &le) && !filepath.IsAbs(le.Old):
		le.Old, le.New = filepath.Join(f.dir, le.Old), filepath.Join(f.dir, le.New)
	}
	return err
}

func (osFS) SyncFS(dir string) (syncer, error) { return openSyncFS(dir) }

func (osFS) FSInfo(dir string) (fsInfo, error) { return fsInfoOf(dir) }

// WriteFile writes a temp file in tmpDir (fsynced when sync is set) and
// renames it over path; it does not fsync the directory, which the caller
// does where it matters.
func (f osFS) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	tmp, err := f.writeTemp(tmpDir, filepath.Base(path), data, perm, sync)
	if err != nil {
		return err
	}
	if err := f.Rename(tmp, path); err != nil {
		_ = f.Remove(tmp)
		return err
	}
	return nil
}

func (f osFS) WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error) {
	return f.writeTemp(tmpDir, "new", data, perm, sync)
}

// newFile is a new file's data, written by WriteNew and not yet named.
type newFile struct {
	path   string // the name it is to have
	fd     int    // a file without a name (O_TMPFILE) in tmpDir, or -1
	tmp    string // else a temp file, to be renamed to path
	tmpDir string
	data   []byte // written to a temp file if fd cannot be linked
	perm   os.FileMode
}

// openUnnamedAt and linkUnnamedAt are openUnnamed and linkUnnamed, which
// tests replace to play a file system or a process without unnamed files.
var openUnnamedAt, linkUnnamedAt = openUnnamed, linkUnnamed

// unnamedOpen counts the unnamed files (newFile.fd) the process holds
// open; past unnamedLimit, WriteNew writes temp files instead, so that a
// large batch does not use up the process's descriptors.
var (
	unnamedOpen  atomic.Int64
	unnamedLimit = sync.OnceValue(nofileQuarter)
)

// nofileQuarter returns a quarter of the process's limit of open files
// (which Go raises to the hard limit at start), at most 16,384.
func nofileQuarter() int64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int64(min(rl.Cur/4, 16384))
}

func (f osFS) WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error) {
	nf := &newFile{path: path, fd: -1, tmpDir: tmpDir, data: data, perm: perm}
	// Made in tmpDir, which no watcher watches: the kernel reports the
	// writes to a file without a name to the watchers of its directory
	// (as "#<inode>"), and each process's watcher would handle them. The
	// link into path's directory takes no rename lock.
	if d, ok, err := f.stagingPin(tmpDir, path); ok && !f.pins.noUnnamed.Load() {
		if err != nil {
			return nil, err
		}
		if unnamedOpen.Add(1) <= unnamedLimit() {
			fd, ok, err := d.writeUnnamed(tmpDir, data, perm)
			if err != nil {
				unnamedOpen.Add(-1)
				return nil, f.abs(err)
			}
			if ok {
				nf.fd = fd
				return nf, nil
			}
			f.pins.noUnnamed.Store(true)
		}
		unnamedOpen.Add(-1)
	}
	tmp, err := f.WriteTemp(tmpDir, data, perm, false)
	if err != nil {
		return nil, err
	}
	nf.tmp = tmp
	return nf, nil
}

// stagingPin returns the pinned directory dir, to make a file without a
// name in, if both dir and path's directory are pinned. Neither is
// checked (dirPins.uncheckedDirOf): the file has no name until PlaceNew
// links it into path's directory, which it checks then, so a directory
// swapped since it was pinned sends no data out of the store.
func (f osFS) stagingPin(dir, path string) (*pinnedDir, bool, error) {
	if f.pins == nil {
		return nil, false, nil
	}
	d, ok, err := f.pins.uncheckedDirOf(filepath.Join(dir, "x"))
	if !ok || err != nil {
		return nil, ok, f.abs(err)
	}
	// Pinned now, if it was not yet, so that PlaceNew finds a swap made
	// from here on.
	_, ok, err = f.pins.uncheckedDirOf(path)
	return d, ok, f.abs(err)
}

func (f osFS) PlaceNew(nf *newFile) error {
	if nf.fd >= 0 {
		d, base, _, err := f.pinned(nf.path)
		if err != nil {
			f.DropNew(nf)
			return err
		}
		ok, err := d.linkUnnamed(nf.fd, base, nf.path)
		f.DropNew(nf)
		if ok && (err == nil || errors.Is(err, fs.ErrExist)) {
			return f.abs(err)
		}
		// This process cannot name a file without a name (ok=false), or
		// the naming failed in a way a temp file's rename may not (an
		// LSM that refuses the link, say): a temp file now, and
		// from now on if that works.
		if nf.tmp, err = f.WriteTemp(nf.tmpDir, nf.data, nf.perm, false); err != nil {
			return err
		}
		if err := f.Rename(nf.tmp, nf.path); err != nil {
			f.DropNew(nf)
			return err
		}
		nf.tmp = ""
		f.pins.noUnnamed.Store(true)
		return nil
	}
	if err := f.Rename(nf.tmp, nf.path); err != nil {
		f.DropNew(nf)
		return err
	}
	nf.tmp = ""
	return nil
}

func (f osFS) DropNew(nf *newFile) {
	if nf.fd >= 0 {
		_ = unix.Close(nf.fd)
		nf.fd = -1
		unnamedOpen.Add(-1)
	}
	if nf.tmp != "" {
		_ = f.Remove(nf.tmp)
		nf.tmp = ""
	}
}

// tempNonce and tempSeq make temp file names unique: 64 random bits drawn
// once per process, not the process ID, which every process that is PID
// 1 of its own PID namespace (a container) shares, and a sequence within
// the process.
var (
	tempNonce = newNonce()
	tempSeq   atomic.Uint64
)

// newNonce returns 64 random bits in 16 hex digits.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// tempName returns the path of a new temp file in dir named after base:
// dir/.<base>.<nonce>.<seq>.
func tempName(dir, base string) string {
	return filepath.Join(dir, "."+base+"."+tempNonce+"."+strconv.FormatUint(tempSeq.Add(1), 10))
}

// writeTemp writes data to a fresh file in dir named after base (see
// tempName), so that concurrent writers, in this process or any other,
// never collide; O_EXCL makes a clash fail rather than share a file.
func (f osFS) writeTemp(dir, base string, data []byte, perm os.FileMode, sync bool) (string, error) {
	name := tempName(dir, base)
	if d, b, ok, err := f.pinned(name); ok {
		if err == nil {
			err = f.abs(d.writeNew(b, name, data, perm, sync))
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
	ops, rel := f.at(name)
	file, err := ops.OpenFile(rel[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, perm)
	if err != nil {
		return "", f.abs(err)
	}
	fail := func(err error) (string, error) {
		_ = file.Close()
		_ = ops.Remove(rel[0])
		return "", f.abs(err)
	}
	if err := file.Chmod(perm); err != nil { // not subject to the umask
		return fail(err)
	}
	if _, err := file.Write(data); err != nil {
		return fail(err)
	}
	if sync {
		if err := file.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := file.Close(); err != nil {
		_ = ops.Remove(rel[0])
		return "", f.abs(err)
	}
	return name, nil
}

func (f osFS) Overwrite(path string, data []byte) error {
	if d, b, ok, err := f.pinned(path); ok {
		if err != nil {
			return err
		}
		return f.abs(d.overwrite(b, path, data))
	}
	ops, rel := f.at(path)
	file, err := ops.OpenFile(rel[0], os.O_WRONLY|noFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return f.abs(err)
	}
	if fi, err := file.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = file.Close()
		if err == nil {
			err = fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
		}
		return err
	}
	_, err = file.WriteAt(data, 0)
	if err == nil {
		err = file.Truncate(int64(len(data)))
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f osFS) SetXattr(path, name string, value []byte) error {
	if d, b, ok, err := f.pinned(path); ok {
		if err != nil {
			return err
		}
		return f.abs(d.setXattr(b, path, name, value))
	}
	ops, rel := f.at(path)
	file, err := ops.OpenFile(rel[0], os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return f.abs(err)
	}
	defer file.Close()
	if fi, err := file.Stat(); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
		}
		return err
	}
	rc, err := file.SyscallConn()
	if err != nil {
		return err
	}
	op, set := "setxattr", func(fd int) error { return fsetxattr(fd, name, value) }
	if value == nil {
		op, set = "removexattr", func(fd int) error { return fremovexattr(fd, name) }
	}
	var xerr error
	if err := rc.Control(func(fd uintptr) { xerr = set(int(fd)) }); err != nil {
		return err
	}
	if xerr != nil {
		return &os.PathError{Op: op, Path: path, Err: xerr}
	}
	return nil
}

func (osFS) JournalWrite(f *os.File, data []byte, off int64) error {
	_, err := f.WriteAt(data, off)
	return err
}

func (osFS) JournalSync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = ignoringEINTR(func() error { return fdatasync(int(fd)) }) }); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

func (f osFS) Link(oldname, newname string) error {
	if done, err := f.between("link", oldname, newname, func(ofd int, ob string, nfd int, nb string) error {
		return unix.Linkat(ofd, ob, nfd, nb, 0)
	}); done {
		return err
	}
	ops, rel := f.at(oldname, newname)
	return f.abs(ops.Link(rel[0], rel[1]))
}

func (f osFS) Rename(oldname, newname string) error {
	if done, err := f.between("rename", oldname, newname, func(ofd int, ob string, nfd int, nb string) error {
		return unix.Renameat(ofd, ob, nfd, nb)
	}); done {
		return err
	}
	ops, rel := f.at(oldname, newname)
	return f.abs(ops.Rename(rel[0], rel[1]))
}

// between makes the change op from oldname to newname with fn, relative
// to their pinned directories, if both are in one; done=false says to go
// through the root instead.
func (f osFS) between(op, oldname, newname string, fn func(ofd int, ob string, nfd int, nb string) error) (done bool, err error) {
	od, ob, ok, err := f.pinned(oldname)
	if !ok {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	nd, nb, ok, err := f.pinned(newname)
	if !ok {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	err = useBoth(od, nd, func(ofd, nfd int) error {
		return ignoringEINTR(func() error { return fn(ofd, ob, nfd, nb) })
	})
	if err != nil && !errors.Is(err, os.ErrClosed) { // as in pathError
		err = &os.LinkError{Op: op, Old: oldname, New: newname, Err: err}
	}
	return true, f.abs(err)
}

func (f osFS) Remove(path string) error {
	if d, b, ok, err := f.pinned(path); ok {
		if err != nil {
			return err
		}
		return f.abs(pathError("remove", path, d.use(func(fd int) error { return removeAt(fd, b) })))
	}
	ops, rel := f.at(path)
	return f.abs(ops.Remove(rel[0]))
}

func (f osFS) RemoveAll(path string) error {
	ops, rel := f.at(path)
	return f.abs(ops.RemoveAll(rel[0]))
}

func (f osFS) Mkdir(dir string, perm os.FileMode) error {
	ops, rel := f.at(dir)
	err := ops.Mkdir(rel[0], perm)
	if errors.Is(err, os.ErrExist) {
		fi, serr := ops.Lstat(rel[0])
		if serr != nil {
			return f.abs(serr)
		}
		if !fi.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: errors.New("exists and is not a directory")}
		}
		return nil
	}
	if err != nil {
		return f.abs(err)
	}
	fi, err := ops.Lstat(rel[0])
	if err != nil {
		return f.abs(err)
	}
	return f.abs(ops.Chmod(rel[0], perm|fi.Mode()&os.ModeSetgid))
}

func (f osFS) SyncFile(path string) error {
	if d, b, ok, err := f.pinned(path); ok {
		if err == nil {
			err = pathError("sync", path, d.use(func(dfd int) error { return syncAt(dfd, b) }))
		}
		return f.abs(err)
	}
	return f.syncThroughRoot(path, noFollow)
}

// syncThroughRoot opens path through the root with flag and fsyncs it.
func (f osFS) syncThroughRoot(path string, flag int) error {
	ops, rel := f.at(path)
	file, err := ops.OpenFile(rel[0], os.O_RDONLY|flag, 0)
	if err != nil {
		return f.abs(err)
	}
	err = file.Sync()
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return f.abs(err)
}

// pathError wraps an error of a change made at a pinned directory as the
// os package would, leaving os.ErrClosed (the store was closed meanwhile)
// for abs to tell.
func pathError(op, path string, err error) error {
	if err == nil || errors.Is(err, os.ErrClosed) {
		return err
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

func (f osFS) SyncDir(dir string) error {
	if f.pins != nil {
		if r, ok := strings.CutPrefix(dir, f.dir+string(filepath.Separator)); ok && pinnable(filepath.Clean(r)) {
			d, err := f.pins.verified(filepath.Clean(r))
			if err == nil {
				err = pathError("sync", dir, d.use(func(fd int) error { return ignoringEINTR(func() error { return fsyncFD(fd) }) }))
			}
			return f.abs(err)
		}
	}
	return f.syncThroughRoot(dir, syscall.O_DIRECTORY)
}
