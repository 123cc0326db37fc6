package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.WorkerHistory = (*Store)(nil)

// dirWorkers holds one file per registered worker, workers/<sha256 of its
// ID>.json, made when the first worker registers. Its process holds an
// exclusive flock on it for as long as it is registered: a file nobody
// holds locked is a dead worker's.
const dirWorkers = "workers"

// dirEnded, in workers/, holds the record of each worker that ended,
// workers/ended/<sha256 of its ID>.json: its WorkerInfo with EndedAt,
// written when the worker unregisters or its store closes, or by the
// first process that finds its file unlocked. EndedWorkers removes the
// records older than jobstore.RecentWorkerWindow.
const dirEnded = "ended"

// maxWorkerFile bounds how much of a worker file is read.
const maxWorkerFile = 64 << 10

// workerBusyTries is how often RegisterWorker looks again at a file whose
// lock is held before it calls the name taken: a process listing the
// workers holds a dead worker's lock for a moment while it removes it.
const workerBusyTries = 5

// workerReg is one registration of this Store: the worker file, held
// locked by f.
type workerReg struct {
	f    *os.File
	path string
	info jobstore.WorkerInfo
}

func (s *Store) workerPath(id string) string {
	return filepath.Join(s.dir, dirWorkers, keyName(id)+recordExt)
}

// RegisterWorker lists info until unregister is called, the Store is
// closed, or the process ends: its file in workers/ is held locked by this
// process, and the kernel drops the lock when the process dies, so that
// every process at once sees the worker gone (and the next Workers removes
// its file). It implements jobstore.WorkerRegistry. Worker files are not
// fsynced: after a power cut every worker is dead anyway.
func (s *Store) RegisterWorker(ctx context.Context, info jobstore.WorkerInfo) (func() error, error) {
	if err := info.Validate(); err != nil {
		return nil, fmt.Errorf("filestore: register worker: %w", err)
	}
	if err := s.enter(ctx, "register worker"); err != nil {
		return nil, err
	}
	reg, err := s.registerWorker(ctx, info.Normalized())
	if err != nil {
		return nil, fmt.Errorf("filestore: register worker %s: %w", info.ID, err)
	}
	s.workersMu.Lock()
	if s.isClosed() {
		s.workersMu.Unlock()
		s.dropWorker(reg)
		return nil, fmt.Errorf("filestore: register worker %s: %w", info.ID, jobstore.ErrClosed)
	}
	if s.workerRegs == nil {
		s.workerRegs = make(map[*workerReg]struct{})
	}
	s.workerRegs[reg] = struct{}{}
	s.workersMu.Unlock()
	return sync.OnceValue(func() error {
		s.workersMu.Lock()
		_, ok := s.workerRegs[reg]
		delete(s.workerRegs, reg)
		s.workersMu.Unlock()
		if ok {
			s.dropWorker(reg)
		}
		return nil
	}), nil
}

// registerWorker writes info's file in tmp/, locks it, and links it into
// workers/, which refuses to replace a file there: of two processes that
// register one name, one wins. A file there that nobody holds locked is a
// dead worker's, removed first.
func (s *Store) registerWorker(ctx context.Context, info jobstore.WorkerInfo) (*workerReg, error) {
	data, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, dirWorkers)
	if err := s.fs.Mkdir(dir, s.dirPerm); err != nil { // an existing directory is no error; a link is
		return nil, err
	}
	tmp, err := s.fs.WriteTemp(s.tmpDir, append(data, '\n'), s.filePerm, false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.fs.Remove(tmp) }()
	f, err := os.OpenFile(tmp, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return nil, err
	}
	if err := flockFile(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, err
	}
	p := s.workerPath(info.ID)
	for busy := 0; ; {
		err := s.fs.Link(tmp, p)
		if err == nil {
			return &workerReg{f: f, path: p, info: info}, nil
		}
		if errors.Is(err, fs.ErrExist) {
			var gone bool
			gone, err = s.forgetDeadWorker(p)
			if err == nil && !gone {
				if busy++; busy < workerBusyTries {
					select {
					case <-time.After(10 * time.Millisecond):
					case <-ctx.Done():
						err = ctx.Err()
					}
				} else {
					err = jobstore.ErrWorkerExists
				}
			}
		}
		if err != nil {
			unlockFile(f)
			return nil, err
		}
	}
}

// dropWorker records reg's worker as ended and removes its file, if it is
// still the one reg locked, then unlocks it.
func (s *Store) dropWorker(reg *workerReg) {
	if same, err := sameInode(reg.f, reg.path, 0); err == nil && same {
		s.recordEnded(reg.info)
		_ = s.fs.Remove(reg.path)
	}
	unlockFile(reg.f)
}

// recordEnded writes info, ended now, in workers/ended/, replacing an
// earlier end of its ID. It is best effort: a worker whose end is not
// recorded is only forgotten sooner.
func (s *Store) recordEnded(info jobstore.WorkerInfo) {
	info.EndedAt = time.Now().UTC().Round(time.Microsecond)
	info.Running = nil
	data, err := json.Marshal(info)
	if err != nil {
		return
	}
	dir := filepath.Join(s.dir, dirWorkers, dirEnded)
	if err := s.fs.Mkdir(dir, s.dirPerm); err != nil {
		return
	}
	tmp, err := s.fs.WriteTemp(s.tmpDir, append(data, '\n'), s.filePerm, false)
	if err != nil {
		return
	}
	if err := s.fs.Rename(tmp, filepath.Join(dir, keyName(info.ID)+recordExt)); err != nil {
		_ = s.fs.Remove(tmp)
	}
}

