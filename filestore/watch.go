package filestore

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/jobdir/jobdir/jobstore"
)

// The watcher only wakes things up: the candidate set, AwaitWork, Wait,
// WatchCancel and the key cache. Whoever it wakes re-reads the disk, and a
// poll every PollInterval stands in for events that never come (lost on
// overflow, or never sent on some filesystems), so no result depends on an
// event arriving.

// watch starts, once, the watcher of the state directories and the key
// directory. Open does not: the first call that needs events does (Claim,
// AwaitWork, Wait, WatchCancel, List, Stats), before it reads anything,
// so that no change falls between its read and the first event. A command
// that opens the store for a Get, a Cancel or a Submit never watches:
// inotify_add_watch walks the kernel's cache of a directory's entries when
// no other process watches it, which costs about 10 ms per directory at
// 100,000 jobs. Without inotify (for example when the per-user instance
// limit is reached) the store works by polling alone, and says so in the
// log.
func (s *Store) watch() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	// Under watchMu, which Close takes after closing s.closed: a loop
	// started here is counted in s.wg before Close waits for it.
	if s.watching || s.isClosed() {
		return
	}
	s.watching = true
	w, err := s.newWatcher()
	if err != nil {
		s.log.Warn("filestore: no filesystem events; falling back to polling every PollInterval", "err", err)
	}
	s.watcher = w
	s.wg.Add(1)
	go s.watchLoop()
}

// watchStarted reports whether watch has been called.
func (s *Store) watchStarted() bool {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	return s.watching
}

func (s *Store) newWatcher() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dirQueued, dirClaimed, dirDone, dirKeys} {
		if err := w.Add(filepath.Join(s.dir, d)); err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	// The store's own directory, for the queue settings (queues.go): a
	// resume must wake the workers that wait.
	if err := w.Add(s.dir); err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

// watchLoop reads events and errors in one loop and never blocks on
// anything but them; after an error, an overflow or a closed watcher it
// rebuilds the watcher and asks for a rescan.
func (s *Store) watchLoop() {
	defer s.wg.Done()
	for {
		s.watchMu.Lock()
		w := s.watcher
		s.watchMu.Unlock()
		if w == nil {
			select {
			case <-s.closed:
				return
			case <-time.After(s.opts.PollInterval):
				s.rebuildWatcher(nil)
				continue
			}
		}
		select {
		case <-s.closed:
			return
		case ev, ok := <-w.Events:
			if !ok {
				s.rebuildWatcher(w)
				continue
			}
			s.handleEvent(ev)
		case err, ok := <-w.Errors:
			if !ok || err != nil {
				if err != nil && !errors.Is(err, fsnotify.ErrEventOverflow) {
					s.log.Warn("filestore: watcher error; rebuilding it and rescanning", "err", err)
				}
				s.rebuildWatcher(w)
			}
		}
	}
}

// rebuildWatcher replaces old (which may be nil), if it is still the
// current watcher, with a new watcher, then marks the queue for a rescan,
// wakes every waiter and tells List and Stats calls under way that events
// may have been lost.
func (s *Store) rebuildWatcher(old *fsnotify.Watcher) {
	s.watchMu.Lock()
	if s.isClosed() || s.watcher != old {
		// Closed, or already rebuilt by another caller: a second watcher
		// would replace that one without closing it.
		s.watchMu.Unlock()
		return
	}
	if old != nil {
		_ = old.Close()
	}
	w, err := s.newWatcher()
	if err != nil {
		s.log.Warn("filestore: cannot rebuild watcher; polling", "err", err)
	}
	s.watcher = w
	s.watchMu.Unlock()
	s.mu.Lock()
	s.rescan = true
	s.notifyAll()
	s.loseMoves()
	s.mu.Unlock()
}

func (s *Store) handleEvent(ev fsnotify.Event) {
	dir := filepath.Base(filepath.Dir(ev.Name))
	name := filepath.Base(ev.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if filepath.Dir(ev.Name) == s.dir {
		if name == queuesFile && ev.Op&(fsnotify.Create|fsnotify.Rename|fsnotify.Write) != 0 {
			s.signalWork() // a resume, perhaps
		}
		return
	}
	if dir == dirKeys {
		if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
			delete(s.keys, strings.TrimSuffix(name, recordExt))
		}
		return
	}
	if ev.Op == fsnotify.Chmod {
		// Only the file's attributes changed: above all a claim's note,
		// set on the record in queued/ just before its rename, whose own
		// events follow. No record is written in place, so nothing read
		// from one changed, and the job did not move: marking it pending
		// would send a refresh to read a record about to leave queued/.
		return
	}
	s.indexEvent(ev, dir, name)
	id, ok := idFromName(name)
	if len(s.recorders) > 0 {
		s.recordMove(dir, id, name)
	}
	if !ok {
		return
	}
	s.noteStatsDirty(id)
	s.notify(id)
	if dir == dirClaimed && s.slotWait.Load() && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
		s.signalWork() // an attempt ended: a slot of a limited queue may be free
	}
	if dir == dirQueued {
		if s.claimer {
			// A Store that has not claimed keeps no candidate set: its
			// first Claim looks at all of queued/.
			if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 && ev.Op&(fsnotify.Create|fsnotify.Write) == 0 {
				// Renamed out (claimed, by any process) or removed: no
				// longer a candidate, and nothing to read. Reading it
				// would search queued/ on the disk for a name just
				// renamed away, under the lock every claim renames in.
				// A job that comes back comes with an event of its own.
				// A refresh that read the record before the rename may
				// still set it again: the set is a hint, which a claim
				// checks on disk and the next rescan corrects.
				delete(s.pending, id)
				s.cands.del(id)
				s.noteWaiting(id, false)
			} else {
				s.pending[id] = struct{}{}
			}
		}
		if ev.Op&(fsnotify.Create|fsnotify.Write) != 0 {
			s.signalWork()
		}
	}
}

