package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// statsCache remembers, per job, the state directory its record was found
// in and what Stats needs of the record (state, kind, run_at), so that
// Stats reads only the records that changed since its last call instead of
// the whole history. An entry is trusted in one of two ways:
//
//   - by events: every change to a record is a create, rename, write or
//     unlink in its state directory, which the Store's watcher sees
//     whichever process made it. The watcher notes the ID of every such
//     event (see Store.statsDirty); each Stats drops the entries of the
//     IDs noted since its last call before it reads, and the IDs of the
//     events during the call are read again at its end (see
//     moveRecorder). While no event was lost, an entry that no event
//     named is the record as it is, and Stats reads nothing but the
//     directories' names: no stat, no record.
//   - by the file's identity (inode, size, modification time), checked
//     with lstat, when events may have been lost (no watcher, an
//     overflow, a rebuilt watcher, a barrier that did not come). Records
//     are replaced, never modified in place, so a rewrite changes it.
//
// It holds no payloads or results. The caller holds mu for a whole Stats.
type statsCache struct {
	mu sync.Mutex
	m  map[string]*statsEntry // by job ID
	// call numbers the Stats calls, for statsEntry.seen.
	call uint64
}

type statsEntry struct {
	// dir is the state directory the record was read from.
	dir string
	// ino, size and mtime are the file's identity when it was read (ino 0:
	// not known, read again when identities are checked).
	ino   uint64
	size  int64
	mtime int64
	state jobstore.State
	kind  string
	queue string
	runAt time.Time
	// seen is the call that last found the record in dir; counted says
	// that call counted it (a record whose state belongs to another
	// directory is a leftover of an interrupted move, not counted).
	seen    uint64
	counted bool
}

// maxStatsDirty bounds the IDs the watcher notes for the next Stats; past
// it the next Stats checks every record's identity instead.
const maxStatsDirty = 1 << 16

// noteStatsDirty notes that an event named job id, for the next Stats.
// The caller holds s.mu.
func (s *Store) noteStatsDirty(id string) {
	if s.statsDirty == nil || s.statsLost {
		return // Stats never ran, or will check every record anyway
	}
	if len(s.statsDirty) >= maxStatsDirty {
		s.statsLost = true
		s.statsDirty = make(map[string]struct{})
		return
	}
	s.statsDirty[id] = struct{}{}
}

// takeStatsDirty returns the IDs noted since the last call and whether
// events may have been lost meanwhile, and starts noting afresh.
func (s *Store) takeStatsDirty() (map[string]struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dirty, lost := s.statsDirty, s.statsLost || s.statsDirty == nil
	s.statsDirty, s.statsLost = make(map[string]struct{}), false
	return dirty, lost
}

// Stats counts jobs by state. It reads the state directories' names from
// the Store's index (see dirIndex), or lists the directories when events
// may have been lost, so its cost grows with history; but it reads only
// the records that changed since its last call (see statsCache), so a
// metrics scrape or a dashboard of a large store stays cheap. The first
// call reads every record. A job that exists throughout the call is
// counted once, by one state, even if it moves between state directories
// meanwhile (see moveRecorder).
func (s *Store) Stats(ctx context.Context) (jobstore.Stats, error) {
	if err := s.enter(ctx, "stats"); err != nil {
		return jobstore.Stats{}, err
	}
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	if s.stats.m == nil {
		s.stats.m = make(map[string]*statsEntry)
	}
	// The recorder first: an event after it is recorded for this call, one
	// before it is among the dirty IDs (or both).
	s.watch()
	s.primeIndex()
	rec := s.recordMoves()
	dirty, lost := s.takeStatsDirty()
	for id := range dirty {
		delete(s.stats.m, id)
	}
	moved, complete, err := s.finishMoves(ctx, rec)
	if err != nil {
		return jobstore.Stats{}, err
	}
	st := jobstore.Stats{Counts: make(map[jobstore.State]int), Kinds: make(map[string]map[jobstore.State]int), Queues: make(map[string]map[jobstore.State]int)}
	for _, state := range jobstore.States() {
		st.Counts[state] = 0
	}
	s.stats.call++
	now := time.Now()
	var snap *indexSnap
	if complete {
		snap = s.readySnapshot()
	}
	if snap != nil {
		// Every change made before the barrier is in the index; the
		// records that events named since the recorder began are read
		// again.
		for id := range moved {
			delete(s.stats.m, id)
		}
		for _, it := range snap.items {
			if err := ctx.Err(); err != nil {
				return jobstore.Stats{}, err
			}
			for i, d := range stateDirs {
				if it.dirs&(1<<i) != 0 && !s.countOne(&st, d, it.id, lost, now) {
					// Gone from there since the barrier: count it
					// where it is now.
					if err := s.countMoved(ctx, &st, it.id, now); err != nil {
						return jobstore.Stats{}, err
					}
					break
				}
			}
		}
	} else {
		// Events may have been lost: list the directories twice, checking
		// every record's identity, and count what either pass finds; the
		// next call checks identities too.
		s.mu.Lock()
		s.statsLost = true
		s.mu.Unlock()
		for range 2 {
			for _, d := range stateDirs {
				names, err := readNames(filepath.Join(s.dir, d))
				if err != nil {
					return jobstore.Stats{}, fmt.Errorf("filestore: stats: %w", err)
				}
				for _, name := range names {
					if err := ctx.Err(); err != nil {
						return jobstore.Stats{}, err
					}
					if id, ok := idFromName(name); ok {
						_ = s.countOne(&st, d, id, true, now) // one that cannot be read is not counted
					}
				}
			}
		}
	}
	for id, ent := range s.stats.m {
		if ent.seen != s.stats.call {
			delete(s.stats.m, id)
		}
	}
	return st, nil
}

