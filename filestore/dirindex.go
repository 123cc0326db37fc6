package filestore

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// dirIndex is this Store's copy of the names in the state directories,
// kept by the watcher's events, so that List and Stats of a large store
// list no directory: listing 100,000 names costs tens of milliseconds of
// CPU, and List would sort them too. It is built from one listing of each
// directory, on the first List or Stats that finds it missing (but for a
// List that does not want done/ and finds few names in the directories it
// wants, which lists those: see directListMax), and kept by
// every later event in a state directory, whichever process made the
// change: an event that adds a name (a create, a rename into the
// directory) adds it, one that removes it (an unlink, a rename away)
// removes it. Events arrive in the order the kernel made them, so a name's
// last event says whether it is there.
//
// A reader uses it only after a barrier (see moveRecorder): then every
// change made before the call began has been applied, so the index is as
// fresh as a listing. When events may have been lost (an overflow, a
// rebuilt watcher) it is dropped, and built again by the next call that
// needs it; a call whose barrier does not come lists the directories as
// before.
//
// Its memory is about 100 bytes per job. The fields are guarded by
// Store.mu; snapMu serializes the making of snapshots.
type dirIndex struct {
	snapMu sync.Mutex

	// gen counts builds and drops, so that a build or a snapshot begun
	// before a drop is not installed after it.
	gen   uint64
	state indexState
	// pending holds the events of state directories that came while
	// building.
	pending []fsnotify.Event
	// dirs maps each job ID in a state directory to the set of
	// directories holding it (bit i: stateDirs[i]); bad holds the other
	// names there that are not dot-files, as "<dir>/<name>".
	dirs map[string]uint8
	bad  map[string]struct{}
	// snap is dirs sorted by ID, as it was before the changes to the IDs
	// in touched (and to bad, if badTouched).
	snap       *indexSnap
	touched    map[string]struct{}
	badTouched bool
	// away holds, per ID, the directories it was renamed out of and not
	// yet seen arriving anywhere: the index keeps it there until then
	// (see apply).
	away map[string]uint8
}

type indexState int

const (
	indexNone indexState = iota
	indexBuilding
	indexReady
)

// indexSnap is the state directories' contents at one moment, sorted by
// ID. It is never changed once made.
type indexSnap struct {
	items []indexItem
	bad   []string
}

// indexItem is a job ID and the state directories holding it.
type indexItem struct {
	id   string
	dirs uint8
}

// dirBit returns the bit of state directory dir, or 0 for another name.
func dirBit(dir string) uint8 {
	for i, d := range stateDirs {
		if d == dir {
			return 1 << i
		}
	}
	return 0
}

// indexEvent applies an event in a state directory to the index. The
// caller holds s.mu.
func (s *Store) indexEvent(ev fsnotify.Event, dir, name string) {
	x := &s.index
	switch x.state {
	case indexBuilding:
		x.pending = append(x.pending, ev)
	case indexReady:
		x.apply(dir, name, ev.Op)
	}
}

// apply applies an event about name in state directory dir.
//
// A rename between two state directories is two events, out of the one
// and into the other, which a reader of the index could see half done:
// the job would be in neither. So a rename out is held back (away) until
// the job's next event, which for such a rename is its arrival, or until
// the next barrier (see settle): a barrier is created in claimed/, and a
// rename into or out of claimed/ (a claim, recovery) holds that
// directory's lock while the kernel queues both of its events, so no
// barrier's event falls between them. Meanwhile the job shows in the
// directory it left, where List reads it by ID and Stats counts it once.
func (x *dirIndex) apply(dir, name string, op fsnotify.Op) {
	bit := dirBit(dir)
	if bit == 0 {
		return
	}
	if strings.HasPrefix(name, ".") {
		if strings.HasPrefix(name, barrierPrefix) && op.Has(fsnotify.Create) {
			x.settle()
		}
		return
	}
	add, remove := op.Has(fsnotify.Create), op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename)
	if !add && !remove {
		return // a write or chmod: the name stays
	}
	id, ok := idFromName(name)
	if !ok {
		if add {
			x.bad[dir+"/"+name] = struct{}{}
		} else {
			delete(x.bad, dir+"/"+name)
		}
		x.badTouched = true
		return
	}
	m := x.dirs[id]
	if gone, ok := x.away[id]; ok {
		m &^= gone
		delete(x.away, id)
	}
	switch {
	case add:
		m |= bit
	case op.Has(fsnotify.Rename) && m&bit != 0:
		x.away[id] |= bit // still shown here until it arrives
	default:
		m &^= bit
	}
	x.set(id, m)
}

