package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Get reads job id from disk. It takes no lock: a process stopped while it
// holds the job's record lock, or any other, does not delay it (see
// readShared).
func (s *Store) Get(ctx context.Context, id string) (jobstore.Job, error) {
	if err := s.enter(ctx, "get"); err != nil {
		return jobstore.Job{}, err
	}
	if err := jobstore.ValidateID(id); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: get: %w", err)
	}
	j, err := s.get(ctx, id)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: get: %w", err)
	}
	return j, nil
}

// GetByKey returns the job whose Key is key, or an error wrapping
// jobstore.ErrNotFound if none: it reads the key's file in keys/ (a hard
// link of the job's first record, which names the job) and then the job's
// current record, as Get does. A key file whose job has no record (its
// submit never finished) or that a crash left torn names no job. Returns
// an error wrapping jobstore.ErrInvalidInput for an empty or invalid key.
func (s *Store) GetByKey(ctx context.Context, key string) (jobstore.Job, error) {
	if err := s.enter(ctx, "get by key"); err != nil {
		return jobstore.Job{}, err
	}
	if err := jobstore.ValidateLookupKey(key); err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: get by key: %w", err)
	}
	j, err := s.getByKey(ctx, key)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("filestore: get by key: %w", err)
	}
	return j, nil
}

// getByKey is GetByKey of a valid key, its errors not prefixed.
func (s *Store) getByKey(ctx context.Context, key string) (jobstore.Job, error) {
	notFound := fmt.Errorf("no job with key %q: %w", key, jobstore.ErrNotFound)
	env, err := s.readKeyFile(s.keyPath(keyName(key)))
	switch {
	case errors.Is(err, fs.ErrNotExist) || isTorn(err):
		return jobstore.Job{}, notFound
	case err != nil:
		return jobstore.Job{}, err
	case env.Job.Key != key:
		return jobstore.Job{}, &CorruptError{Path: s.keyPath(keyName(key)), Reason: "names a job with another key"}
	}
	j, err := s.get(ctx, env.Job.ID)
	if errors.Is(err, jobstore.ErrNotFound) {
		return jobstore.Job{}, notFound
	}
	return j, err
}

// get reads a valid job ID's current record (see readShared).
func (s *Store) get(ctx context.Context, id string) (jobstore.Job, error) {
	rec, err := s.readShared(ctx, id)
	if err != nil {
		return jobstore.Job{}, err
	}
	return rec.Job, nil
}

// unlockedPasses bounds how many passes over a job's state directories
// readShared makes that find no record, or a claimed/ record without its
// claim note, before it believes them.
const unlockedPasses = 4

// settlePasses bounds how many passes readShared makes while consecutive
// passes disagree (the job keeps changing) before it takes the job's
// record lock, shared, for one read.
const settlePasses = 64