// closeWorkers unregisters every worker this Store registered; Close calls
// it.
func (s *Store) closeWorkers() {
	s.workersMu.Lock()
	regs := s.workerRegs
	s.workerRegs = nil
	s.workersMu.Unlock()
	for reg := range regs {
		s.dropWorker(reg)
	}
}

// forgetDeadWorker removes the worker file at path if no process holds it
// locked, and reports whether path is free now: true if it removed it or
// it was gone or replaced, false if a live worker holds it. The removal
// goes through the store's seam, which resolves path inside the store
// directory: a link planted for workers/ cannot make it remove a file
// elsewhere.
func (s *Store) forgetDeadWorker(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = flockFile(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = flockFile(f, unix.LOCK_UN) }()
	if info, err := decodeWorker(f); err == nil {
		s.recordEnded(info)
	}
	return s.removeDeadWorker(f, path)
}

// removeDeadWorker removes the worker file at path, which f opened and the
// caller holds locked exclusively, if path still names f's file, and
// reports whether path is free now.
func (s *Store) removeDeadWorker(f *os.File, path string) (bool, error) {
	same, err := sameInode(f, path, 0)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !same) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// Workers returns the live workers of every process on the store, sorted
// by ID: those whose file in workers/ its process holds locked. It removes
// the files of dead workers it finds (where this process may), and skips
// files that are not a worker's. It implements jobstore.WorkerRegistry.
func (s *Store) Workers(ctx context.Context) ([]jobstore.WorkerInfo, error) {
	if err := s.enter(ctx, "workers"); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, dirWorkers)
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []jobstore.WorkerInfo{}, nil
	}
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a directory (%s): the store's list of workers cannot be read", dir, fi.Mode().Type())
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: workers: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: workers: %w", err)
	}
	ws := []jobstore.WorkerInfo{}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !strings.HasSuffix(e.Name(), recordExt) || !e.Type().IsRegular() {
			continue
		}
		info, alive, err := s.readWorker(filepath.Join(dir, e.Name()))
		if err == nil && alive {
			ws = append(ws, info)
		}
	}
	storekit.SortWorkers(ws)
	return ws, nil
}

// readWorker reads the worker file at path and reports whether its worker
// is alive; a dead worker's file is removed.
func (s *Store) readWorker(path string) (jobstore.WorkerInfo, bool, error) {
	var info jobstore.WorkerInfo
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return info, false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return info, false, errors.New("not a regular file")
	}
	err = flockFile(f, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		// Nobody holds it: a dead worker's.
		defer func() { _ = flockFile(f, unix.LOCK_UN) }()
		if dead, err := decodeWorker(f); err == nil {
			s.recordEnded(dead)
		}
		_, err = s.removeDeadWorker(f, path)
		return info, false, err
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return info, false, err
	}
	info, err = decodeWorker(f)
	return info, err == nil, err
}

// decodeWorker reads the WorkerInfo of a worker file or of an ended
// worker's record from f, checked, with Kinds never nil and no Running.
func decodeWorker(f *os.File) (jobstore.WorkerInfo, error) {
	var info jobstore.WorkerInfo
	data, err := io.ReadAll(io.LimitReader(f, maxWorkerFile+1))
	if err != nil {
		return info, err
	}
	if len(data) > maxWorkerFile {
		return info, errors.New("worker file too large")
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return info, err
	}
	if err := info.Validate(); err != nil {
		return info, err
	}
	if info.Kinds == nil {
		info.Kinds = []string{}
	}
	info.Running = nil
	return info, nil
}

// EndedWorkers returns the workers of every process on the store whose end
// it learned at or after since, within jobstore.RecentWorkerWindow, sorted
// by ID: those that unregistered or whose store closed, and those whose
// process died, found unlocked by Workers or a registration of the same
// name (so a worker that died is listed here once some process looked at
// the workers after its death). It removes the records older than the
// window, and skips files that are not an ended worker's. It implements
// jobstore.WorkerHistory.
func (s *Store) EndedWorkers(ctx context.Context, since time.Time) ([]jobstore.WorkerInfo, error) {
	if err := s.enter(ctx, "ended workers"); err != nil {
		return nil, err
	}
	// Every dead worker's file is looked at first, so that a worker whose
	// process died is counted even if nobody listed the workers since.
	if _, err := s.Workers(ctx); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, dirWorkers, dirEnded)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []jobstore.WorkerInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: ended workers: %w", err)
	}
	forget := time.Now().Add(-jobstore.RecentWorkerWindow)
	ws := []jobstore.WorkerInfo{}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !strings.HasSuffix(e.Name(), recordExt) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(p, os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		info, err := decodeWorker(f)
		_ = f.Close()
		switch {
		case err != nil || info.EndedAt.IsZero():
		case info.EndedAt.Before(forget):
			_ = s.fs.Remove(p)
		case !info.EndedAt.Before(since):
			ws = append(ws, info)
		}
	}
	storekit.SortWorkers(ws)
	return ws, nil
}
