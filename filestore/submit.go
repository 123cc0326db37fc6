package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// keyName returns the file name in keys/ for an idempotency key.
func keyName(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func (s *Store) keyPath(hash string) string {
	return filepath.Join(s.dir, dirKeys, hash+recordExt)
}

// Submit creates a queued job from spec, or returns the existing job with
// spec.Key. It returns only once the new record (and its key file) is
// durable, unless Options.NoSync. Exactly one of any number of processes
// submitting one key at once creates the job: the key file is published
// with link(2), which fails for all but one.
func (s *Store) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	if err := s.enter(ctx, "submit"); err != nil {
		return jobstore.Job{}, false, err
	}
	if err := spec.Validate(s.opts.MaxPayload); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("filestore: submit: %w", err)
	}
	if graphSpec(spec) {
		out, err := s.submitGraphRetry(ctx, []jobstore.Spec{spec}, false)
		if err != nil {
			return jobstore.Job{}, false, fmt.Errorf("filestore: submit: %w", err)
		}
		return out[0].Job, out[0].Created, nil
	}
	var hash string
	if spec.Key != "" {
		hash = keyName(spec.Key)
		s.mu.Lock()
		id, ok := s.keys[hash]
		s.mu.Unlock()
		if ok {
			if j, err := s.jobWithKey(ctx, id, spec.Key); err == nil {
				return j, false, nil
			}
		}
	}
	// Each round either creates the job, finds the key's owner, or removes
	// a key file whose job was never published and tries again.
	for round := 0; ; round++ {
		if err := ctx.Err(); err != nil {
			return jobstore.Job{}, false, err
		}
		j, created, retry, err := s.submitOnce(ctx, spec, hash)
		if err != nil {
			return jobstore.Job{}, false, fmt.Errorf("filestore: submit: %w", err)
		}
		if !retry {
			return j, created, nil
		}
		if round > 100 {
			return jobstore.Job{}, false, fmt.Errorf("filestore: submit: key %q: its key file keeps changing", spec.Key)
		}
	}
}

// submitOnce makes one attempt at Submit; see docs/format.md for the order
// of its steps and what a crash after each leaves.
func (s *Store) submitOnce(ctx context.Context, spec jobstore.Spec, hash string) (jobstore.Job, bool, bool, error) {
	var jr *journal
	if hash == "" && s.submits.Add(1) > 1 {
		// From a Store's second submit on: one that submits a single job
		// and closes (a command) makes its record durable as before,
		// without a journal's fdatasync and cover, nor its file.
		// Taken before any record lock: taking one may replay it, which
		// locks the jobs of its entries.
		jr = s.journalFor(ctx)
	}
	j := jobstore.NewJob(spec, time.Now())
	if jr != nil {
		// As a batch of one: the record is named in queued/ once its
		// entry is durable, so nobody can see the job before, and it
		// takes no record lock (submitBatchJournaled).
		if done, err := s.submitBatchJournaled(ctx, jr, []*batchJob{{job: j}}); done || err != nil {
			return j, err == nil, false, err
		}
	}
	// Held from before the key file is linked until the record is durable,
	// so that a process that finds the key file waits for the record
	// instead of taking it for an abandoned submit, and so that nobody
	// claims or changes the job before it is durable: if the fsync of
	// queued/ fails, the job is taken back, and that must find it as this
	// call wrote it.
	unlock, err := s.lockNewJob(ctx, &j)
	if err != nil {
		return j, false, false, err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 1, Job: j})
	if err != nil {
		return j, false, false, err
	}
	// Written unsynced and fsynced once linked or renamed into place
	// (durability.placed): the fsync commits the link or rename with the
	// data.
	since := s.durable.mark()
	tmp, err := s.fs.WriteTemp(s.tmpDir, data, s.filePerm, false)
	if err != nil {
		return j, false, false, fmt.Errorf("write job %s: %w", j.ID, err)
	}
	if hash != "" {
		err := s.fs.Link(tmp, s.keyPath(hash))
		if errors.Is(err, fs.ErrExist) {
			_ = s.fs.Remove(tmp)
			// resolveKey takes the owner's record lock, which may be the
			// same lock file as this job's.
			unlock()
			locked = false
			return s.resolveKey(ctx, hash, spec.Key)
		}
		if err != nil {
			_ = s.fs.Remove(tmp)
			return j, false, false, fmt.Errorf("publish key of job %s: %w", j.ID, err)
		}
		// The key file must be durable before the record: a record
		// without its key file would let a second job take the key.
		if err := s.durable.moved(tmp, dirKeys, since); err != nil {
			_ = s.fs.Remove(s.keyPath(hash))
			_ = s.fs.Remove(tmp)
			return j, false, false, err
		}
	}
	if err := s.publish(j, tmp, hash); err != nil {
		return j, false, false, err
	}
	if hash == "" {
		err = s.durable.moved(s.recordPath(dirQueued, j.ID), dirQueued, since)
	} else {
		// A keyed record's data was made durable with its key file.
		err = s.durable.dir(dirQueued)
	}
	if err != nil {
		s.unpublish(j, hash)
		return j, false, false, err
	}
	s.published(j, hash)
	return j, true, false, nil
}

