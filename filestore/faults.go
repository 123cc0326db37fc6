package filestore

import (
	"io/fs"
	"os"

	"github.com/jobdir/jobdir/internal/fsfault"
)

// faultOps is fileOps with the failures Options.Faults injects: it asks the
// injector before each operation, and fails it with a *fs.PathError around
// the injected error instead of doing it.
type faultOps struct {
	inner fileOps
	fail  func(op, path string) error
}

func (f faultOps) check(op fsfault.Op, path string) error {
	if err := f.fail(string(op), path); err != nil {
		return &fs.PathError{Op: string(op), Path: path, Err: err}
	}
	return nil
}

func (f faultOps) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	if err := f.check(fsfault.Write, path); err != nil {
		return err
	}
	return f.inner.WriteFile(path, tmpDir, data, perm, sync)
}

func (f faultOps) WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error) {
	if err := f.check(fsfault.WriteTemp, tmpDir); err != nil {
		return "", err
	}
	return f.inner.WriteTemp(tmpDir, data, perm, sync)
}

func (f faultOps) WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error) {
	if err := f.check(fsfault.WriteTemp, tmpDir); err != nil {
		return nil, err
	}
	return f.inner.WriteNew(path, tmpDir, data, perm)
}

func (f faultOps) PlaceNew(nf *newFile) error {
	if err := f.check(fsfault.Rename, nf.path); err != nil {
		f.inner.DropNew(nf)
		return err
	}
	return f.inner.PlaceNew(nf)
}

func (f faultOps) DropNew(nf *newFile) { f.inner.DropNew(nf) }

func (f faultOps) Link(oldname, newname string) error {
	if err := f.check(fsfault.Link, newname); err != nil {
		return err
	}
	return f.inner.Link(oldname, newname)
}

func (f faultOps) Rename(oldname, newname string) error {
	if err := f.check(fsfault.Rename, newname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

func (f faultOps) Remove(path string) error {
	if err := f.check(fsfault.Remove, path); err != nil {
		return err
	}
	return f.inner.Remove(path)
}

func (f faultOps) RemoveAll(path string) error {
	if err := f.check(fsfault.Remove, path); err != nil {
		return err
	}
	return f.inner.RemoveAll(path)
}

func (f faultOps) JournalWrite(file *os.File, data []byte, off int64) error {
	if err := f.check(fsfault.JournalWrite, file.Name()); err != nil {
		return err
	}
	return f.inner.JournalWrite(file, data, off)
}

func (f faultOps) JournalSync(file *os.File) error {
	if err := f.check(fsfault.JournalSync, file.Name()); err != nil {
		return err
	}
	return f.inner.JournalSync(file)
}

func (f faultOps) SetXattr(path, name string, value []byte) error {
	if err := f.check(fsfault.SetXattr, path); err != nil {
		return err
	}
	return f.inner.SetXattr(path, name, value)
}

func (f faultOps) Overwrite(path string, data []byte) error {
	if err := f.check(fsfault.Overwrite, path); err != nil {
		return err
	}
	return f.inner.Overwrite(path, data)
}

func (f faultOps) SyncFS(dir string) (syncer, error) {
	if err := f.check(fsfault.SyncFS, dir); err != nil {
		return nil, err
	}
	s, err := f.inner.SyncFS(dir)
	if err != nil {
		return nil, err
	}
	return faultSyncOps{f: f, inner: s, dir: dir}, nil
}

func (f faultOps) SyncFile(path string) error {
	if err := f.check(fsfault.SyncFile, path); err != nil {
		return err
	}
	return f.inner.SyncFile(path)
}

func (f faultOps) SyncDir(dir string) error {
	if err := f.check(fsfault.SyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

// FSInfo is a read, which no fault injected here fails.
func (f faultOps) FSInfo(dir string) (fsInfo, error) { return f.inner.FSInfo(dir) }

func (f faultOps) Mkdir(dir string, perm os.FileMode) error {
	if err := f.check(fsfault.Mkdir, dir); err != nil {
		return err
	}
	return f.inner.Mkdir(dir, perm)
}

// faultSyncOps makes the syncfs itself one more operation that can fail.
type faultSyncOps struct {
	f     faultOps
	inner syncer
	dir   string
}

func (s faultSyncOps) Sync() error {
	if err := s.f.check(fsfault.SyncFSFlush, s.dir); err != nil {
		return err
	}
	return s.inner.Sync()
}

func (s faultSyncOps) Close() error { return s.inner.Close() }