// countOne counts record dir/id into st, from the cache where it can
// (checking the file's identity if check is set), unless this call counted
// the job already. It reports false if the record cannot be read (gone, or
// damaged: Fsck reports those). The caller holds s.stats.mu.
func (s *Store) countOne(st *jobstore.Stats, d, id string, check bool, now time.Time) bool {
	call := s.stats.call
	ent := s.stats.m[id]
	if ent != nil && ent.seen == call && ent.counted {
		return true // counted in an earlier directory, or pass
	}
	if ent == nil || ent.dir != d || check {
		if ent = s.statEntry(d, id, ent, check); ent == nil {
			return false
		}
	}
	ent.seen = call
	ent.counted = dirOf(ent.state) == d // else a leftover of an interrupted move; counted where it went
	if ent.counted {
		countEntry(st, ent, 1, now)
	}
	return true
}

// countMoved counts job id by its current record, wherever it is, unless
// this call counted it already or it is gone. The entry it leaves names no
// directory, so the next call reads the record again. The caller holds
// s.stats.mu.
func (s *Store) countMoved(ctx context.Context, st *jobstore.Stats, id string, now time.Time) error {
	if ent := s.stats.m[id]; ent != nil && ent.seen == s.stats.call && ent.counted {
		return nil
	}
	j, err := s.get(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, jobstore.ErrNotFound) && !errors.Is(err, jobstore.ErrCorrupt) {
			s.log.Debug("filestore: stats: unreadable record", "err", err)
		}
		return nil // gone meanwhile, or unreadable as in the directory reads
	}
	ent := &statsEntry{state: j.State, kind: j.Kind, queue: j.Queue, runAt: j.RunAt, seen: s.stats.call, counted: true}
	s.stats.m[id] = ent
	countEntry(st, ent, 1, now)
	return nil
}

// countEntry adds n (1 or -1) jobs of ent's state, kind and queue to st.
func countEntry(st *jobstore.Stats, ent *statsEntry, n int, now time.Time) {
	st.Counts[ent.state] += n
	st.AddQueue(ent.queue, ent.state, n)
	st.AddKind(ent.kind, ent.state, n)
	if n < 0 && st.Kinds[ent.kind][ent.state] == 0 {
		delete(st.Kinds[ent.kind], ent.state)
		if len(st.Kinds[ent.kind]) == 0 {
			delete(st.Kinds, ent.kind)
		}
	}
	if n > 0 && ent.state == jobstore.StateQueued && !ent.runAt.After(now) {
		st.AddDue(ent.queue, ent.kind, ent.runAt)
	}
}

// statEntry returns the entry of record dir/id: old (the cached entry, or
// nil) if it is of that file and, with check, the file's identity is the
// same, else one read from the record. It returns nil if the record cannot
// be read (gone, or damaged: Fsck reports those). The caller holds
// s.stats.mu.
func (s *Store) statEntry(dir, id string, old *statsEntry, check bool) *statsEntry {
	path := s.recordPath(dir, id)
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		delete(s.stats.m, id)
		return nil
	}
	ino := inode(fi)
	if old != nil && old.dir == dir && check && ino != 0 && old.ino == ino && old.size == fi.Size() && old.mtime == fi.ModTime().UnixNano() {
		return old
	}
	env, err := s.readRecord(path, id)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, jobstore.ErrCorrupt) {
			s.log.Debug("filestore: stats: unreadable record", "err", err)
		}
		delete(s.stats.m, id)
		return nil
	}
	state := env.Job.State
	if dir == dirClaimed && state == jobstore.StateQueued {
		// Claimed: running as its claim note says, or an interrupted claim
		// that recovery is about to move back. Counted as running either
		// way, as claimed/ is the running set.
		state = jobstore.StateRunning
	}
	s.kinds.put(id, env.Job.Kind)
	ent := &statsEntry{dir: dir, ino: ino, size: fi.Size(), mtime: fi.ModTime().UnixNano(), state: state, kind: env.Job.Kind, queue: env.Job.Queue, runAt: env.Job.RunAt}
	s.stats.m[id] = ent
	return ent
}

// readNames returns the names in directory dir, unsorted: counting needs
// no order, and sorting, like making a DirEntry of each name, costs much
// in a directory of 100,000 records.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