// lockNewJob takes the exclusive record lock of the new job j, whose lock
// file it creates: nobody else knows the ID yet, so nobody else holds it.
func (s *Store) lockNewJob(ctx context.Context, j *jobstore.Job) (func(), error) {
	return s.lockJobIn(ctx, j.ID, lookSubmitted)
}

// publish renames the new job's temp file into queued/, taking back its key
// file if that fails.
func (s *Store) publish(j jobstore.Job, tmp, hash string) error {
	if err := s.fs.Rename(tmp, s.recordPath(dirQueued, j.ID)); err != nil {
		if hash != "" {
			_ = s.fs.Remove(s.keyPath(hash))
		}
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("publish job %s: %w", j.ID, err)
	}
	return nil
}

// unpublish takes back a published job whose directory fsync failed: the
// record may or may not survive a power cut, and the caller is told the
// submit failed, so it must not stay as a job nobody expects. The caller
// holds the job's record lock, exclusively, since before the job was
// published, so nobody else can have changed it; the record is still
// checked before it goes, and the key file goes only if it names the job.
func (s *Store) unpublish(j jobstore.Job, hash string) {
	if !s.takeBackRecord(j.ID, jobstore.StateQueued) {
		return // the job stays, with its key
	}
	if hash != "" {
		if err := s.removeKeyFile(hash, j.ID); err != nil {
			s.log.Warn("filestore: submit failed; its key file stays (the next submit of the key removes it)", "id", j.ID, "err", err)
		}
	}
}

// takeBackRecord removes job id's record if it is its first record, in
// state st, as a submit that is being taken back wrote it, and reports whether
// the job's record is gone. If it is not (it was not as written, or its
// removal failed), the job stays, and so must its key file: removing that
// would let a second job take the key. The caller holds the job's record
// lock exclusively.
func (s *Store) takeBackRecord(id string, st jobstore.State) bool {
	p := s.recordPath(dirOf(st), id)
	env, err := s.readRecord(p, id)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil || env.Rev != 1 || env.Job.State != st {
		s.log.Warn("filestore: a failed submit's record is not as it wrote it; left alone", "id", id, "err", err)
		return false
	}
	if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("filestore: cannot take back the record of a failed submit; the job stays, with its key", "id", id, "err", err)
		return false
	}
	return true
}

// published tells this process's caches about a new durable job.
func (s *Store) published(j jobstore.Job, hash string) {
	if hash != "" {
		s.cacheKey(hash, j.ID)
	}
	s.setCand(j)
}

// maxKeyCache bounds the key cache, so that memory does not grow with the
// number of keys ever submitted.
const maxKeyCache = 1 << 16