// readShared reads job id's current record without taking its record
// lock, so that no holder of that lock (a process stopped in the middle
// of a change, of this job or of another) can delay a read.
//
// A record is replaced by rename, so every file read is a whole record,
// and every change writes its new copy before it removes the old one. A
// pass (locate) reads queued/, claimed/ and done/ and keeps the copy of
// highest revision. One pass alone can return a superseded copy: it may
// read the directory of the newer copy before that copy is written, then
// the old copy before it is removed, while the newer one has already moved
// on. So readShared repeats passes until two consecutive passes return the
// same (directory, revision), and returns that record.
//
// Why that record was current at some moment during the call: a
// superseded copy exists only while the writer that superseded it holds
// the job's record lock (it removes the old copy before it releases the
// lock, or dies holding it, and then the newer copy stays for good), and
// while that lock is held the newer copy cannot move. Say passes A and B,
// in that order, both return (d, r), and (d, r) was superseded when A read
// d. Then the writer's newer copy (d', r'), r' > r, stayed in d' from
// before A read d until after B read d (the old copy was still there, so
// the lock was still held). A and B read d' in the same order relative to
// d: if before d, B read d' inside that span; if after d, A did. Either
// pass then saw r' and did not return r. So (d, r) was not superseded when
// A read d: it was the job's record then. Successive reads therefore never
// go back in revision (TestGetSeesMovingJob checks that).
//
// A move back to queued/ (a retry, a failed attempt queued again, a
// release, recovery) that falls between the read of queued/ and the read
// of the directory it leaves can hide the job from a pass, and a claim
// note being rewritten by a new claim can look absent for a moment; so a
// pass that finds no record, or a queued record in claimed/ without its
// note, is repeated (a few times: what stays so after that is so on disk).
// If the job changes between every pair of passes settlePasses times, its
// writers are running, not stopped, and readShared reads it once under
// the shared record lock.
func (s *Store) readShared(ctx context.Context, id string) (record, error) {
	var rec, prev record
	var err error
	agreed := false // prev is a record found by the previous pass
	absent := 0     // consecutive passes that found no settled record
	for range settlePasses {
		if cerr := ctx.Err(); cerr != nil {
			return record{}, cerr
		}
		var f found
		if f, err = s.locate(id); err != nil {
			return record{}, err
		}
		rec, err = f.current(id)
		switch {
		case err == nil && rec.dir == dirClaimed && rec.Job.State == jobstore.StateQueued:
			// An interrupted claim, or a claim note being rewritten.
			agreed = false
			if absent++; absent >= unlockedPasses {
				return rec, nil
			}
			continue
		case err == nil:
			if agreed && prev.dir == rec.dir && prev.Rev == rec.Rev {
				return rec, nil
			}
			prev, agreed, absent = rec, true, 0
			continue
		case !errors.Is(err, jobstore.ErrNotFound):
			return rec, err
		}
		agreed = false
		if absent++; absent >= unlockedPasses {
			break
		}
	}
	if err == nil || !errors.Is(err, jobstore.ErrNotFound) || absent < unlockedPasses {
		// Still changing after settlePasses passes.
		return s.readLocked(ctx, id)
	}
	if _, serr := os.Lstat(filepath.Join(s.dir, dirQueued)); serr != nil {
		// Not just this job: say so, or a removed store reads as an
		// empty one.
		return record{}, fmt.Errorf("job %s: %w: the store's %s/ directory is missing (was %s removed?)", id, jobstore.ErrNotFound, dirQueued, s.dir)
	}
	return rec, err
}

// dirsFor returns the state directories that can hold jobs in states (all
// of them for none).
func dirsFor(states []jobstore.State) []string {
	if len(states) == 0 {
		return stateDirs
	}
	var dirs []string
	for _, d := range stateDirs {
		for _, st := range states {
			if dirOf(st) == d {
				dirs = append(dirs, d)
				break
			}
		}
	}
	return dirs
}

