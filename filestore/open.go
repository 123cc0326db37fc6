package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/jobdir/jobdir/jobstore"
)

// formatDoc is the content of the FORMAT file.
type formatDoc struct {
	// Store names the program, so that a FORMAT file of something else is
	// not mistaken for ours.
	Store string `json:"store"`
	// Format is the layout version, FormatVersion.
	Format int `json:"format"`
}

const storeName = "jobdir"

func (s *Store) createRoot(context.Context) error {
	fi, err := os.Lstat(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(s.dir, s.dirPerm); err != nil {
			return err
		}
		if err := chmodKeepSetgid(s.dir, s.dirPerm); err != nil {
			return err
		}
		return s.pinRoot()
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// The root itself may be a symlink a user set up; follow it once.
		fi, err = os.Stat(s.dir)
		if err != nil {
			return err
		}
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", s.dir)
	}
	return s.pinRoot()
}

// pinRoot opens the store's directory once and, for the real file system,
// resolves every later write from that descriptor (see osFS).
func (s *Store) pinRoot() error {
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return err
	}
	s.root = root
	if f, ok := s.fs.(osFS); ok && f.root == nil {
		s.fs = osFS{root: root, dir: s.dir}
	}
	return nil
}

// checkFormat reads FORMAT, refusing a newer or foreign one, and writes it
// for a new store.
func (s *Store) checkFormat(context.Context) error {
	p := filepath.Join(s.dir, formatFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return s.writeFormat(p)
	}
	if err != nil {
		return err
	}
	var doc formatDoc
	if err := json.Unmarshal(data, &doc); err != nil || doc.Store != storeName || doc.Format < 1 {
		return fmt.Errorf("%w: %s: %s does not describe a jobdir store", ErrNotStore, s.dir, formatFile)
	}
	if doc.Format > FormatVersion {
		return fmt.Errorf("%w: %s has format %d, this program reads format %d; upgrade jobdir to open it",
			ErrFormatTooNew, s.dir, doc.Format, FormatVersion)
	}
	if doc.Format < FormatVersion {
		// Every file of an older format is valid in this one; only the
		// protocol between live processes changed. Recording the new
		// format makes programs of the old one refuse the store from now
		// on.
		if err := s.writeFormat(p); err != nil {
			return fmt.Errorf("upgrade %s from format %d: %w", formatFile, doc.Format, err)
		}
		s.log.Info("filestore: upgraded the store's format; programs of the older version must not use it any more",
			"dir", s.dir, "from", doc.Format, "to", FormatVersion)
	}
	return nil
}

// writeFormat writes the FORMAT file at p with this format, atomically.
func (s *Store) writeFormat(p string) error {
	doc, _ := json.Marshal(formatDoc{Store: storeName, Format: FormatVersion})
	// Staged in the root, not in tmp/, which another process may be
	// sweeping while this one creates the store.
	if err := s.fs.WriteFile(p, s.dir, append(doc, '\n'), s.filePerm, s.sync()); err != nil {
		return err
	}
	if s.sync() {
		return s.fs.SyncDir(s.dir)
	}
	return nil
}

// createLayout creates the state directories and this Store's staging
// directory, tmp/<id>/, guarded by the lock file tmp/<id>.lock.
func (s *Store) createLayout(context.Context) error {
	for _, d := range []string{dirTmp, dirQueued, dirClaimed, dirDone, dirKeys, dirLocks} {
		if err := s.fs.Mkdir(filepath.Join(s.dir, d), s.dirPerm); err != nil {
			return err
		}
	}
	// Another process's sweep may take the lock file between its creation
	// and its locking, and delete it: then the lock is on an orphan inode,
	// and this Store starts over with a new name.
	for tries := 0; ; tries++ {
		name := jobstore.NewID(time.Now())
		lock := flock.New(filepath.Join(s.dir, dirTmp, name+recordLock), flock.SetFlag(os.O_RDONLY|os.O_CREATE|noFollow), flock.SetPermissions(s.filePerm))
		ok, err := lock.TryLock()
		if err != nil {
			return fmt.Errorf("lock staging directory: %w", err)
		}
		if ok {
			if same, _ := sameInode(lock, lock.Path(), s.filePerm); same {
				s.tmpLock = lock
				s.tmpDir = filepath.Join(s.dir, dirTmp, name)
				break
			}
			_ = lock.Unlock()
		}
		if tries > 100 {
			return errors.New("cannot lock a staging directory")
		}
	}
	return s.fs.Mkdir(s.tmpDir, s.dirPerm)
}

// sweepTmp removes the staging directories of Stores that are gone (their
// lock is free) and stray temp files directly in tmp/, which only a dead
// writer leaves. A live Store's staging directory is locked and kept.
func (s *Store) sweepTmp(context.Context) error {
	_, err := s.sweep(true)
	return err
}

// sweep finds, and with repair removes, leftovers in tmp/. It returns the
// paths it found.
func (s *Store) sweep(repair bool) ([]string, error) {
	root := filepath.Join(s.dir, dirTmp)
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(root, name)
		if p == s.tmpDir || p == s.tmpLock.Path() {
			continue
		}
		if base, ok := strings.CutSuffix(name, recordLock); ok && jobstore.ValidateID(base) == nil {
			// A staging lock: free means its Store is gone.
			l := flock.New(p, flock.SetFlag(os.O_RDONLY|noFollow))
			got, err := l.TryLock()
			if err != nil || !got {
				continue
			}
			if same, _ := sameInode(l, p, 0); !same {
				_ = l.Unlock()
				continue
			}
			dir := filepath.Join(root, base)
			found = append(found, dir)
			if repair {
				_ = os.RemoveAll(dir)
				_ = os.Remove(p)
			}
			_ = l.Unlock()
			continue
		}
		if e.IsDir() && jobstore.ValidateID(name) == nil {
			if _, err := os.Lstat(p + recordLock); err == nil {
				continue // handled with its lock
			}
		}
		found = append(found, p)
		if repair {
			if err := os.RemoveAll(p); err != nil {
				return found, err
			}
		}
	}
	return found, nil
}