// cacheKey remembers that the key with this hash belongs to job id.
func (s *Store) cacheKey(hash, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[hash]; !ok && len(s.keys) >= maxKeyCache {
		for h := range s.keys { // evict an arbitrary entry: it is only a cache
			delete(s.keys, h)
			break
		}
	}
	s.keys[hash] = id
}

// resolveKey returns the job that owns the key file keys/<hash>.json. If
// that job has no record (its submitter died before publishing it, or a
// prune was interrupted) it removes the key file and asks for a retry.
func (s *Store) resolveKey(ctx context.Context, hash, key string) (jobstore.Job, bool, bool, error) {
	kp := s.keyPath(hash)
	env, ino, err := s.readKeyFileIno(kp)
	if errors.Is(err, fs.ErrNotExist) {
		return jobstore.Job{}, false, true, nil // pruned meanwhile
	}
	if isTorn(err) {
		// A crash left it before its submit was acknowledged: it holds
		// the key for nobody.
		if err := s.setAsideTornKey(ctx, kp, ino); err != nil {
			return jobstore.Job{}, false, false, fmt.Errorf("key %q: %w", key, err)
		}
		s.log.Warn("filestore: set aside a key file that a crash left torn; its submit was never acknowledged", "path", kp, "err", err)
		return jobstore.Job{}, false, true, nil
	}
	if err != nil {
		return jobstore.Job{}, false, false, fmt.Errorf("key %q: %w (run fsck)", key, err)
	}
	id := env.Job.ID
	if env.Job.Key != key {
		return jobstore.Job{}, false, false, fmt.Errorf("key %q: %w", key, &CorruptError{Path: kp, Reason: "names a job with another key"})
	}
	// A record that was claimed or changed since its submit needs no lock
	// to be read: its submit is over (both take the lock its submitter
	// holds until the record is durable). A rev-1 record in queued/ may
	// still be its submitter's, which takes it back if its fsync fails, and
	// no record may mean a submitter still publishing it: the exclusive
	// lock waits for that submitter.
	if rec, err := s.readShared(ctx, id); err == nil && (rec.Rev > 1 || rec.dir != dirQueued) {
		s.cacheKey(hash, id)
		return rec.Job, false, false, nil
	}
	unlock, err := s.lockJob(ctx, id)
	if err != nil {
		return jobstore.Job{}, false, false, err
	}
	defer unlock()
	rec, err := s.readJob(id, true)
	if err == nil {
		s.cacheKey(hash, id)
		return rec.Job, false, false, nil
	}
	if isTorn(err) {
		// Every copy of the record is torn: a crash took the job's last
		// change (see ProblemTornRecord), and the job must not hold its
		// key forever. Set aside, it has no record: the key file goes.
		gone, serr := s.setAsideTornRecord(id)
		if serr != nil {
			return jobstore.Job{}, false, false, fmt.Errorf("key %q: %w", key, serr)
		}
		if gone {
			s.log.Warn("filestore: set aside the record of a keyed job that a crash left torn", "id", id, "err", err)
			err = jobstore.ErrNotFound
		}
	}
	if !errors.Is(err, jobstore.ErrNotFound) {
		return jobstore.Job{}, false, false, err
	}
	if err := s.removeKeyFile(hash, id); err != nil {
		return jobstore.Job{}, false, false, err
	}
	s.log.Info("filestore: removed the key file of a job that was never published", "id", id)
	return jobstore.Job{}, false, true, nil
}

// removeKeyFile removes keys/<hash>.json if it still names job id. The
// caller holds id's record lock exclusively.
func (s *Store) removeKeyFile(hash, id string) error {
	kp := s.keyPath(hash)
	env, err := s.readKeyFile(kp)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && env.Job.ID != id) {
		return nil
	}
	if err := s.fs.Remove(kp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove key file %s: %w", kp, err)
	}
	s.mu.Lock()
	if s.keys[hash] == id {
		delete(s.keys, hash)
	}
	s.mu.Unlock()
	return nil
}

