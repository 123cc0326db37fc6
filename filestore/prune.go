package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jobdir/jobdir/jobstore"
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
	inStates, err := jobstore.PruneFilter(states)
	if err != nil {
		return 0, fmt.Errorf("filestore: prune: %w", err)
	}
	cutoff := time.Now().Add(-olderThan)
	ids, _, err := s.listDir(dirDone)
	if err != nil {
		return 0, fmt.Errorf("filestore: prune: %w", err)
	}
	if len(ids) > 0 {
		// Every job in done/ got there by a rename out of queued/ or
		// claimed/ that made only done/ durable: after a power cut its
		// older record may be back in the directory it left. That copy is
		// harmless while the newer record exists (Open removes it as
		// stale), but once prune deletes the record it would bring the
		// job back, to run again. So make those directories' removals
		// durable before deleting anything: one fsync of each per pass
		// (TestPowerCut/prune).
		for _, d := range []string{dirQueued, dirClaimed} {
			if err := s.durable.dir(d); err != nil {
				return 0, fmt.Errorf("filestore: prune: %w", err)
			}
		}
	}
	n := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		ok, err := s.pruneOne(ctx, id, cutoff, inStates)
		if err != nil {
			return n, fmt.Errorf("filestore: prune %s: %w", id, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func (s *Store) pruneOne(ctx context.Context, id string, cutoff time.Time, inStates func(jobstore.State) bool) (bool, error) {
	unlock, err := s.lockJob(ctx, id)
	if errors.Is(err, jobstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, err := s.readJob(id, true)
	if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrCorrupt) {
		return false, nil // gone, or for Fsck to report
	}
	if err != nil {
		return false, err
	}
	if rec.dir != dirDone || !rec.Job.Prunable(cutoff) || !inStates(rec.Job.State) {
		return false, nil
	}
	if err := s.fs.Remove(s.recordPath(dirDone, id)); err != nil {
		return false, err
	}
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
	// another inode (or none) and lets go. The record lock file goes when
	// the lock is released (the job has no record now, see dropLockIfGone).
	if err := s.fs.Remove(s.leasePath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, err
	}
	return true, nil
}