// listDir returns the job IDs in state directory dir, and a *CorruptError
// for each entry that is not <id>.json.
func (s *Store) listDir(dir string) ([]string, []error, error) {
	// Names only, sorted as strings: os.ReadDir would make a DirEntry of
	// each and sort those through an interface, which costs several
	// times more in a directory of 100,000 jobs.
	f, err := os.Open(filepath.Join(s.dir, dir))
	if err != nil {
		return nil, nil, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(names)
	ids := make([]string, 0, len(names))
	var bad []error
	for _, name := range names {
		if id, ok := idFromName(name); ok {
			ids = append(ids, id)
			continue
		}
		if strings.HasPrefix(name, ".") {
			continue // a temp file of a tool that stages next to its target
		}
		bad = append(bad, &CorruptError{Path: filepath.Join(s.dir, dir, name), Reason: "unexpected file name (want <job id>.json)"})
	}
	return ids, bad, nil
}

// listed is a job ID found in a state directory by List: dir indexes
// stateDirs, or is -1 for an ID that only an event named.
type listed struct {
	id  string
	dir int8
}

// List returns one page of jobs. It reads the state directories' names
// from the Store's index (see dirIndex), or lists those the filter needs
// when it has no index and they are few (see directListMax) or when events
// may have been lost, and reads only the records of the page, each
// without a lock (see readShared). With a kind filter it skips the jobs of
// other kinds by their ID, from the kinds this Store has learned (a job's
// kind never changes), or else from the head of the record (see kindOf),
// without reading payloads. Records that cannot be read are skipped and
// reported in Page.Errors. A job that exists throughout the call is listed
// once even if it moves between state directories meanwhile (see
// moveRecorder).
func (s *Store) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	if err := s.enter(ctx, "list"); err != nil {
		return jobstore.Page{}, err
	}
	opts, err := opts.Normalize()
	if err != nil {
		return jobstore.Page{}, fmt.Errorf("filestore: list: %w", err)
	}
	dirs := dirsFor(opts.States)
	var want uint8
	for _, d := range dirs {
		want |= dirBit(d)
	}
	// A job that moves between directories during the call is caught by
	// the recorder (see moveRecorder).
	s.watch()
	// Without an index, a List that does not want done/ lists the
	// directories it wants, between the recorder's start and the barrier,
	// rather than build the index: that takes a listing of done/, the
	// history, which at 100,000 jobs is most of a first List's time. Once
	// a direct listing meets many names, the index is built for the next
	// calls.
	direct := !slices.Contains(dirs, dirDone) && !s.indexIsReady()
	if !direct {
		s.primeIndex()
	}
	rec := s.recordMoves()
	var skipped []error
	var found []listed
	var listErr error
	if direct && rec != nil {
		found, listErr = s.listNames(dirs, opts, &skipped)
	}
	moved, complete, err := s.finishMoves(ctx, rec)
	if err != nil {
		return jobstore.Page{}, err
	}
	var snap *indexSnap
	if complete && !direct {
		snap = s.readySnapshot()
	}
	var ids iter.Seq[listed]
	switch {
	case snap != nil:
		for _, p := range snap.bad {
			if d, _, _ := strings.Cut(p, "/"); dirBit(d)&want != 0 {
				skipped = append(skipped, &CorruptError{Path: filepath.Join(s.dir, p), Reason: "unexpected file name (want <job id>.json)"})
			}
		}
		ids = s.walkIndex(snap, opts, want, moved)
	case direct && complete && listErr == nil:
		// The jobs that moved during the listing were named by events
		// before the barrier's: each is read by ID.
		if len(found) > directListMax {
			s.primeIndex()
		}
		for id := range moved {
			if opts.AfterCursor(id) {
				found = append(found, listed{id: id, dir: -1})
			}
		}
		ids = s.sortListed(found, opts)
	default:
		// Events may have been lost: list the directories twice and take
		// what either pass finds.
		skipped = nil
		first, err := s.listNames(dirs, opts, &skipped)
		if err != nil {
			return jobstore.Page{}, err
		}
		second, err := s.listNames(dirs, opts, nil)
		if err != nil {
			return jobstore.Page{}, err
		}
		ids = s.sortListed(append(first, second...), opts)
	}
	page := storekit.NewPageBuilder(opts)
	last := ""
	for l := range ids {
		if l.id == last {
			continue // in two directories
		}
		last = l.id
		if err := ctx.Err(); err != nil {
			return jobstore.Page{}, err
		}
		if opts.Kind != "" && l.dir >= 0 {
			if kind, ok := s.kindOf(stateDirs[l.dir], l.id); ok && kind != opts.Kind {
				continue
			}
		}
		j, err := s.get(ctx, l.id)
		if err != nil {
			if errors.Is(err, jobstore.ErrNotFound) {
				continue // pruned meanwhile
			}
			if errors.Is(err, jobstore.ErrCorrupt) {
				skipped = append(skipped, err)
				continue
			}
			return jobstore.Page{}, err
		}
		s.kinds.put(j.ID, j.Kind)
		if !j.MatchesList(opts) {
			continue
		}
		if !page.Add(j) {
			break
		}
	}
	p := page.Page()
	p.Errors = skipped
	return p, nil
}

// directListMax is the most names a List without an index lists in the
// directories it wants before it builds the index for the calls after it:
// a listing costs what the names in it cost, the index one listing of
// every state directory once, and then little per call.
const directListMax = 1000

