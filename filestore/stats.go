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

// statsCache remembers, per record file, its state and run_at along with
// the file's identity (inode, size, modification time), so that Stats
// reads only the records that changed since the last call instead of the
// whole history. Records are replaced, never modified in place, so a
// rewrite always changes the identity. It holds no payloads or results.
type statsCache struct {
	mu sync.Mutex
	m  map[string]statsEntry // by "<dir>/<id>"
}

type statsEntry struct {
	ino   uint64
	size  int64
	mtime int64
	state jobstore.State
	kind  string
	runAt time.Time
}

// Stats counts jobs by state. It lists every state directory, so its cost
// grows with history; but it reads only the records that changed since its
// last call (the others are known by their inode, size and mtime), so a
// metrics scrape of a large store stays cheap. It is not on any hot path.
// A job that exists throughout the call is counted once, by one state,
// even if it moves between state directories meanwhile (see moveRecorder).
func (s *Store) Stats(ctx context.Context) (jobstore.Stats, error) {
	if err := s.enter(ctx, "stats"); err != nil {
		return jobstore.Stats{}, err
	}
	st := jobstore.Stats{Counts: make(map[jobstore.State]int), Kinds: make(map[string]map[jobstore.State]int)}
	for _, state := range jobstore.States() {
		st.Counts[state] = 0
	}
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	if s.stats.m == nil {
		s.stats.m = make(map[string]statsEntry)
	}
	now := time.Now()
	seen := make(map[string]string) // ID -> the directory it was counted in
	present := make(map[string]bool)
	count := func(id string, ent statsEntry, n int) {
		st.Counts[ent.state] += n
		st.AddKind(ent.kind, ent.state, n)
		if n < 0 && st.Kinds[ent.kind][ent.state] == 0 {
			delete(st.Kinds[ent.kind], ent.state)
			if len(st.Kinds[ent.kind]) == 0 {
				delete(st.Kinds, ent.kind)
			}
		}
		if n > 0 && ent.state == jobstore.StateQueued && !ent.runAt.After(now) &&
			(st.OldestQueuedAt.IsZero() || ent.runAt.Before(st.OldestQueuedAt)) {
			st.OldestQueuedAt = ent.runAt
		}
	}
	read := func() error {
		for _, d := range stateDirs {
			ents, err := readDirUnsorted(filepath.Join(s.dir, d))
			if err != nil {
				return fmt.Errorf("filestore: stats: %w", err)
			}
			for _, e := range ents {
				if err := ctx.Err(); err != nil {
					return err
				}
				id, ok := idFromName(e.Name())
				if !ok {
					continue
				}
				if _, dup := seen[id]; dup {
					continue
				}
				key := d + "/" + id
				ent, ok := s.statEntry(d, id, key, e)
				if !ok {
					continue
				}
				present[key] = true
				if dirOf(ent.state) != d {
					continue // a leftover of an interrupted move; counted where it went
				}
				seen[id] = d
				count(id, ent, 1)
			}
		}
		return nil
	}
	// A job that moves between directories during the reads is caught by
	// the recorder (see moveRecorder), or else by a second read.
	rec := s.recordMoves()
	if err := read(); err != nil {
		s.stopMoves(rec)
		return jobstore.Stats{}, err
	}
	moved, complete, err := s.finishMoves(ctx, rec)
	if err != nil {
		return jobstore.Stats{}, err
	}
	if !complete {
		if err := read(); err != nil {
			return jobstore.Stats{}, err
		}
	} else if err := s.recountMoved(ctx, &st, moved, seen, count, now); err != nil {
		return jobstore.Stats{}, err
	}
	for key := range s.stats.m {
		if !present[key] {
			delete(s.stats.m, key)
		}
	}
	return st, nil
}

// recountMoved takes the jobs that moved during a Stats call out of the
// counts where the directory reads saw them, and counts each once by its
// current record. The caller holds s.stats.mu.
func (s *Store) recountMoved(ctx context.Context, st *jobstore.Stats, moved map[string]struct{}, seen map[string]string,
	count func(string, statsEntry, int), now time.Time) error {
	oldestGone := false
	for id := range moved {
		d, ok := seen[id]
		if !ok {
			continue
		}
		ent := s.stats.m[d+"/"+id]
		count(id, ent, -1)
		delete(seen, id)
		if ent.state == jobstore.StateQueued && ent.runAt.Equal(st.OldestQueuedAt) {
			oldestGone = true
		}
	}
	if oldestGone {
		st.OldestQueuedAt = time.Time{}
		for id, d := range seen {
			if ent := s.stats.m[d+"/"+id]; ent.state == jobstore.StateQueued && !ent.runAt.After(now) &&
				(st.OldestQueuedAt.IsZero() || ent.runAt.Before(st.OldestQueuedAt)) {
				st.OldestQueuedAt = ent.runAt
			}
		}
	}
	for id := range moved {
		j, err := s.get(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, jobstore.ErrNotFound) && !errors.Is(err, jobstore.ErrCorrupt) {
				s.log.Debug("filestore: stats: unreadable record", "err", err)
			}
			continue // gone meanwhile, or unreadable as in the directory reads
		}
		count(id, statsEntry{state: j.State, kind: j.Kind, runAt: j.RunAt}, 1)
	}
	return nil
}

// statEntry returns the cached state of record dir/id, reading the record
// only if its file changed. The caller holds s.stats.mu.
func (s *Store) statEntry(dir, id, key string, e fs.DirEntry) (statsEntry, bool) {
	fi, err := e.Info()
	if err != nil || !fi.Mode().IsRegular() {
		return statsEntry{}, false
	}
	ino := inode(fi)
	ent, ok := s.stats.m[key]
	if ok && ino != 0 && ent.ino == ino && ent.size == fi.Size() && ent.mtime == fi.ModTime().UnixNano() {
		return ent, true
	}
	env, err := s.readRecord(s.recordPath(dir, id), id)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, jobstore.ErrCorrupt) {
			s.log.Debug("filestore: stats: unreadable record", "err", err)
		}
		delete(s.stats.m, key)
		return statsEntry{}, false
	}
	state := env.Job.State
	if dir == dirClaimed && state == jobstore.StateQueued {
		// Claimed: running as its claim note says, or an interrupted claim
		// that recovery is about to move back. Counted as running either
		// way, as claimed/ is the running set.
		state = jobstore.StateRunning
	}
	ent = statsEntry{ino: ino, size: fi.Size(), mtime: fi.ModTime().UnixNano(), state: state, kind: env.Job.Kind, runAt: env.Job.RunAt}
	s.stats.m[key] = ent
	return ent, true
}

// readDirUnsorted is os.ReadDir without its sort, which counting does not
// need and which costs much in a directory of 100,000 records.
func readDirUnsorted(dir string) ([]fs.DirEntry, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}
