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
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/jobdir/jobdir/jobstore"
)

// Open opens the store in dir, creating dir and the store's layout if they
// are missing: it checks the filesystem, checks (or records) the format
// version, migrates a directory written by the old single-process store,
// sweeps temporary files left by dead processes and queues again the jobs
// of dead workers. Its cost does not grow with the store: the repair of
// what crashes leave (see Repair) is made in the background a second
// after Open, the queue is read by the first Claim, and the directories are
// watched from the first call that needs events. opts may be nil.
//
// Open returns ErrUnsupportedFilesystem on a network or userspace
// filesystem (unless opts.AllowUnsafeFilesystem), ErrFormatTooNew for a
// store written by a newer version, and ErrNotStore for a directory with a
// foreign FORMAT file.
func Open(ctx context.Context, dir string, opts *Options) (*Store, error) {
	return open(ctx, dir, opts, osFS{})
}

// open is Open with the file operations fsys: osFS, or in tests one that
// fails some of them.
func open(ctx context.Context, dir string, opts *Options, fsys fileOps) (*Store, error) {
	o := opts.withDefaults()
	if o.Faults != nil {
		fsys = faultOps{inner: fsys, fail: o.Faults}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	sub := make(map[string]string)
	for _, d := range append([]string{dirLocks}, stateDirs...) {
		sub[d] = filepath.Join(abs, d) + string(filepath.Separator)
	}
	s := &Store{
		dir:      abs,
		sub:      sub,
		opts:     o,
		fs:       fsys,
		dirPerm:  0o700,
		filePerm: 0o600,
		log:      o.Logger,
		closed:   make(chan struct{}),
		ended:    make(chan struct{}, 1),
		cands:    newCandIndex(),
		pending:  make(map[string]struct{}),
		// The candidate set is filled by the first Claim (refreshCands):
		// a Store that never claims never reads queued/.
		rescan:    true,
		work:      make(chan struct{}),
		changed:   make(map[string]*idWatch),
		readers:   make(map[string]*jobReader),
		keys:      make(map[string]string),
		recorders: make(map[*moveRecorder]struct{}),
		claims:    newClaimFlush(),

		barrierNonce: newNonce(),
	}
	s.partTurnDone = sync.NewCond(&s.mu)
	s.durable = newDurability(abs, &s.fs, o.NoSync)
	if o.GroupAccess {
		s.dirPerm, s.filePerm = 0o770, 0o660
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"create directory", s.createRoot},
		{"check filesystem", s.checkFilesystem},
		{"choose durability", func(context.Context) error { s.durable.choose(); return nil }},
		{"check format", s.checkFormat},
		{"create layout", s.createLayout},
		{"check trust", func(context.Context) error { return s.checkTrust() }},
		{"open record locks", s.openRecordLocks},
		{"open syncfs", func(context.Context) error {
			if !o.SyncFS {
				return s.durable.openMoves(s.log, s.locksPath(syncShareName), s.filePerm)
			}
			return s.durable.open(s.log)
		}},
		{"migrate legacy records", s.migrateLegacy},
		{"sweep temporary files", s.sweepTmp},
		{"replay submission journals", s.replayJournals},
		{"recover dead workers' jobs", s.recoverAtOpen},
	}
	for _, st := range steps {
		if err := ctx.Err(); err != nil {
			s.Close()
			return nil, err
		}
		if err := st.run(ctx); err != nil {
			s.Close()
			if errors.Is(err, ErrUnsupportedFilesystem) || errors.Is(err, ErrFormatTooNew) || errors.Is(err, ErrNotStore) {
				return nil, err
			}
			return nil, fmt.Errorf("filestore: open %s: %s: %w", abs, st.name, err)
		}
	}
	s.wg.Add(2)
	go s.maintain()
	go s.flushClaims()
	return s, nil
}

// Close stops the store's goroutines and watcher, releases the leases of
// jobs this Store claimed (they are then recovered like a dead worker's)
// and makes blocked calls return ErrClosed. It is idempotent and safe for
// concurrent use.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		// No job's shared reader starts after this (see joinReader), so
		// s.wg below counts every one.
		s.mu.Lock()
		s.noReaders = true
		s.mu.Unlock()
		s.watchMu.Lock()
		if s.watcher != nil {
			_ = s.watcher.Close()
		}
		if s.stopEnds != nil {
			s.stopEnds()
		}
		s.watchMu.Unlock()
		s.closingJournals()
		s.wg.Wait()
		s.closeJournal()
		s.closeWorkers()
		s.claiming.Lock()
		releaseOwned(s)
		s.claiming.Unlock()
		s.durable.close()
		if s.tmpLock != nil {
			// The end mark is closed before the lock is removed: its
			// close while the name is still in tmp/ is what tells the
			// Stores that watch for ends (ends.go) to recover the leases
			// released above at once.
			_ = s.fs.RemoveAll(s.tmpDir)
			s.closeEndMark()
			_ = s.tmpLock.Unlock()
			_ = s.fs.Remove(s.tmpLock.Path())
		}
		s.queueCache.close()
		if s.ranges != nil {
			s.ranges.close()
		}
		s.spares.close()
		if s.pins != nil {
			s.pins.close()
		}
		if s.root != nil {
			_ = s.root.Close()
		}
	})
	return nil
}

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
		// The directories above are not the store's: created as given.
		if err := os.MkdirAll(filepath.Dir(s.dir), s.dirPerm); err != nil {
			return err
		}
		// Mkdir sets the permissions, which the umask does not limit, and
		// keeps the setgid bit inherited from the parent: a store shared by
		// a group keeps its files in that group, whoever creates them.
		if err := s.fs.Mkdir(s.dir, s.dirPerm); err != nil {
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
		return &fs.PathError{Op: "open store", Path: s.dir, Err: syscall.ENOTDIR}
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
		s.pins = newDirPins(root, s.dir)
		s.fs = osFS{root: root, dir: s.dir, pins: s.pins}
	}
	return nil
}

