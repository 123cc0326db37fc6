package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// dirPins holds the store's directories open, each opened once (through
// the pinned root, so never through a symbolic link) at its first use, so
// that a change names one entry relative to its directory's descriptor:
// one openat(2), renameat(2), linkat(2) or unlinkat(2), where a path
// resolved component by component through the root costs an open and a
// close of every directory on the way (two to four more system calls per
// path, five per rename; see docs/format.md, "Resolving paths").
//
// Before each change, the name of every pinned directory on the way is
// checked to still name the directory pinned (one fstatat(2) per level),
// so a state directory swapped for a link, or for another directory, after
// it was pinned fails the change rather than writing into a directory that
// is no longer the store's (TestStateDirSwapped).
//
// Only the store's own directories are pinned: those one level below the
// store (queued/, claimed/, done/, keys/, locks/, tmp/, quarantine/) and
// those two levels below (a Store's staging directory in tmp/), but not
// those of dependents/ and batches/ (see pinnable). Anything else goes
// through the root.
type dirPins struct {
	root *os.Root
	dir  string // the store's directory, absolute

	// noUnnamed is set once a file without a name (O_TMPFILE) could not
	// be made or named here (osFS.WriteNew).
	noUnnamed atomic.Bool

	mu     sync.RWMutex
	top    *pinnedDir            // the store's directory itself
	m      map[string]*pinnedDir // by path relative to dir
	closed bool
}

// pinnedDir is one open directory and its identity when it was opened.
type pinnedDir struct {
	f        *os.File
	rc       syscall.RawConn
	dev, ino uint64
}

// errSwapped says that a store directory's name no longer names the
// directory the store opened: it was replaced (say, by a symbolic link)
// since.
var errSwapped = errors.New("no longer the store's directory: replaced since the store was opened")

func newDirPins(root *os.Root, dir string) *dirPins {
	return &dirPins{root: root, dir: dir, m: make(map[string]*pinnedDir)}
}

// pin opens the directory at rel (relative to the store, "." for the
// store's own) through the root, without following a link at its last
// component.
func (p *dirPins) pin(rel string) (*pinnedDir, error) {
	f, err := p.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|noFollow, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	rc, err := f.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) })
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &pinnedDir{f: f, rc: rc, dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// get returns the pinned directory at rel, pinning it at its first use.
func (p *dirPins) get(rel string) (*pinnedDir, error) {
	p.mu.RLock()
	d, closed := p.m[rel], p.closed
	if rel == "." {
		d = p.top
	}
	p.mu.RUnlock()
	if closed {
		return nil, os.ErrClosed
	}
	if d != nil {
		return d, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, os.ErrClosed
	}
	if rel == "." && p.top != nil {
		return p.top, nil
	}
	if d := p.m[rel]; d != nil {
		return d, nil
	}
	d, err := p.pin(rel)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		p.top = d
	} else {
		p.m[rel] = d
	}
	return d, nil
}

// close closes every pinned directory. A change still using one finishes
// first (the descriptor is closed when it is done with it); later ones
// fail with os.ErrClosed.
func (p *dirPins) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.top != nil {
		_ = p.top.f.Close()
	}
	for _, d := range p.m {
		_ = d.f.Close()
	}
	p.m = nil
}

// pinnable reports whether rel (relative to the store) names one of the
// store's own directories that are pinned: one or two levels below it,
// but for those of dependents/ and batches/ (one per job that others name,
// and per batch), which come and go with their jobs: pinned, each would
// keep a descriptor open for the Store's life, and one removed and made
// again would look replaced.
func pinnable(rel string) bool {
	if rel == "." || rel == "" {
		return false
	}
	top, rest, nested := strings.Cut(rel, string(filepath.Separator))
	if nested && (top == dirDependents || top == dirBatches) {
		return false
	}
	return !strings.Contains(rest, string(filepath.Separator))
}

// dirOf returns the pinned directory that holds the store path path, and
// path's last component, or ok=false if path is not in a pinned directory
// (then the caller goes through the root). It checks that the names of
// the directories on the way still name the ones pinned.
func (p *dirPins) dirOf(path string) (d *pinnedDir, base string, ok bool, err error) {
	rel, base, ok := p.relOf(path)
	if !ok {
		return nil, "", false, nil
	}
	d, err = p.verified(rel)
	if err != nil {
		return nil, "", true, err
	}
	return d, base, true, nil
}