// set records that job id is in the directories of m.
func (x *dirIndex) set(id string, m uint8) {
	if m == 0 {
		delete(x.dirs, id)
	} else {
		x.dirs[id] = m
	}
	x.touched[id] = struct{}{}
}

// settle takes out of their directories the jobs renamed out of them that
// no event has shown arriving: at a barrier they were renamed to where the
// store does not look.
func (x *dirIndex) settle() {
	for id, gone := range x.away {
		x.set(id, x.dirs[id]&^gone)
	}
	clear(x.away)
}

// dropIndex drops the index: events may have been lost. The caller holds
// s.mu.
func (s *Store) dropIndex() {
	x := &s.index
	x.gen++
	x.state, x.pending, x.dirs, x.bad, x.snap, x.touched, x.away = indexNone, nil, nil, nil, nil, nil, nil
}

// snapshot returns the state directories' contents as of the last event
// the watcher handled, building the index first if there is none. It
// returns nil if it cannot (a directory cannot be listed, or events were
// lost while building); the caller then lists the directories itself.
func (s *Store) snapshot() *indexSnap { return s.snapshotOf(true) }

// readySnapshot is snapshot, but returns nil instead of building the
// index when it is not ready. A listing made after a barrier does not
// see the moves whose events the watcher had not handled when it ended,
// which the barrier's recorder no longer collects: List and Stats build
// the index before their recorder begins (primeIndex) and take it after
// the barrier only if it is still there (TestListStatsSeeMovingJobOnce).
func (s *Store) readySnapshot() *indexSnap { return s.snapshotOf(false) }

// primeIndex builds the index if it is not ready. A ready one is left as
// it is: the snapshot after the barrier applies what changed meanwhile,
// once.
func (s *Store) primeIndex() {
	x := &s.index
	x.snapMu.Lock()
	defer x.snapMu.Unlock()
	s.mu.Lock()
	ready := x.state == indexReady
	s.mu.Unlock()
	if !ready {
		s.buildIndex()
	}
}

// indexIsReady reports whether the index is built and kept by events.
func (s *Store) indexIsReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index.state == indexReady
}

func (s *Store) snapshotOf(build bool) *indexSnap {
	x := &s.index
	x.snapMu.Lock()
	defer x.snapMu.Unlock()
	s.mu.Lock()
	if x.state != indexReady {
		s.mu.Unlock()
		if !build {
			return nil
		}
		return s.buildIndex()
	}
	if len(x.touched) == 0 && !x.badTouched {
		snap := x.snap
		s.mu.Unlock()
		return snap
	}
	gen, old := x.gen, x.snap
	changes := make([]indexItem, 0, len(x.touched))
	for id := range x.touched {
		changes = append(changes, indexItem{id: id, dirs: x.dirs[id]})
	}
	var bad []string
	if x.badTouched {
		bad = badList(x.bad)
	} else {
		bad = old.bad
	}
	x.touched, x.badTouched = make(map[string]struct{}), false
	s.mu.Unlock()

	snap := &indexSnap{items: merge(old.items, changes), bad: bad}
	s.mu.Lock()
	if x.gen == gen {
		x.snap = snap
	}
	s.mu.Unlock()
	return snap
}