// readKeyFile reads a key file: the first record of the job that owns the
// key (a hard link made at submit).
func (s *Store) readKeyFile(p string) (envelope, error) {
	env, _, err := s.readKeyFileIno(p)
	return env, err
}

// readKeyFileIno is readKeyFile that also returns the inode number of the
// file it read, 0 if it opened none.
func (s *Store) readKeyFileIno(p string) (envelope, uint64, error) {
	// O_NONBLOCK: a FIFO planted here must not block the open.
	f, err := os.OpenFile(p, os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return envelope{}, 0, err
		}
		return envelope{}, 0, &CorruptError{Path: p, Reason: err.Error(), Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return envelope{}, 0, err
	}
	if !fi.Mode().IsRegular() {
		return envelope{}, inode(fi), &CorruptError{Path: p, Reason: fmt.Sprintf("is not a regular file (%s)", fi.Mode().Type())}
	}
	data, err := io.ReadAll(io.LimitReader(f, s.maxRecord()+1))
	if err != nil {
		return envelope{}, inode(fi), err
	}
	env, err := decodeRecord(p, "", data, s.maxRecord())
	return env, inode(fi), err
}

// setAsideTornRecord moves every copy of job id's record into quarantine/
// if each one is torn (see ProblemTornRecord), and reports whether it did.
// A job with a valid copy, or one corrupt otherwise, is left alone. The
// caller holds id's record lock exclusively.
func (s *Store) setAsideTornRecord(id string) (bool, error) {
	f, err := s.locate(id)
	if err != nil || f.ok || len(f.corrupt) == 0 {
		return false, err
	}
	var paths []string
	for _, e := range f.corrupt {
		var ce *CorruptError
		if !errors.As(e, &ce) || !ce.torn {
			return false, nil
		}
		paths = append(paths, ce.Path)
	}
	for _, p := range paths {
		if _, err := s.quarantine(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("set aside torn record: %w", err)
		}
	}
	return true, nil
}

// setAsideTornKey moves the torn key file kp, whose inode was ino when it
// was read, into quarantine/keys/ (see ProblemTornRecord), so that its key
// can be submitted again. Its job was never acknowledged: where changes
// are durable, a key file's data is on the disk before the file is linked
// into keys/. Only this removes a torn key file, and it does so holding
// the key's set-aside lock, quarantine/keys/<name>.lock: under it, kp still
// naming inode ino means that it is still the torn file, which no one else
// can take away before the move. Anything else at kp (a key file published
// once another process had set the torn one aside) is never touched.
func (s *Store) setAsideTornKey(ctx context.Context, kp string, ino uint64) error {
	q, err := s.quarantineDir(dirKeys)
	if err != nil {
		return fmt.Errorf("set aside torn key file: %w", err)
	}
	unlock, err := lockRecord(ctx, filepath.Join(q, filepath.Base(kp)+recordLock), true, true, s.filePerm)
	if err != nil {
		return fmt.Errorf("set aside torn key file: %w", err)
	}
	defer unlock()
	fi, err := os.Lstat(kp)
	if errors.Is(err, fs.ErrNotExist) || err == nil && inode(fi) != ino {
		return nil // set aside meanwhile
	}
	if err != nil {
		return fmt.Errorf("set aside torn key file: %w", err)
	}
	if _, err := s.quarantine(kp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("set aside torn key file: %w", err)
	}
	return nil
}

// jobWithKey returns job id if it exists and has key.
func (s *Store) jobWithKey(ctx context.Context, id, key string) (jobstore.Job, error) {
	rec, err := s.readShared(ctx, id)
	if err != nil {
		return jobstore.Job{}, err
	}
	if rec.Job.Key != key {
		return jobstore.Job{}, fmt.Errorf("job %s: %w", id, jobstore.ErrNotFound)
	}
	return rec.Job, nil
}