// uncheckedDirOf is dirOf without the check of the names on the way: for
// a file without a name only, which nothing can reach, wherever its
// directory is now, until it is linked (osFS.PlaceNew checks the
// directory it is linked into then).
func (p *dirPins) uncheckedDirOf(path string) (d *pinnedDir, ok bool, err error) {
	rel, _, ok := p.relOf(path)
	if !ok {
		return nil, false, nil
	}
	d, err = p.get(rel)
	return d, true, err
}

// relOf returns the directory of the store path path, relative to the
// store, and path's last component, or ok=false if that directory is not
// one that is pinned.
func (p *dirPins) relOf(path string) (rel, base string, ok bool) {
	r, in := strings.CutPrefix(path, p.dir+string(filepath.Separator))
	if !in || r == "" {
		return "", "", false
	}
	rel, base = filepath.Split(r)
	rel = filepath.Clean(rel)
	if !pinnable(rel) || base == "" || base == "." || base == ".." {
		return "", "", false
	}
	return rel, base, true
}

// verified returns the pinned directory rel once every name on the way to
// it has been checked to name what was pinned.
func (p *dirPins) verified(rel string) (*pinnedDir, error) {
	d, err := p.get(rel)
	if err != nil {
		return nil, err
	}
	parentRel, name := filepath.Split(rel)
	parentRel = filepath.Clean(parentRel)
	var parent *pinnedDir
	if parentRel == "." {
		parent, err = p.get(".")
	} else {
		parent, err = p.verified(parentRel)
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	err = parent.use(func(fd int) error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if err == nil && (uint64(st.Dev) != d.dev || uint64(st.Ino) != d.ino) {
		err = errSwapped
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(p.dir, rel), Err: err}
	}
	return d, nil
}

// use runs fn with d's descriptor, which stays open until fn returns.
func (d *pinnedDir) use(fn func(fd int) error) error {
	var err error
	if cerr := d.rc.Control(func(fd uintptr) { err = fn(int(fd)) }); cerr != nil {
		return os.ErrClosed
	}
	return err
}

// ignoringEINTR retries fn while it fails with EINTR, which a signal can
// make a system call return on a slow file system.
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// writeNew writes data to a new file name in d (O_EXCL, never through a
// link), with mode perm whatever the umask, fsynced when sync is set. On
// error the file is removed. path names the file in errors.
func (d *pinnedDir) writeNew(name, path string, data []byte, perm os.FileMode, sync bool) error {
	return d.use(func(dfd int) error {
		var fd int
		err := ignoringEINTR(func() (err error) {
			fd, err = unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
			return err
		})
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		fail := func(op string, err error) error {
			_ = unix.Close(fd)
			_ = unix.Unlinkat(dfd, name, 0)
			return &os.PathError{Op: op, Path: path, Err: err}
		}
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil { // not subject to the umask
			return fail("chmod", err)
		}
		if err := writeAll(fd, data); err != nil {
			return fail("write", err)
		}
		if sync {
			if err := ignoringEINTR(func() error { return fsyncFD(fd) }); err != nil {
				return fail("sync", err)
			}
		}
		if err := unix.Close(fd); err != nil {
			_ = unix.Unlinkat(dfd, name, 0)
			return &os.PathError{Op: "close", Path: path, Err: err}
		}
		return nil
	})
}

// writeUnnamed writes data, unsynced, to a new file without a name in d
// (O_TMPFILE), with mode perm whatever the umask, and returns its open
// descriptor: linkUnnamed names it, in d or in another directory of the
// same file system. ok=false, with no error, says the file system has no
// unnamed files. path names d in errors.
func (d *pinnedDir) writeUnnamed(path string, data []byte, perm os.FileMode) (fd int, ok bool, err error) {
	err = d.use(func(dfd int) error {
		var oerr error
		err := ignoringEINTR(func() error {
			fd, ok, oerr = openUnnamedAt(dfd, uint32(perm.Perm()))
			return oerr
		})
		if !ok {
			return nil
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil { // not subject to the umask
			_ = unix.Close(fd)
			return &os.PathError{Op: "chmod", Path: path, Err: err}
		}
		if err := writeAll(fd, data); err != nil {
			_ = unix.Close(fd)
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		return nil
	})
	if err != nil || !ok {
		return -1, ok, err
	}
	return fd, true, nil
}

// linkUnnamed names fd, a file writeUnnamed wrote in d, name (path in
// errors); it fails with an error matching fs.ErrExist if name exists.
// ok=false, with no error, says this process cannot name unnamed files.
func (d *pinnedDir) linkUnnamed(fd int, name, path string) (ok bool, err error) {
	err = d.use(func(dfd int) error {
		var lerr error
		err := ignoringEINTR(func() error {
			ok, lerr = linkUnnamedAt(fd, dfd, name)
			return lerr
		})
		if !ok {
			return nil
		}
		if err != nil {
			return &os.PathError{Op: "link", Path: path, Err: err}
		}
		return nil
	})
	return ok, err
}

// writeAll writes all of data to fd.
func writeAll(fd int, data []byte) error {
	for b := data; len(b) > 0; {
		var n int
		if err := ignoringEINTR(func() (err error) { n, err = unix.Write(fd, b); return err }); err != nil {
			return err
		}
		if n == 0 {
			return unix.EIO
		}
		b = b[n:]
	}
	return nil
}

// setXattr sets the extended attribute xname of the regular file name in
// d (path in errors) to value, or removes it if value is nil (a missing
// one is no error), never through a link.
func (d *pinnedDir) setXattr(name, path, xname string, value []byte) error {
	return d.use(func(dfd int) error {
		fd, err := openRegularAt(dfd, name, path, unix.O_RDONLY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if value == nil {
			if err := fremovexattr(fd, xname); err != nil {
				return &os.PathError{Op: "removexattr", Path: path, Err: err}
			}
			return nil
		}
		if err := fsetxattr(fd, xname, value); err != nil {
			return &os.PathError{Op: "setxattr", Path: path, Err: err}
		}
		return nil
	})
}

// openRegularAt opens the entry name of the directory dfd (path in
// errors) with flag, never through a link nor waiting for a writer of a
// planted FIFO, and refuses anything but a regular file.
func openRegularAt(dfd int, name, path string, flag int) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dfd, name, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return regularOnly(fd, path)
}

// regularOnly returns fd if it is a regular file; otherwise it closes fd
// and fails (path in errors).
func regularOnly(fd int, path string) (int, error) {
	if _, err := regularStat(fd, path); err != nil {
		return -1, err
	}
	return fd, nil
}

// regularStat returns fd's stat if it is a regular file; otherwise it
// closes fd and returns an error naming path.
func regularStat(fd int, path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return st, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return st, fmt.Errorf("%s: not a regular file", path)
	}
	return st, nil
}

// overwrite replaces the contents of the existing regular file name in d
// with data, in place, never through a link. path names the file in
// errors.
func (d *pinnedDir) overwrite(name, path string, data []byte) error {
	return d.use(func(dfd int) error {
		fd, err := openRegularAt(dfd, name, path, unix.O_WRONLY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for off := 0; off < len(data); {
			var n int
			if err := ignoringEINTR(func() (err error) { n, err = unix.Pwrite(fd, data[off:], int64(off)); return err }); err != nil {
				return &os.PathError{Op: "write", Path: path, Err: err}
			}
			if n == 0 {
				return &os.PathError{Op: "write", Path: path, Err: unix.EIO}
			}
			off += n
		}
		if err := unix.Ftruncate(fd, int64(len(data))); err != nil {
			return &os.PathError{Op: "truncate", Path: path, Err: err}
		}
		return nil
	})
}

// useBoth runs fn with the descriptors of a and b, both open until fn
// returns.
func useBoth(a, b *pinnedDir, fn func(afd, bfd int) error) error {
	return a.use(func(afd int) error {
		return b.use(func(bfd int) error { return fn(afd, bfd) })
	})
}

// removeAt removes the entry name of the directory fd as os.Remove does:
// a file, or else an empty directory.
func removeAt(fd int, name string) error {
	err := ignoringEINTR(func() error { return unix.Unlinkat(fd, name, 0) })
	if err == nil || errors.Is(err, unix.ENOENT) {
		return err
	}
	if err1 := ignoringEINTR(func() error { return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) }); err1 == nil {
		return nil
	} else if !errors.Is(err1, unix.ENOTDIR) {
		return err1
	}
	return err
}

// syncAt fsyncs the regular file name of the directory fd, never through
// a link.
func syncAt(dfd int, name string) error {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return err
	}
	err = ignoringEINTR(func() error { return fsyncFD(fd) })
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}