// buildIndex lists the state directories and makes the index from them
// and from the events that came meanwhile. The caller holds x.snapMu.
func (s *Store) buildIndex() *indexSnap {
	x := &s.index
	s.mu.Lock()
	x.gen++
	gen := x.gen
	x.state, x.pending = indexBuilding, nil
	s.mu.Unlock()

	dirs := make(map[string]uint8)
	bad := make(map[string]struct{})
	for i, d := range stateDirs {
		names, err := readNames(filepath.Join(s.dir, d))
		if err != nil {
			s.log.Debug("filestore: cannot list a state directory", "dir", d, "err", err)
			s.mu.Lock()
			if x.gen == gen {
				s.dropIndex()
			}
			s.mu.Unlock()
			return nil
		}
		for _, name := range names {
			if id, ok := idFromName(name); ok {
				dirs[id] |= 1 << i
			} else if !strings.HasPrefix(name, ".") {
				bad[d+"/"+name] = struct{}{}
			}
		}
	}
	items := make([]indexItem, 0, len(dirs))
	for id, m := range dirs {
		items = append(items, indexItem{id: id, dirs: m})
	}
	slices.SortFunc(items, func(a, b indexItem) int { return strings.Compare(a.id, b.id) })
	snap := &indexSnap{items: items, bad: badList(bad)}

	s.mu.Lock()
	defer s.mu.Unlock()
	if x.gen != gen || x.state != indexBuilding {
		return nil // dropped meanwhile: events were lost
	}
	x.dirs, x.bad, x.snap, x.touched, x.away = dirs, bad, snap, make(map[string]struct{}), make(map[string]uint8)
	x.state = indexReady
	for _, ev := range x.pending {
		x.apply(filepath.Base(filepath.Dir(ev.Name)), filepath.Base(ev.Name), ev.Op)
	}
	x.pending = nil
	if len(x.touched) == 0 && !x.badTouched {
		return snap
	}
	// Events came during the listing: apply them as snapshot would.
	changes := make([]indexItem, 0, len(x.touched))
	for id := range x.touched {
		changes = append(changes, indexItem{id: id, dirs: x.dirs[id]})
	}
	snap = &indexSnap{items: merge(snap.items, changes), bad: badList(x.bad)}
	x.snap, x.touched, x.badTouched = snap, make(map[string]struct{}), false
	return snap
}

// merge returns old (sorted by ID) with changes applied: each change's ID
// gets its dirs, and is left out when they are none. changes is sorted in
// place.
func merge(old, changes []indexItem) []indexItem {
	slices.SortFunc(changes, func(a, b indexItem) int { return strings.Compare(a.id, b.id) })
	out := make([]indexItem, 0, len(old)+len(changes))
	i := 0
	for _, c := range changes {
		for i < len(old) && old[i].id < c.id {
			out = append(out, old[i])
			i++
		}
		if i < len(old) && old[i].id == c.id {
			i++
		}
		if c.dirs != 0 {
			out = append(out, c)
		}
	}
	return append(out, old[i:]...)
}

// badList returns the names in bad, sorted.
func badList(bad map[string]struct{}) []string {
	out := make([]string, 0, len(bad))
	for p := range bad {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// from returns the position in items at which a walk in order after
// cursor (empty: from the start) begins: the first item after it going
// up, or the last before it going down (-1 if none).
func (snap *indexSnap) from(cursor string, up bool) int {
	if up {
		if cursor == "" {
			return 0
		}
		i, found := slices.BinarySearchFunc(snap.items, cursor, func(it indexItem, c string) int { return cmp.Compare(it.id, c) })
		if found {
			i++
		}
		return i
	}
	if cursor == "" {
		return len(snap.items) - 1
	}
	i, _ := slices.BinarySearchFunc(snap.items, cursor, func(it indexItem, c string) int { return cmp.Compare(it.id, c) })
	return i - 1
}