// checkFormat reads FORMAT, refusing a newer or foreign one, and makes a
// directory without one a new store (create).
func (s *Store) checkFormat(ctx context.Context) error {
	p := filepath.Join(s.dir, formatFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		var created bool
		if created, err = s.create(ctx); err != nil || created {
			return err
		}
		data, err = os.ReadFile(p) // another process created the store first
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

// createLockFile, in the store's directory, is held (flock) by the
// process that creates the store, from before the first entry of the
// layout until FORMAT is durable. Its name begins with ".FORMAT", which
// older programs already pass over as the temp file of a FORMAT being
// written.
const createLockFile = "." + formatFile + ".lock"

// create makes the directory, which has no FORMAT, a store: it reports
// false if another process made it one first.
//
// Creation is atomic: FORMAT, the only file that says "a store", is
// written last, once the whole layout is in place and durable, so a
// process that finds FORMAT finds a complete store and needs no fsync of
// its own. The processes that find none wait for one another on the
// creation lock, and the first makes the store. A lock rather than a
// layout built aside and renamed into place: the store's directory may
// be a volume's mount point, which cannot be renamed over or removed, and
// must stay usable as it is. The lock file is made before every other
// entry and never removed, so a directory whose creation has begun, even
// by a process that died in it, is one IsStore accepts; the next Open
// finishes the creation.
//
// Creation is durable: each directory above the store's is fsynced (the
// entry of each new directory is then on disk), then the state
// directories are made and the store's directory fsynced, then FORMAT is
// written and the directory fsynced again, all before Open returns and so
// before any operation is acknowledged (TestCreateIsDurable). An Open of
// an existing store takes no lock and makes none of these fsyncs. A
// creator that dies between FORMAT's rename and its fsync leaves a
// FORMAT that others trust and a power cut may still take; the lock file,
// durable by then, keeps the directory a store, and the next Open writes
// FORMAT again.
func (s *Store) create(ctx context.Context) (bool, error) {
	unlock, err := lockRecord(ctx, filepath.Join(s.dir, createLockFile), true, true, s.filePerm)
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, err := os.Lstat(filepath.Join(s.dir, formatFile)); !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := s.syncParents(); err != nil {
		return false, err
	}
	if _, err := s.makeStateDirs(); err != nil {
		return false, err
	}
	// Even where the directories were there (a creator died after making
	// them), their entries and the lock file's may not be durable yet.
	if err := s.durable.dir("."); err != nil {
		return false, err
	}
	return true, s.writeFormat(filepath.Join(s.dir, formatFile))
}

// syncParents fsyncs each directory above the store's, so that the
// store's directory, and any directory above it that Open or another
// process made a moment ago, stays after a power cut. Only the store's
// parent must be readable: a directory higher up that this user may not
// open is not one it made.
func (s *Store) syncParents() error {
	if s.opts.NoSync {
		return nil
	}
	for d := filepath.Dir(s.dir); ; d = filepath.Dir(d) {
		err := s.fs.SyncDir(d)
		if err != nil && (d == filepath.Dir(s.dir) || !errors.Is(err, fs.ErrPermission)) {
			return fmt.Errorf("fsync %s: %w", d, err)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// writeFormat writes the FORMAT file at p with this format, atomically.
func (s *Store) writeFormat(p string) error {
	doc, _ := json.Marshal(formatDoc{Store: storeName, Format: FormatVersion})
	// Staged in the root, not in tmp/, which another process may be
	// sweeping while this one creates the store.
	if err := s.fs.WriteFile(p, s.dir, append(doc, '\n'), s.filePerm, s.durable.file()); err != nil {
		return err
	}
	return s.durable.dir(".")
}

// makeStateDirs makes the state directories that are missing and reports
// whether it made any.
func (s *Store) makeStateDirs() (bool, error) {
	made := false
	for _, d := range []string{dirTmp, dirQueued, dirClaimed, dirDone, dirKeys, dirLocks} {
		p := filepath.Join(s.dir, d)
		fi, err := os.Lstat(p)
		if err == nil && fi.IsDir() {
			continue
		}
		// Mkdir refuses what is there and is not a directory (a link).
		if err := s.fs.Mkdir(p, s.dirPerm); err != nil {
			return made, err
		}
		made = true
	}
	return made, nil
}

// createLayout makes the state directories an existing store lacks (a
// new store has them: create) and this Store's staging directory,
// tmp/<id>/, guarded by the lock file tmp/<id>.lock.
func (s *Store) createLayout(context.Context) error {
	if made, err := s.makeStateDirs(); err != nil {
		return err
	} else if made {
		if err := s.durable.dir("."); err != nil {
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
				_ = s.fs.RemoveAll(dir)
				_ = s.fs.Remove(p)
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
			if err := s.fs.RemoveAll(p); err != nil {
				return found, err
			}
		}
	}
	return found, nil
}
