package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.Importer = (*Store)(nil)

// Import adds jobs made by another store, keeping their IDs and every
// field, as jobstore.Importer says; a job whose ID is here already is left
// alone. Each job is added as Submit adds one, in the directory of its
// state: its key file first, then its record, each durable before the
// next (unless Options.NoSync), under the job's record lock, so that a
// concurrent Import or Submit of the same ID or key never makes two jobs.
func (s *Store) Import(ctx context.Context, jobs []jobstore.Job) (int, error) {
	if err := s.enter(ctx, "import"); err != nil {
		return 0, err
	}
	if err := storekit.ValidateImports(jobs, s.opts.MaxPayload); err != nil {
		return 0, fmt.Errorf("filestore: import: %w", err)
	}
	n := 0
	var waiting []string
	// Imported jobs that wait may find their dependencies ended.
	defer func() {
		for _, id := range waiting {
			s.settle(ctx, id, "", s.lockJob)
		}
	}()
	for _, j := range jobs {
		added, err := s.importJob(ctx, j)
		if err != nil {
			return n, fmt.Errorf("filestore: import: job %s: %w", j.ID, err)
		}
		if added {
			n++
			if j.State == jobstore.StateWaiting {
				waiting = append(waiting, j.ID)
			}
		}
	}
	return n, nil
}

// importJob adds j unless a job with its ID exists.
func (s *Store) importJob(ctx context.Context, j jobstore.Job) (bool, error) {
	for round := 0; round <= 100; round++ {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		added, retry, err := s.importOnce(ctx, j)
		if !retry {
			return added, err
		}
	}
	return false, fmt.Errorf("key %q: its key file keeps changing", j.Key)
}

// importOnce makes one attempt at importJob; retry asks for another.
func (s *Store) importOnce(ctx context.Context, j jobstore.Job) (added, retry bool, err error) {
	unlock, err := s.lockJobIn(ctx, j.ID, lookSubmitted)
	if err != nil {
		return false, false, err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	f, err := s.locate(j.ID)
	if err != nil {
		return false, false, err
	}
	if f.ok {
		return false, false, nil
	}
	if len(f.corrupt) > 0 {
		return false, false, fmt.Errorf("a corrupt record has this ID (run jobdir fsck): %w", f.corrupt[0])
	}
	data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 1, Job: j})
	if err != nil {
		return false, false, err
	}
	if len(j.After) > 0 || j.Batch != "" || j.AfterBatch != "" {
		// The index entries first, durable, as submitGraph makes them.
		g := newGraphEntries(s)
		if err := g.index(j, j.After); err != nil {
			g.undo()
			return false, false, err
		}
		if err := g.sync(); err != nil {
			g.undo()
			return false, false, err
		}
	}
	tmp, err := s.fs.WriteTemp(s.tmpDir, data, s.filePerm, s.durable.file())
	if err != nil {
		return false, false, fmt.Errorf("write job %s: %w", j.ID, err)
	}
	var hash string
	if j.Key != "" {
		hash = keyName(j.Key)
		err := s.fs.Link(tmp, s.keyPath(hash))
		if errors.Is(err, fs.ErrExist) {
			_ = s.fs.Remove(tmp)
			env, rerr := s.readKeyFile(s.keyPath(hash))
			switch {
			case errors.Is(rerr, fs.ErrNotExist):
				return false, true, nil // pruned meanwhile
			case rerr != nil:
				return false, false, fmt.Errorf("key %q: %w (run jobdir fsck)", j.Key, rerr)
			case env.Job.ID == j.ID:
				// An import of this job died before its record was
				// published (we hold its lock and it has none).
				if err := s.removeKeyFile(hash, j.ID); err != nil {
					return false, false, err
				}
				return false, true, nil
			}
			// resolveKey takes the owner's record lock, which may be the
			// same lock file as this job's.
			unlock()
			locked = false
			owner, _, again, err := s.resolveKey(ctx, hash, j.Key)
			switch {
			case err != nil:
				return false, false, err
			case again:
				return false, true, nil
			}
			return false, false, fmt.Errorf("%w: key %q belongs to job %s", jobstore.ErrKeyTaken, j.Key, owner.ID)
		}
		if err != nil {
			_ = s.fs.Remove(tmp)
			return false, false, fmt.Errorf("publish key of job %s: %w", j.ID, err)
		}
		if err := s.durable.dir(dirKeys); err != nil {
			_ = s.fs.Remove(s.keyPath(hash))
			_ = s.fs.Remove(tmp)
			return false, false, err
		}
	}
	dir := dirOf(j.State)
	if err := s.fs.Rename(tmp, s.recordPath(dir, j.ID)); err != nil {
		if hash != "" {
			_ = s.fs.Remove(s.keyPath(hash))
		}
		_ = s.fs.Remove(tmp)
		return false, false, fmt.Errorf("publish job %s: %w", j.ID, err)
	}
	if err := s.durable.dir(dir); err != nil {
		_ = s.fs.Remove(s.recordPath(dir, j.ID))
		if hash != "" {
			_ = s.fs.Remove(s.keyPath(hash))
		}
		return false, false, err
	}
	s.published(j, hash)
	s.touched(j.ID)
	return true, false, nil
}
