package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/jobdir/jobdir/jobstore"
)

// Where migration puts the old store's files once it has dealt with them.
// Nothing is deleted: a migrated record is kept for reference, a file that
// could not be migrated is set aside with the reason logged.
const (
	dirLegacy           = "legacy"
	dirLegacyMigrated   = "legacy/migrated"
	dirLegacyQuarantine = "legacy/quarantine"
	migrateLockName     = "migrate.lock"
)

// migrateLegacy migrates, in place, a directory written by the old
// single-process file store: flat <id>.json records at the top level (see
// testdata/legacy/README.md). Each job keeps its ID and key and is written
// into the directory of its state like any record; a job the old store
// left running is written as running with a lease nobody holds, so the
// repair step that follows recovers it like any dead worker's job.
//
// It is idempotent and safe to interrupt: a record already written is not
// written again, and the old file is moved to legacy/migrated/ only after
// its job is durable. Files it cannot migrate go to legacy/quarantine/.
// Concurrent Opens serialize on locks/migrate.lock.
func (s *Store) migrateLegacy(ctx context.Context) error {
	has, err := hasLegacyFiles(s.dir)
	if err != nil || !has {
		return err
	}
	unlock, err := lockRecord(ctx, filepath.Join(s.dir, dirLocks, migrateLockName), true, true, s.filePerm)
	if err != nil {
		return err
	}
	defer unlock()
	scan, err := scanLegacy(s.dir, s.opts.MaxPayload)
	if err != nil {
		return err
	}
	if len(scan.Jobs)+len(scan.Temps)+len(scan.Problems) == 0 {
		return nil // another process migrated it while this one waited
	}
	for _, d := range []string{dirLegacy, dirLegacyMigrated, dirLegacyQuarantine} {
		if err := s.fs.Mkdir(filepath.Join(s.dir, d), s.dirPerm); err != nil {
			return err
		}
	}
	for _, j := range scan.Jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		dropped, err := s.migrateJob(ctx, j)
		if err != nil {
			return fmt.Errorf("job %s from %s: %w", j.ID, scan.Sources[j.ID], err)
		}
		if dropped != "" {
			s.log.Warn("filestore: migrate: key already names another job; job kept without it", "id", j.ID, "key", j.Key, "owner", dropped)
		}
	}
	// Every migrated job is durable before its old file moves away.
	for _, d := range []string{dirKeys, dirQueued, dirClaimed, dirDone} {
		if err := s.durable.dir(d); err != nil {
			return err
		}
	}
	for _, j := range scan.Jobs {
		if err := s.moveLegacy(scan.Sources[j.ID], dirLegacyMigrated); err != nil {
			return err
		}
	}
	for _, p := range scan.Problems {
		if p.Kept {
			s.log.Warn("filestore: migrate: "+p.Err.Error(), "path", p.Path)
			continue
		}
		s.log.Warn("filestore: migrate: set aside in "+dirLegacyQuarantine, "path", p.Path, "err", p.Err)
		if err := s.moveLegacy(p.Path, dirLegacyQuarantine); err != nil {
			return err
		}
	}
	for _, p := range scan.Temps {
		if err := s.moveLegacy(p, dirLegacyQuarantine); err != nil {
			return err
		}
	}
	if err := s.durable.dir(dirLegacyMigrated); err != nil {
		return err
	}
	if err := s.durable.dir(dirLegacyQuarantine); err != nil {
		return err
	}
	if len(scan.Jobs) > 0 {
		s.log.Info("filestore: migrated the old file store's records", "jobs", len(scan.Jobs), "set_aside", len(scan.Problems)+len(scan.Temps))
	}
	return s.durable.dir(".")
}

// migrateJob writes one legacy job as a record (and its key file) unless a
// record of it already exists. If the key already names another job, the
// job is written without its key and that job's ID is returned.
func (s *Store) migrateJob(ctx context.Context, j jobstore.Job) (string, error) {
	unlock, err := s.lockJobIn(ctx, j.ID, lookSubmitted)
	if err != nil {
		return "", err
	}
	defer unlock()
	f, err := s.locate(j.ID)
	if err != nil {
		return "", err
	}
	if f.ok || len(f.corrupt) > 0 {
		return "", nil // written by an earlier, interrupted migration
	}
	var owner string
	if j.Key != "" {
		hash := keyName(j.Key)
		env, err := s.readKeyFile(s.keyPath(hash))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return "", err
		case env.Job.ID != j.ID:
			owner = env.Job.ID
			j.Key = ""
		}
	}
	data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 1, Job: j})
	if err != nil {
		return "", err
	}
	tmp, err := s.fs.WriteTemp(s.tmpDir, data, s.filePerm, s.durable.file())
	if err != nil {
		return "", err
	}
	defer func() { _ = s.fs.Remove(tmp) }()
	if j.Key != "" {
		// As in Submit, the key file is the record's first version,
		// published with link(2) before the record.
		if err := s.fs.Link(tmp, s.keyPath(keyName(j.Key))); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return owner, s.fs.Rename(tmp, s.recordPath(dirOf(j.State), j.ID))
}

// moveLegacy moves an old store's file into dir (under the store), keeping
// its name.
func (s *Store) moveLegacy(path, dir string) error {
	dst := filepath.Join(s.dir, dir, filepath.Base(path))
	if err := s.fs.Rename(path, dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move %s to %s: %w", path, dst, err)
	}
	return nil
}
