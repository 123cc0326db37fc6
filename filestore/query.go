package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jobdir/jobdir/jobstore"
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

// get reads a valid job ID's current record (see readShared).
func (s *Store) get(ctx context.Context, id string) (jobstore.Job, error) {
	rec, err := s.readShared(ctx, id)
	if err != nil {
		return jobstore.Job{}, err
	}
	return rec.Job, nil
}

// unlockedPasses bounds how many times readShared reads a job's state
// directories when a pass may have met a move in flight.
const unlockedPasses = 4

// readShared reads job id's current record without taking its record
// lock, so that no holder of that lock (a process stopped in the middle
// of a change, of this job or of another) can delay a read.
//
// A record is replaced by rename, so every file read is a whole record,
// and every change writes its new copy before it removes the old one.
// One pass reads queued/, claimed/ and done/ in that order, the order in
// which jobs move forward: a job moving forward during the pass is found
// (the old copy if it was read before the move, else the new one, which
// wins by rev). Only a move back to queued/ (a retry, a failed attempt
// queued again, a release, recovery) that falls between the read of
// queued/ and the read of the directory it leaves can hide the job from
// a pass, and a claim note being rewritten by a new claim can look absent
// for a moment; so a pass that finds no record, or a queued record in
// claimed/ without its note, is repeated (a few times: what stays so
// after that is so on disk). A change in flight is seen either before or
// after, never half done: the answer is the job as it was at some moment
// during the call.
func (s *Store) readShared(ctx context.Context, id string) (record, error) {
	var rec record
	var err error
	for range unlockedPasses {
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
			continue // an interrupted claim, or a claim note being rewritten
		case err == nil || !errors.Is(err, jobstore.ErrNotFound):
			return rec, err
		}
	}
	if errors.Is(err, jobstore.ErrNotFound) {
		if _, serr := os.Lstat(filepath.Join(s.dir, dirQueued)); serr != nil {
			// Not just this job: say so, or a removed store reads as an
			// empty one.
			return record{}, fmt.Errorf("job %s: %w: the store's %s/ directory is missing (was %s removed?)", id, jobstore.ErrNotFound, dirQueued, s.dir)
		}
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

// List returns one page of jobs. It lists only the state directories the
// filter needs (listing queued or running jobs never reads finished ones)
// and reads each job without a lock (see readShared). With a kind filter it skips
// the records of other kinds without reading their payloads (see kindOf).
// Records that cannot be read are skipped and reported in Page.Errors.
// A job that exists throughout the call is listed once even if it moves
// between state directories meanwhile (see moveRecorder).
func (s *Store) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	if err := s.enter(ctx, "list"); err != nil {
		return jobstore.Page{}, err
	}
	opts, err := opts.Normalize()
	if err != nil {
		return jobstore.Page{}, fmt.Errorf("filestore: list: %w", err)
	}
	var skipped []error
	where := make(map[string]string) // ID -> the first state directory listing it
	var ids []string
	read := func(report bool) error {
		for _, d := range dirsFor(opts.States) {
			dirIDs, bad, err := s.listDir(d)
			if err != nil {
				return fmt.Errorf("filestore: list: %w", err)
			}
			if report {
				skipped = append(skipped, bad...)
			}
			for _, id := range dirIDs {
				if _, seen := where[id]; !seen && opts.AfterCursor(id) {
					where[id] = d
					ids = append(ids, id)
				}
			}
		}
		return nil
	}
	// A job that moves between directories during the reads is caught by
	// the recorder (see moveRecorder), or else by a second read.
	rec := s.recordMoves()
	if err := read(true); err != nil {
		s.stopMoves(rec)
		return jobstore.Page{}, err
	}
	moved, complete, err := s.finishMoves(ctx, rec)
	if err != nil {
		return jobstore.Page{}, err
	}
	if complete {
		for id := range moved {
			if _, seen := where[id]; !seen && opts.AfterCursor(id) {
				where[id] = ""
				ids = append(ids, id)
			}
		}
	} else if err := read(false); err != nil {
		return jobstore.Page{}, err
	}
	slices.Sort(ids)
	if opts.Order == jobstore.NewestFirst {
		slices.Reverse(ids)
	}
	page := jobstore.NewPageBuilder(opts)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return jobstore.Page{}, err
		}
		if opts.Kind != "" && where[id] != "" {
			if kind, ok := s.kindOf(where[id], id); ok && kind != opts.Kind {
				continue
			}
		}
		j, err := s.get(ctx, id)
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