// refreshCands brings the candidate set up to date: the IDs events marked,
// or all of queued/ after a rescan request. Records are read without
// locks: the set is a hint that Claim checks under the record lock. It
// returns how many candidates were added.
func (s *Store) refreshCands() (int, error) {
	s.mu.Lock()
	full := s.rescan
	s.rescan = false
	pend := s.pending
	s.pending = make(map[string]struct{})
	var known map[string]bool
	if full {
		known = s.cands.ids()
	}
	s.mu.Unlock()

	var gone []string
	if full {
		s.rescans.Add(1)
		// Names only and unsorted (readNames): os.ReadDir would make a
		// DirEntry of each and sort them, for a set that needs neither; a
		// claimer rescans every PollInterval, whatever the backlog.
		names, err := readNames(filepath.Join(s.dir, dirQueued))
		if err != nil {
			s.mu.Lock()
			s.rescan = true
			for id := range pend {
				s.pending[id] = struct{}{}
			}
			s.mu.Unlock()
			return 0, err
		}
		present := make(map[string]bool, len(names))
		for _, name := range names {
			if id, ok := idFromName(name); ok {
				present[id] = true
				if !known[id] {
					pend[id] = struct{}{}
				}
			}
		}
		for id := range known {
			if !present[id] {
				gone = append(gone, id)
			}
		}
	}
	type result struct {
		id string
		c  cand
		ok bool
	}
	results := make([]result, 0, len(pend))
	for id := range pend {
		env, err := s.readRecord(s.recordPath(dirQueued, id), id)
		s.noteWaiting(id, err == nil && env.Job.State == jobstore.StateWaiting)
		if err != nil || env.Job.State != jobstore.StateQueued {
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Debug("filestore: unreadable queued record", "err", err)
			}
			results = append(results, result{id: id})
			continue
		}
		results = append(results, result{id: id, c: candOf(env.Job), ok: true})
	}
	added := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range gone {
		s.cands.del(id)
	}
	for _, r := range results {
		if r.ok {
			if !s.cands.has(r.id) {
				added++
			}
			s.cands.set(r.id, r.c)
		} else {
			s.cands.del(r.id)
		}
	}
	return added, nil
}

func candOf(j jobstore.Job) cand {
	return cand{queue: j.Queue, partition: j.Partition, kind: j.Kind, priority: j.Priority, runAt: j.RunAt}
}

// setCand records that job j is queued (or, if it is not, that it is no
// candidate) and wakes AwaitWork for a new candidate.
func (s *Store) setCand(j jobstore.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.State != jobstore.StateQueued {
		s.cands.del(j.ID)
		return
	}
	s.cands.set(j.ID, candOf(j))
	s.signalWork()
}

// maintain runs in the background: dead-worker recovery every
// RecoverInterval and whenever another Store ends (ends.go), and a rescan
// of queued/ every PollInterval as the safety net for lost events.
func (s *Store) maintain() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	rec := time.NewTicker(s.opts.RecoverInterval)
	defer rec.Stop()
	// The repairs of Repair are made at the first recovery pass
	// repairDelay or more after Open, and a minute later again if they
	// could not all be made.
	repairAfter := time.Now().Add(repairDelay)
	poll := time.NewTicker(s.opts.PollInterval)
	defer poll.Stop()
	settle := time.NewTicker(settleInterval)
	defer settle.Stop()
	// After another Store's end, passes at once and after endFollowUps
	// (ends.go); followUp is the next of them, nil when none is due.
	var followUp <-chan time.Time
	var ended time.Time
	next := 0
	recoverNow := func() {
		if err := s.replayJournals(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("filestore: replay of submission journals", "err", err)
		}
		if _, err := s.recoverDead(ctx, true); err != nil && ctx.Err() == nil {
			s.log.Warn("filestore: recovery", "err", err)
		}
	}
	for {
		select {
		case <-s.closed:
			return
		case <-s.ended:
			ended, next = time.Now(), 0
			recoverNow()
			followUp = time.After(time.Until(ended.Add(endFollowUps[0])))
		case <-followUp:
			recoverNow()
			followUp = nil
			if next++; next < len(endFollowUps) {
				followUp = time.After(time.Until(ended.Add(endFollowUps[next])))
			}
		case <-settle.C:
			s.settleWaiting(ctx)
		case <-rec.C:
			if !s.repairedInBackground.Load() && !time.Now().Before(repairAfter) {
				// Repair recovers dead workers' jobs too.
				s.repairedInBackground.Store(s.repairInBackground(ctx))
				repairAfter = time.Now().Add(time.Minute)
				continue
			}
			recoverNow()
		case <-poll.C:
			s.mu.Lock()
			claimer := s.claimer
			s.rescan = true
			s.mu.Unlock()
			if !claimer {
				continue
			}
			if n, err := s.refreshCands(); err == nil && n > 0 {
				s.mu.Lock()
				s.signalWork()
				s.mu.Unlock()
			}
		}
	}
}
