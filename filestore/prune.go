package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Prune deletes terminal jobs that finished more than olderThan ago. It
// first fsyncs queued/ and claimed/, so that no older copy of a job a power
// cut could bring back there outlives its record. For each job it removes, under the exclusive record lock, the record (and fsyncs
// done/), then the key file, then the lock files: the record is the truth
// of a job's existence, so a crash part way leaves at worst a key file or
// lock file without a record, which is rolled back. It lists done/, whose
// size grows with history: prune steadily rather than rarely.
func (s *Store) Prune(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.PruneStates(ctx, olderThan, nil)
}

// PruneStates is Prune limited to jobs in states; it implements
// jobstore.StatePruner.
func (s *Store) PruneStates(ctx context.Context, olderThan time.Duration, states []jobstore.State) (int, error) {
	if err := s.enter(ctx, "prune"); err != nil {
		return 0, err
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("filestore: prune: %w: negative age %s", jobstore.ErrInvalidInput, olderThan)
	}
	inStates, err := storekit.PruneFilter(states)
	if err != nil {
		return 0, fmt.Errorf("filestore: prune: %w", err)
	}
	cutoff := time.Now().Add(-olderThan)
	ids, _, err := s.listDir(dirDone)
	if err != nil {
		return 0, fmt.Errorf("filestore: prune: %w", err)
	}
	// Every job in done/ got there by a new record in done/ and the
	// removal of its older one from queued/ or claimed/, which made only
	// done/ durable: after a power cut the older record may be back in the
	// directory it left. That copy is harmless while the newer record
	// exists (Open removes it as stale), but once prune deletes the record
	// it would bring the job back, to run again. So the removals of those
	// directories must be durable before a record goes: one fsync of each
	// per pass covers every removal made before it, and pruneOne fsyncs
	// them again for a job whose older copy may have gone after it
	// (TestPowerCut/prune, TestPruneAfterLateRemoval).
	synced := time.Now()
	if len(ids) > 0 {
		// The jobs this Store submitted are prunable now, not after its
		// journal's next cover.
		s.coverOwnJournal()
		if err := s.syncLeft(); err != nil {
			return 0, fmt.Errorf("filestore: prune: %w", err)
		}
	}
	n := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		ok, err := s.pruneOne(ctx, id, cutoff, inStates, synced)
		if errors.Is(err, jobstore.ErrDependedOn) || errors.Is(err, errNotCovered) {
			continue // kept while a waiting job names it, or for a later pass
		}
		if err != nil {
			return n, fmt.Errorf("filestore: prune %s: %w", id, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// syncLeft makes durable the removals from the directories a job leaves
// for done/.
func (s *Store) syncLeft() error {
	for _, d := range []string{dirQueued, dirClaimed} {
		if err := s.durable.dir(d); err != nil {
			return err
		}
	}
	return nil
}

// lateRemoval is how long before a pass's fsync a job's record in done/
// may have been written and its older copy removed after that fsync: the
// writer removes the copy right after it made the record durable.
const lateRemoval = time.Minute

// pruneOne prunes job id if it is in done/ and matches. synced is when
// the pass's fsync of queued/ and claimed/ began.
func (s *Store) pruneOne(ctx context.Context, id string, cutoff time.Time, inStates func(jobstore.State) bool, synced time.Time) (bool, error) {
	unlock, ok, err := s.tryLockJob(id)
	waited := err == nil && !ok
	if waited {
		unlock, err = s.lockJob(ctx, id)
	}
	if errors.Is(err, jobstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The index entries of a pruned job go once its record lock is
	// released: they take its batch's lock, which a submit takes before
	// the record locks of the jobs it names.
	var pruned *jobstore.Job
	defer func() {
		if pruned != nil {
			s.unindex(ctx, *pruned)
		}
	}()
	defer unlock()
	f, err := s.locate(id)
	if err != nil {
		return false, err
	}
	if f.ok {
		s.removeStale(f)
	}
	rec, err := f.current(id)
	if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrCorrupt) {
		return false, nil // gone, or for Fsck to report
	}
	if err != nil {
		return false, err
	}
	if rec.dir != dirDone || !rec.Job.Prunable(cutoff) || !inStates(rec.Job.State) {
		return false, nil
	}
	if w, err := s.waitedFor(ctx, id, rec.Job.Batch); err != nil {
		return false, err
	} else if w != "" {
		return false, jobstore.DependedOn(id, w)
	}
	// A journaled submit's record goes only once its journal entry is
	// covered: a replay of the entry would bring the job back.
	if covered, err := s.journalCovered(rec.Logged); err != nil {
		return false, err
	} else if !covered {
		return false, errNotCovered
	}
	// The older copy may have gone after the pass's fsync: removed just
	// now (above), by a writer this waited for, or by one that finished
	// about when the pass began.
	late := waited || len(f.stale) > 0
	if fi, err := os.Lstat(s.recordPath(dirDone, id)); err != nil || fi.ModTime().After(synced.Add(-lateRemoval)) {
		late = true
	}
	if late {
		if err := s.syncLeft(); err != nil {
			return false, err
		}
	}
	if err := s.fs.Remove(s.recordPath(dirDone, id)); err != nil {
		return false, err
	}
	pruned = &rec.Job
	// Durable before the key file goes: a record that came back after a
	// power cut without its key file would let a second job take the key.
	if err := s.durable.dir(dirDone); err != nil {
		return false, err
	}
	if rec.Job.Key != "" {
		if err := s.removeKeyFile(keyName(rec.Job.Key), id); err != nil {
			return true, err
		}
	}
	s.touched(id)
	// The lease lock file goes last, while the record lock is held;
	// whoever opened it before finds, after locking, that the path names
	// another inode (or none) and lets go. A record lock file goes when
	// the lock is released (the job has no record now, see dropLockIfGone),
	// or, with range locks, a lock file of format 6 or older now.
	if err := s.fs.Remove(s.leasePath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, err
	}
	s.dropOldLockFile(id)
	return true, nil
}

// errNotCovered is pruneOne's answer for a job whose submission journal
// entry is not covered yet: its Store covers it within journalCoverEvery
// (or, if it is gone, the next recovery pass replays and covers it).
var errNotCovered = errors.New("its submission journal entry is not covered yet")

// deleteCoverWait is how long Delete waits for a job's journal entry to be
// covered.
const deleteCoverWait = 10 * time.Second

// Delete deletes the finished job id, as Prune deletes a job (the record,
// then its key file, then its lock files), whatever its age. It
// implements jobstore.Deleter.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := jobstore.ValidateID(id); err != nil {
		return fmt.Errorf("filestore: delete: %w", err)
	}
	if err := s.enter(ctx, "delete"); err != nil {
		return err
	}
	// A job that finished just now has a finished_at before this.
	cutoff := time.Now().Add(time.Hour)
	all := func(jobstore.State) bool { return true }
	coverBy := time.Now().Add(deleteCoverWait)
	for tries := 0; ; tries++ {
		// The zero time makes pruneOne fsync queued/ and claimed/ first,
		// as for a job that came to done/ after a pass's fsync.
		ok, err := s.pruneOne(ctx, id, cutoff, all, time.Time{})
		if errors.Is(err, jobstore.ErrDependedOn) {
			return fmt.Errorf("filestore: delete: %w", err)
		}
		if errors.Is(err, errNotCovered) {
			if time.Now().After(coverBy) {
				return fmt.Errorf("filestore: delete %s: %w (its submitting process holds it; try again later)", id, err)
			}
			s.coverOwnJournal()
			tries--
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("filestore: delete %s: %w", id, err)
		}
		if ok {
			return nil
		}
		j, err := s.get(ctx, id)
		if err != nil {
			return fmt.Errorf("filestore: delete %s: %w", id, err)
		}
		if !j.State.Terminal() {
			return fmt.Errorf("filestore: delete %s: job is %s: %w", id, j.State, jobstore.ErrNotFinished)
		}
		if tries == 2 {
			// Finished, and still not deletable: its record is not in
			// done/ (for Fsck to repair) or cannot be read.
			return fmt.Errorf("filestore: delete %s: the record of the finished job is not in done/; run jobdir fsck", id)
		}
	}
}
