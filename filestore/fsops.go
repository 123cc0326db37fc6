package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
)

// fileOps is the seam through which the store changes the directory. Every
// write, rename, link, removal and fsync goes through it, so tests can make
// any single step fail (EIO, ENOSPC) or stop the process's file activity at
// that step as a crash would, then reopen the store and check what a crash
// there leaves behind. Reads do not go through it: a read changes nothing.
type fileOps interface {
	// WriteFile atomically replaces path with data: a temp file in tmpDir,
	// fsynced when sync is set, renamed over path. On error no temp file is
	// left behind.
	WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error
	// WriteTemp writes data to a new file in tmpDir (fsynced when sync is
	// set) and returns its path.
	WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error)
	// Link creates newname as a hard link to oldname; it fails with an
	// error matching fs.ErrExist if newname exists.
	Link(oldname, newname string) error
	// Rename renames oldname to newname, replacing newname.
	Rename(oldname, newname string) error
	// Remove removes the file at path.
	Remove(path string) error
	// Overwrite replaces the contents of the existing regular file at path
	// with data, in place (the same inode), without fsync. It never
	// follows a symbolic link.
	Overwrite(path string, data []byte) error
	// SyncFS opens the file system that holds dir for one syncfs(2): its
	// Sync makes every file written on it durable at once. Open it before
	// writing the files. Returns an error matching errors.ErrUnsupported
	// where there is no syncfs.
	SyncFS(dir string) (syncer, error)
	// SyncDir fsyncs the directory dir so that its entries are durable.
	SyncDir(dir string) error
	// Mkdir creates dir with perm; an existing directory is not an error.
	Mkdir(dir string, perm os.FileMode) error
}

// syncer is a pending syncfs(2), see fileOps.SyncFS.
type syncer interface {
	Sync() error
	Close() error
}

// osFS is the real fileOps.
type osFS struct{}

func (osFS) SyncFS(dir string) (syncer, error) { return openSyncFS(dir) }

func (osFS) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	if !sync {
		tmp, err := writeTemp(tmpDir, filepath.Base(path), data, perm, false)
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		return nil
	}
	// renameio writes the temp file, fsyncs it and renames it; it never
	// fsyncs the directory, which the caller does where it matters.
	t, err := renameio.NewPendingFile(path, renameio.WithTempDir(tmpDir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer func() { _ = t.Cleanup() }()
	if _, err := t.Write(data); err != nil {
		return err
	}
	return t.CloseAtomicallyReplace()
}

func (osFS) WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error) {
	return writeTemp(tmpDir, "new", data, perm, sync)
}

var tempSeq atomic.Uint64

// writeTemp writes data to a fresh file in dir named after base, with the
// process ID and a sequence so that concurrent writers never collide.
func writeTemp(dir, base string, data []byte, perm os.FileMode, sync bool) (string, error) {
	name := filepath.Join(dir, "."+base+"."+strconv.Itoa(os.Getpid())+"."+
		strconv.FormatUint(tempSeq.Add(1), 10)+"."+strconv.FormatInt(time.Now().UnixNano()%1e9, 10))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		_ = f.Close()
		_ = os.Remove(name)
		return "", err
	}
	if err := f.Chmod(perm); err != nil { // not subject to the umask
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(name)
		return "", err
	}
	return name, nil
}

func (osFS) Overwrite(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|noFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err == nil {
			err = fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
		}
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Link(oldname, newname string) error   { return os.Link(oldname, newname) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) Remove(path string) error             { return os.Remove(path) }
func (osFS) Mkdir(dir string, perm os.FileMode) error {
	err := os.Mkdir(dir, perm)
	if errors.Is(err, os.ErrExist) {
		fi, serr := os.Lstat(dir)
		if serr != nil {
			return serr
		}
		if !fi.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: errors.New("exists and is not a directory")}
		}
		return nil
	}
	if err != nil {
		return err
	}
	return chmodKeepSetgid(dir, perm)
}

// chmodKeepSetgid sets the permissions of a new directory to perm, which
// the umask does not limit, keeping the setgid bit it inherited from its
// parent: a store shared by a group keeps its files in that group, whoever
// creates them.
func chmodKeepSetgid(dir string, perm os.FileMode) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	return os.Chmod(dir, perm|fi.Mode()&os.ModeSetgid)
}

func (osFS) SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