// listNames lists the state directories dirs and returns the jobs in them
// after opts' cursor. With bad set, it adds a *CorruptError to it for each
// name there that is not a job's (dot-files aside: a temp file of a tool
// that stages next to its target, or a listing barrier).
func (s *Store) listNames(dirs []string, opts jobstore.ListOptions, bad *[]error) ([]listed, error) {
	var all []listed
	for _, d := range dirs {
		names, err := readNames(filepath.Join(s.dir, d))
		if err != nil {
			return nil, fmt.Errorf("filestore: list: %w", err)
		}
		di := int8(slices.Index(stateDirs, d))
		for _, name := range names {
			id, ok := idFromName(name)
			if !ok {
				if bad != nil && !strings.HasPrefix(name, ".") {
					*bad = append(*bad, &CorruptError{Path: filepath.Join(s.dir, d, name), Reason: "unexpected file name (want <job id>.json)"})
				}
				continue
			}
			if opts.AfterCursor(id) {
				all = append(all, listed{id: id, dir: di})
			}
		}
	}
	return all, nil
}

// sortListed returns the jobs of found in opts' order, without those
// known to be of another kind than opts.Kind. A job found twice comes
// twice, one after the other.
func (s *Store) sortListed(found []listed, opts jobstore.ListOptions) iter.Seq[listed] {
	if opts.Kind != "" {
		found = s.kinds.dropOthers(found, opts.Kind)
	}
	slices.SortFunc(found, func(a, b listed) int {
		if opts.Order == jobstore.NewestFirst {
			return strings.Compare(b.id, a.id)
		}
		return strings.Compare(a.id, b.id)
	})
	return slices.Values(found)
}

// walkIndex yields, in opts' order after its cursor, the jobs of snap in
// the directories of want that are not known to be of another kind than
// opts.Kind, and the jobs in moved (which events named during the call:
// they may have moved out of want's directories since snap, or into them;
// List reads each). A job in two directories is yielded once.
func (s *Store) walkIndex(snap *indexSnap, opts jobstore.ListOptions, want uint8, moved map[string]struct{}) iter.Seq[listed] {
	up := opts.Order == jobstore.OldestFirst
	var extra []string
	for id := range moved {
		if opts.AfterCursor(id) {
			extra = append(extra, id)
		}
	}
	slices.Sort(extra)
	if !up {
		slices.Reverse(extra)
	}
	before := func(a, b string) bool { return up && a < b || !up && a > b }
	other := func(id string) bool {
		if opts.Kind == "" {
			return false
		}
		kind, ok := s.kinds.get(id)
		return ok && kind != opts.Kind
	}
	return func(yield func(listed) bool) {
		step := 1
		if !up {
			step = -1
		}
		for i := snap.from(opts.Cursor, up); i >= 0 && i < len(snap.items); i += step {
			it := snap.items[i]
			for len(extra) > 0 && before(extra[0], it.id) {
				if !other(extra[0]) && !yield(listed{id: extra[0], dir: -1}) {
					return
				}
				extra = extra[1:]
			}
			l := listed{id: it.id, dir: int8(bits.TrailingZeros8(it.dirs & want))}
			if len(extra) > 0 && extra[0] == it.id {
				// It moved, perhaps into want's directories: read it
				// wherever it is.
				extra = extra[1:]
				l.dir = int8(bits.TrailingZeros8(it.dirs))
			} else if it.dirs&want == 0 {
				continue
			}
			if !other(it.id) && !yield(l) {
				return
			}
		}
		for _, id := range extra {
			if !other(id) && !yield(listed{id: id, dir: -1}) {
				return
			}
		}
	}
}

// readLocked reads job id's record under its shared record lock, for a
// job that changed between every pair of readShared's passes.
func (s *Store) readLocked(ctx context.Context, id string) (record, error) {
	unlock, _, err := s.rlockJob(ctx, id)
	if err != nil {
		return record{}, err
	}
	defer unlock()
	return s.readJob(id, false)
}
