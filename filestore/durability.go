package filestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/jobdir/jobdir/jobstore"
)

// groupSync shares directory fsyncs between concurrent callers (group
// commit). A caller needs an fsync that starts after its own change to the
// directory; while one fsync runs, every caller that arrives waits for the
// next one, which a single caller then makes for all of them. One caller
// alone pays exactly one fsync, as before.
type groupSync struct {
	mu   sync.Mutex
	cond *sync.Cond
	// started and completed count the fsyncs begun and finished; running
	// says one is in flight.
	started, completed uint64
	running            bool
	// failed is the latest generation whose fsync failed, and err its
	// error. A caller covered by a generation at or before a failure gets
	// the error: after a failed fsync nothing it covered is known durable.
	failed uint64
	err    error
}

func newGroupSync() *groupSync {
	g := &groupSync{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// sync returns once an fsync (made by fsync) that started after the call
// has finished, with its error.
func (g *groupSync) sync(fsync func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := g.started + 1
	for g.completed < want {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := fsync()
		g.mu.Lock()
		g.running = false
		g.completed = gen
		if err != nil {
			g.failed, g.err = gen, err
		}
		g.cond.Broadcast()
	}
	if g.failed >= want && g.err != nil {
		return g.err
	}
	return nil
}

func (s *Store) sync() bool { return !s.opts.NoSync }

// fileSync reports whether a new file is fsynced before it is renamed or
// linked into place: durable, and not Options.SyncFS, whose syncDir covers
// the file's data too.
func (s *Store) fileSync() bool { return s.sync() && s.fsSync == nil }

// openSyncFS opens the file system for Options.SyncFS.
func (s *Store) openSyncFS(context.Context) error {
	if !s.opts.SyncFS || !s.sync() {
		return nil
	}
	sy, err := s.fs.SyncFS(s.dir)
	if errors.Is(err, errors.ErrUnsupported) {
		s.log.Warn("filestore: SyncFS needs syncfs(2), which this system lacks; fsyncing each file")
		return nil
	}
	if err != nil {
		return err
	}
	s.fsSync, s.fsSyncGroup = sy, newGroupSync()
	return nil
}

// syncDir makes the entries of the state directory name durable, and with
// Options.SyncFS every file written before the call too, unless NoSync is
// set. Concurrent callers share the flush (group commit).
func (s *Store) syncDir(name string) error {
	if !s.sync() {
		return nil
	}
	if s.fsSync != nil {
		// One syncfs for every waiting operation, whatever directory they
		// changed. The descriptor was opened at Open, so the writeback
		// errors since then are reported (Linux 5.8 and later), each to
		// the syncfs that follows it and so to every caller it covers.
		s.fsSyncMu.RLock()
		defer s.fsSyncMu.RUnlock()
		if s.fsSyncClosed {
			return fmt.Errorf("filestore: syncfs: %w", jobstore.ErrClosed)
		}
		if err := s.fsSyncGroup.sync(s.fsSync.Sync); err != nil {
			return fmt.Errorf("syncfs (%s/): %w", name, err)
		}
		return nil
	}
	s.syncMu.Lock()
	g := s.syncers[name]
	if g == nil {
		g = newGroupSync()
		s.syncers[name] = g
	}
	s.syncMu.Unlock()
	p := filepath.Join(s.dir, name)
	if err := g.sync(func() error { return s.fs.SyncDir(p) }); err != nil {
		return fmt.Errorf("fsync %s/: %w", name, err)
	}
	return nil
}
