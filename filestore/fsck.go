package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// ProblemKind classifies a Problem.
type ProblemKind string

// The kinds of problem Fsck reports. All but ProblemCorrupt,
// ProblemUnexpected and ProblemDuplicateKey are what a crash leaves behind
// and what Repair repairs (ProblemTornRecord only where it holds a key),
// as every Store does in the background a second after Open.
const (
	// ProblemCorrupt is a record or key file that cannot be read: not
	// JSON, not a record, a symbolic link or a directory. Never removed
	// automatically.
	ProblemCorrupt ProblemKind = "corrupt"
	// ProblemTornRecord is a record or key file that a crash of the
	// machine left empty, zero bytes, or cut short: its data never reached
	// the disk. Where changes are durable (not Options.NoSync), a record
	// is on the disk before it is published (fsynced, or covered by a
	// syncfs, before the link into keys/ or the rename that publishes it),
	// so the change that wrote it was never acknowledged; and a live
	// writer publishes only whole records. Repair sets the file aside in
	// quarantine/<its directory>/, never deleting it: a key file so left
	// then no longer refuses its key, and a job whose only record is torn
	// is gone, as its unacknowledged submit is. Repair sets aside the key
	// files and the records that are the same file (a key file is a hard
	// link of its job's first record); Fsck with repair, every one.
	ProblemTornRecord ProblemKind = "torn-record"
	// ProblemUnexpected is a file in a state directory whose name is not
	// <job id>.json. Left alone.
	ProblemUnexpected ProblemKind = "unexpected-file"
	// ProblemTempFile is a temporary file of a writer that is gone.
	ProblemTempFile ProblemKind = "temp-file"
	// ProblemStaleCopy is an older copy of a record left in a second state
	// directory by an interrupted move; the copy with the higher revision
	// wins and the other is removed.
	ProblemStaleCopy ProblemKind = "stale-copy"
	// ProblemDanglingKey is a key file whose job has no record: its
	// submitter died before publishing it, or a prune was interrupted. The
	// key file is removed (rolled back).
	ProblemDanglingKey ProblemKind = "dangling-key"
	// ProblemMissingKey is a job with a key but no key file naming it (only
	// possible after a power cut with NoSync, or by hand). The key file is
	// created.
	ProblemMissingKey ProblemKind = "missing-key"
	// ProblemDuplicateKey is a job whose key file names another existing
	// job. Reported only.
	ProblemDuplicateKey ProblemKind = "duplicate-key"
	// ProblemMisplaced is a record in a state directory that does not match
	// its state. It is moved where it belongs.
	ProblemMisplaced ProblemKind = "misplaced"
	// ProblemDeadWorker is a job in claimed/ whose lease lock is free: its
	// worker is dead. It is recovered (queued again or failed).
	ProblemDeadWorker ProblemKind = "dead-worker"
	// ProblemOrphanLock is a record lock file, locks/<id>.lock, of a job
	// that has no record: its submitter died between creating the lock
	// file and publishing the record, or a prune was interrupted. It is
	// removed, under the lock, if nobody holds the lock.
	ProblemOrphanLock ProblemKind = "orphan-lock"
	// ProblemUnrecoverable is a job in claimed/ that recovery could not
	// handle: its lease lock file cannot be opened (a symbolic link, a
	// file of another user), or recovering it failed (a full disk). The
	// other jobs are recovered; this one is tried again on every pass.
	ProblemUnrecoverable ProblemKind = "unrecoverable"
	// ProblemUnsettled is a waiting job whose dependencies have all ended
	// (or one failed, without after_any): the process that ended the last
	// of them died before it settled the job. It is settled: queued, or
	// canceled with a LastError naming the dependency.
	ProblemUnsettled ProblemKind = "unsettled"
	// ProblemDanglingDependency is a waiting job that names a job that
	// does not exist (pruned or deleted meanwhile, or removed by hand).
	// Without after_any it is canceled when settled; with it, the missing
	// job counts as ended.
	ProblemDanglingDependency ProblemKind = "dangling-dependency"
)

// Problem is one finding of Fsck.
type Problem struct {
	// Kind classifies the problem.
	Kind ProblemKind
	// Path is the file concerned.
	Path string
	// ID is the job concerned, if known.
	ID string
	// Detail says what is wrong, for a person.
	Detail string
	// Repaired is true if Fsck (with repair) fixed it.
	Repaired bool
}

// String describes the problem in one line, for logs and the CLI.
func (p Problem) String() string {
	s := fmt.Sprintf("%s: %s: %s", p.Kind, p.Path, p.Detail)
	if p.Repaired {
		s += " (repaired)"
	}
	return s
}

// Report is the result of Fsck.
type Report struct {
	// Records counts the job records read.
	Records int
	// Problems lists what Fsck found.
	Problems []Problem
}

// OK reports whether Fsck found nothing wrong, or repaired everything it
// found.
func (r Report) OK() bool {
	for _, p := range r.Problems {
		if !p.Repaired {
			return false
		}
	}
	return true
}

// Fsck checks the whole store: every record, key file and temp file. With
// repair it fixes what a crash can leave behind (the same repairs Open
// makes) plus misplaced records and missing key files; corrupt records and
// unexpected files are only reported, with their paths. Unknown entries at
// the top level of the directory (such as logs/) are not the store's and
// are ignored. It is safe to run while other processes use the store.
func (s *Store) Fsck(ctx context.Context, repair bool) (Report, error) {
	if err := s.enter(ctx, "fsck"); err != nil {
		return Report{}, err
	}
	r, err := s.check(ctx, repair, true)
	if err != nil {
		return r, fmt.Errorf("filestore: fsck: %w", err)
	}
	return r, nil
}

// Repair makes the repairs of what crashes leave behind: it removes the
// stale copies an interrupted move left, rolls back dangling key files,
// sets aside torn key files (and the records that are the same file),
// removes the lock files of jobs that have no record, settles the waiting
// jobs whose dependencies decide them, and recovers dead workers' jobs. It
// reads every key file and lists every state directory, so its cost grows
// with the store; it reads only the records found in two directories and
// those of the jobs that the dependency indexes name (Fsck reads every
// one, and also finds a waiting job whose index entries are gone).
//
// Open does none of this but the recovery of dead workers' jobs, so that
// opening costs nothing that grows with the store. Nothing needs it
// first: a read takes the newest of two copies, and a Submit sets aside a
// torn or dangling key file it meets. Each Store makes these repairs once
// in the background, at its first recovery pass a second or more after
// Open (see Options.RecoverInterval), and logs each one; Repair is for a
// program that wants them made, and reported, now. It is safe to run
// while other processes use the store.
func (s *Store) Repair(ctx context.Context) (Report, error) {
	if err := s.enter(ctx, "repair"); err != nil {
		return Report{}, err
	}
	r, err := s.check(ctx, true, false)
	if err != nil {
		return r, fmt.Errorf("filestore: repair: %w", err)
	}
	return r, nil
}

// repairDelay is how long after Open a Store first makes the repairs of
// Repair in the background: a command that opens the store for one
// operation is done by then, and never pays for them.
const repairDelay = time.Second

// repairInBackground is the background pass of Repair: its findings are
// logged, a full disk postpones it (what is there stays readable, and a
// dead worker's job is still recovered every RecoverInterval), and it
// reports whether it is done.
func (s *Store) repairInBackground(ctx context.Context) bool {
	r, err := s.check(ctx, true, false)
	for _, p := range r.Problems {
		s.log.Warn("filestore: repair: "+p.String(), "id", p.ID)
	}
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil:
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		s.log.Warn("filestore: repair postponed, the disk is full", "err", err)
	default:
		s.log.Warn("filestore: repair", "err", err)
	}
	return false
}

// recoverAtOpen is the Open step that recovers the jobs of dead workers:
// its cost grows with the jobs running, not with the store.
func (s *Store) recoverAtOpen(ctx context.Context) error {
	probs, err := s.recoverDead(ctx, true)
	for _, p := range probs {
		s.log.Warn("filestore: open: "+p.String(), "id", p.ID)
	}
	return err
}

// check is Fsck; with full unset it skips reading every record.
func (s *Store) check(ctx context.Context, repair, full bool) (Report, error) {
	var r Report
	add := func(p Problem) { r.Problems = append(r.Problems, p) }
	// At Open, a record lock that stays busy (a stopped process holds it)
	// must not stall the Open: its job is left for later. Fsck waits.
	var pat *patience
	if !full {
		pat = newPatience()
	}
	if full {
		tmps, err := s.sweep(repair)
		if err != nil {
			return r, err
		}
		for _, p := range tmps {
			add(Problem{Kind: ProblemTempFile, Path: p, Detail: "left by a writer that is gone", Repaired: repair})
		}
	}
	torn, err := s.checkKeys(ctx, repair, pat, &r)
	if err != nil {
		return r, err
	}
	where := make(map[string][]string)
	var ids []string
	for _, d := range stateDirs {
		dirIDs, bad, err := s.listDir(d)
		if err != nil {
			return r, err
		}
		for _, e := range bad {
			var ce *CorruptError
			if errors.As(e, &ce) {
				add(Problem{Kind: ProblemUnexpected, Path: ce.Path, Detail: ce.Reason})
			}
		}
		for _, id := range dirIDs {
			if where[id] == nil {
				ids = append(ids, id)
			}
			where[id] = append(where[id], d)
		}
	}
	slices.Sort(ids)
	// At Open only the records in two directories are read, and those
	// that are the same file as a torn key file, which are torn too.
	var sameAsTorn map[string]bool
	if !full {
		sameAsTorn = s.sameFiles(torn, where)
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if !full && len(where[id]) < 2 && !sameAsTorn[id] {
			continue
		}
		if err := s.checkRecord(ctx, id, repair, pat, &r); err != nil {
			return r, err
		}
	}
	// A torn key file goes after its record, as a key file always does
	// (see Prune).
	for _, k := range torn {
		p := Problem{Kind: ProblemTornRecord, Path: k.path, Detail: k.reason + ": left by a crash before its submit was acknowledged; it refuses its key"}
		if repair {
			// One that cannot be moved (a read-only or full disk) is
			// reported, and the check goes on.
			if err := s.setAsideTornKey(ctx, k.path, k.ino); err != nil {
				p.Detail += "; cannot set it aside: " + err.Error()
			} else {
				p.Repaired = true
				p.Detail += "; set aside in " + dirQuarantine + "/" + dirKeys + "/"
			}
		}
		r.Problems = append(r.Problems, p)
	}
	if err := s.checkLockFiles(ctx, repair, where, &r); err != nil {
		return r, err
	}
	s.checkRangeFile(repair, &r)
	waiters := ids
	if !full {
		// At Open only the jobs that the dependency indexes name can be
		// waiting: reading every queued record would cost the Store a
		// pass that grows with the backlog.
		if waiters, err = s.indexedWaiters(); err != nil {
			return r, err
		}
	}
	if err := s.checkWaiting(ctx, repair, waiters, where, &r); err != nil {
		return r, err
	}
	dead, err := s.recoverDead(ctx, repair)
	r.Problems = append(r.Problems, dead...)
	return r, err
}

// orphanLockAge is how old a record lock file without a record must be
// before Open or Fsck takes it for a dead submitter's: a submit makes the
// file a moment before it locks it, and processes starting together on
// one store would otherwise remove one another's (the submit starts over,
// see Deleted lock files in docs/format.md) and warn of it. A younger one
// is an empty file left for a later check.
const orphanLockAge = time.Minute

// checkLockFiles reports, and with repair removes, the record lock files
// in locks/ of jobs that have no record in any state directory (listed
// holds the state directories of each job found). A lock file is looked at
// only if its exclusive lock can be taken without waiting: a submitter
// holds it from before its record exists until the record is durable, so
// a submit under way is never disturbed. Removing the file under the lock
// is what a change of a job that is gone does (see dropLockIfGone): whoever
// opened it before finds, once it has the lock, that the path names no
// file any more, and starts over with a new one. A file younger than
// orphanLockAge is left alone.
func (s *Store) checkLockFiles(ctx context.Context, repair bool, listed map[string][]string, r *Report) error {
	names, err := readNames(filepath.Join(s.dir, dirLocks))
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		id, ok := strings.CutSuffix(name, recordLock)
		if !ok || name == migrateLockName || jobstore.ValidateID(id) != nil || len(listed[id]) > 0 {
			continue
		}
		if n, ok := strings.CutPrefix(id, "rec-"); ok && isDigits(n) {
			continue // a format 2 lock file, left alone (see docs/format.md)
		}
		p := s.lockPath(id)
		if fi, err := os.Lstat(p); err != nil || time.Since(fi.ModTime()) < orphanLockAge {
			continue
		}
		unlock, ok, err := tryLockRecord(p, true, false, s.filePerm)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !ok {
			continue // gone meanwhile, or in use
		}
		if err != nil {
			r.Problems = append(r.Problems, Problem{Kind: ProblemCorrupt, Path: p, ID: id, Detail: err.Error()})
			continue
		}
		if s.hasRecord(id) {
			unlock()
			continue // submitted meanwhile
		}
		pr := Problem{Kind: ProblemOrphanLock, Path: p, ID: id, Detail: fmt.Sprintf("job %s has no record", id)}
		if repair {
			if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				unlock()
				return err
			}
			pr.Repaired = true
		}
		unlock()
		r.Problems = append(r.Problems, pr)
	}
	return nil
}

// checkRangeFile reports, and with repair removes, anything but a regular
// file at locks/records.lock or locks/leases.lock in a store with range
// locks: while it is there no job can be changed, or no job claimed. The
// next lock after the repair makes the file again.
func (s *Store) checkRangeFile(repair bool, r *Report) {
	if s.ranges == nil {
		return
	}
	for _, f := range []struct{ name, what string }{
		{recordLocksName, "the record lock file is not a regular file (%s): no job can be changed until it is removed"},
		{leasesName, "the lease lock file is not a regular file (%s): no job can be claimed until it is removed"},
	} {
		p := s.locksPath(f.name)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().IsRegular() {
			continue // missing: made again by the next lock
		}
		pr := Problem{Kind: ProblemCorrupt, Path: p, Detail: fmt.Sprintf(f.what, fi.Mode().Type())}
		if repair {
			if err := s.fs.Remove(p); err != nil {
				pr.Detail += "; cannot remove it: " + err.Error()
			} else {
				pr.Repaired = true
			}
		}
		r.Problems = append(r.Problems, pr)
	}
}

// hasRecord reports whether any state directory holds a file of job id.
func (s *Store) hasRecord(id string) bool {
	for _, d := range stateDirs {
		if _, err := os.Lstat(s.recordPath(d, id)); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// isDigits reports whether n is one or more decimal digits.
func isDigits(n string) bool {
	return n != "" && strings.Trim(n, "0123456789") == ""
}

// checkRecord checks the copies of one job's record and its key file.
func (s *Store) checkRecord(ctx context.Context, id string, repair bool, pat *patience, r *Report) error {
	unlock, ok, err := pat.lock(ctx, func(ctx context.Context) (func(), error) { return s.lockFor(ctx, id, repair) })
	if err == nil && !ok {
		s.log.Info("filestore: open: a record lock is held by another process; its check is left for later", "id", id)
		return nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// One lock file that cannot be opened (a planted link, a wrong
		// owner) is reported; the check goes on with the other jobs.
		r.Problems = append(r.Problems, Problem{Kind: ProblemCorrupt, Path: s.recordLockPath(id), ID: id, Detail: err.Error()})
		return nil
	}
	defer unlock()
	if fi, err := os.Lstat(s.leasePath(id)); err == nil && !fi.Mode().IsRegular() {
		detail := fmt.Sprintf("lease lock is not a regular file (%s): the job cannot be claimed", fi.Mode().Type())
		if s.ranges != nil {
			// The lease is a byte of leases.lock; the file only ever holds
			// a claim note, which a claim replaces whole.
			detail = fmt.Sprintf("the job's lease file, where a claim note may be kept, is not a regular file (%s); remove it", fi.Mode().Type())
		}
		r.Problems = append(r.Problems, Problem{Kind: ProblemCorrupt, Path: s.leasePath(id), ID: id, Detail: detail})
	}
	f, err := s.locate(id)
	if err != nil {
		return err
	}
	for _, e := range f.corrupt {
		var ce *CorruptError
		if !errors.As(e, &ce) {
			continue
		}
		if !ce.torn {
			r.Problems = append(r.Problems, Problem{Kind: ProblemCorrupt, Path: ce.Path, ID: id, Detail: ce.Reason})
			continue
		}
		p := Problem{Kind: ProblemTornRecord, Path: ce.Path, ID: id, Detail: ce.Reason + ": left by a crash before its change was acknowledged"}
		if f.ok {
			p.Detail += fmt.Sprintf("; the job's record in %s/ stands", f.rec.dir)
		} else {
			p.Detail += "; the job has no other record"
		}
		if repair {
			// Under the exclusive record lock (lockFor with repair): no
			// writer of this job is at work.
			dir := filepath.Base(filepath.Dir(ce.Path))
			if _, err := s.quarantine(ce.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				p.Detail += "; cannot set it aside: " + err.Error()
			} else {
				p.Repaired = true
				p.Detail += "; set aside in " + dirQuarantine + "/" + dir + "/"
			}
		}
		r.Problems = append(r.Problems, p)
	}
	if !f.ok {
		return nil
	}
	r.Records++
	for _, p := range f.stale {
		r.Problems = append(r.Problems, Problem{Kind: ProblemStaleCopy, Path: p, ID: id,
			Detail: fmt.Sprintf("older copy; %s/ has revision %d", f.rec.dir, f.rec.Rev), Repaired: repair})
	}
	if repair {
		s.removeStale(f)
	}
	rec := f.rec
	if want := dirOf(rec.Job.State); rec.dir != want && rec.dir != dirClaimed {
		// A record in claimed/ that is not running is recovery's to move,
		// once its lease is free.
		p := Problem{Kind: ProblemMisplaced, Path: rec.recordPathIn(s), ID: id,
			Detail: fmt.Sprintf("a %s job belongs in %s/", rec.Job.State, want)}
		if repair {
			if err := s.fs.Rename(rec.recordPathIn(s), s.recordPath(want, id)); err != nil {
				return err
			}
			if err := s.durable.dir(want); err != nil {
				return err
			}
			p.Repaired = true
			s.setCand(rec.Job)
		}
		r.Problems = append(r.Problems, p)
	}
	if rec.Job.Key == "" {
		return nil
	}
	hash := keyName(rec.Job.Key)
	kp := s.keyPath(hash)
	env, err := s.readKeyFile(kp)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p := Problem{Kind: ProblemMissingKey, Path: kp, ID: id, Detail: fmt.Sprintf("job %s has key %q but no key file", id, rec.Job.Key)}
		if repair {
			if err := s.relinkKey(rec, kp); err != nil {
				return err
			}
			p.Repaired = true
		}
		r.Problems = append(r.Problems, p)
	case err != nil:
		// checkKeys reported it.
	case env.Job.ID != id:
		r.Problems = append(r.Problems, Problem{Kind: ProblemDuplicateKey, Path: kp, ID: id,
			Detail: fmt.Sprintf("job %s has key %q, which belongs to job %s", id, rec.Job.Key, env.Job.ID)})
	}
	return nil
}

// relinkKey publishes a key file for rec, as Submit would have.
func (s *Store) relinkKey(rec record, kp string) error {
	data, err := encodeRecord(rec.envelope)
	if err != nil {
		return err
	}
	tmp, err := s.fs.WriteTemp(s.tmpDir, data, s.filePerm, s.durable.file())
	if err != nil {
		return err
	}
	defer func() { _ = s.fs.Remove(tmp) }()
	if err := s.fs.Link(tmp, kp); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return s.durable.dir(dirKeys)
}

// tornKey is a key file that a crash left torn (ProblemTornRecord).
type tornKey struct {
	path, reason string
	// ino is its inode number; links counts its names, more than one if a
	// record in a state directory is the same file.
	ino   uint64
	links uint64
}

// checkKeys rolls back key files whose job has no record, reports corrupt
// ones and returns the torn ones, for the caller to set aside after their
// records.
func (s *Store) checkKeys(ctx context.Context, repair bool, pat *patience, r *Report) ([]tornKey, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, dirKeys))
	if err != nil {
		return nil, err
	}
	var torn []tornKey
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return torn, err
		}
		name := e.Name()
		kp := filepath.Join(s.dir, dirKeys, name)
		hash, ok := strings.CutSuffix(name, recordExt)
		if !ok || len(hash) != 64 {
			if !strings.HasPrefix(name, ".") {
				r.Problems = append(r.Problems, Problem{Kind: ProblemUnexpected, Path: kp, Detail: "unexpected file name (want <sha256 hex>.json)"})
			}
			continue
		}
		env, ino, err := s.readKeyFileIno(kp)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var ce *CorruptError
		if errors.As(err, &ce) && ce.torn {
			k := tornKey{path: kp, reason: ce.Reason, ino: ino}
			if fi, err := os.Lstat(kp); err == nil {
				k.links = links(fi)
			}
			torn = append(torn, k)
			continue
		}
		if errors.As(err, &ce) {
			r.Problems = append(r.Problems, Problem{Kind: ProblemCorrupt, Path: kp, Detail: ce.Reason})
			continue
		}
		if err != nil {
			return torn, err
		}
		id := env.Job.ID
		if keyName(env.Job.Key) != hash {
			r.Problems = append(r.Problems, Problem{Kind: ProblemCorrupt, Path: kp, ID: id, Detail: "key file name does not match its key"})
			continue
		}
		// Cheap test first: a record in any state directory means the key
		// file is in use.
		exists := false
		for _, d := range stateDirs {
			if _, err := os.Lstat(s.recordPath(d, id)); err == nil {
				exists = true
				break
			}
		}
		if exists {
			continue
		}
		if err := s.checkDangling(ctx, hash, id, repair, pat, r); err != nil {
			return torn, err
		}
	}
	return torn, nil
}

// sameFiles returns the IDs of the records, among those where lists, that
// are the same file as one of the torn key files: a key file is a hard
// link of its job's first record. It looks only if a torn key file has
// another name.
func (s *Store) sameFiles(torn []tornKey, where map[string][]string) map[string]bool {
	inos := make(map[uint64]bool)
	for _, k := range torn {
		if k.links > 1 && k.ino != 0 {
			inos[k.ino] = true
		}
	}
	same := make(map[string]bool)
	if len(inos) == 0 {
		return same
	}
	for id, dirs := range where {
		for _, d := range dirs {
			if fi, err := os.Lstat(s.recordPath(d, id)); err == nil && inos[inode(fi)] {
				same[id] = true
			}
		}
	}
	return same
}

// dirQuarantine holds, under the name of the directory each came from,
// the files repair set aside rather than delete (ProblemTornRecord).
const dirQuarantine = "quarantine"

// quarantine moves the file at p into quarantine/<the directory it is
// in>/, creating that if need be, and returns its new path. A file of that
// name already there is kept, and this one gets a numbered name (<name>.1,
// ...). The move is not fsynced: lost in a power cut, it is made again by
// the next repair.
func (s *Store) quarantine(p string) (string, error) {
	q, err := s.quarantineDir(filepath.Base(filepath.Dir(p)))
	if err != nil {
		return "", err
	}
	// Linked, not renamed over: a file set aside before under the same
	// name (a torn key file of the same key, after another cut) stays.
	base := filepath.Join(q, filepath.Base(p))
	to := base
	for n := 1; ; n++ {
		err := s.fs.Link(p, to)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n > 100 {
			return "", err
		}
		to = base + "." + strconv.Itoa(n)
	}
	if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return to, nil
}

// quarantineDir makes quarantine/<dir> if it is missing and returns it.
func (s *Store) quarantineDir(dir string) (string, error) {
	q := filepath.Join(s.dir, dirQuarantine)
	if err := s.fs.Mkdir(q, s.dirPerm); err != nil {
		return "", err
	}
	q = filepath.Join(q, dir)
	if err := s.fs.Mkdir(q, s.dirPerm); err != nil {
		return "", err
	}
	return q, nil
}

func (s *Store) checkDangling(ctx context.Context, hash, id string, repair bool, pat *patience, r *Report) error {
	// Exclusive even without repair: a submitter holds it until its record
	// is published, so this waits instead of reporting a submit in flight.
	// A key file left for later is rolled back by the next submit of its
	// key (see resolveKey) or by fsck.
	unlock, ok, err := pat.lock(ctx, func(ctx context.Context) (func(), error) {
		return s.lockJob(ctx, id)
	})
	if err != nil {
		return err
	}
	if !ok {
		s.log.Info("filestore: open: a key file's record lock is held by another process; its check is left for later", "id", id)
		return nil
	}
	defer unlock()
	f, err := s.locate(id)
	if err != nil {
		return err
	}
	if f.ok || len(f.corrupt) > 0 {
		return nil
	}
	p := Problem{Kind: ProblemDanglingKey, Path: s.keyPath(hash), ID: id, Detail: fmt.Sprintf("job %s was never published or was pruned", id)}
	if repair {
		if err := s.removeKeyFile(hash, id); err != nil {
			return err
		}
		p.Repaired = true
	}
	r.Problems = append(r.Problems, p)
	return nil
}

// indexedWaiters returns the IDs of the jobs that the dependency indexes
// name as waiting for another job or for a batch: the entries of
// dependents/*/ and batches/*/callbacks/, sorted, without repeats. Every
// waiting job is among them, as its entries are durable before its record
// is published (docs/format.md, Dependencies and batches); the entries of
// jobs that ended, or were never published, are among them too.
func (s *Store) indexedWaiters() ([]string, error) {
	var ids []string
	for _, idx := range []struct{ dir, sub string }{{dirDependents, ""}, {dirBatches, batchCalls}} {
		names, err := readNames(filepath.Join(s.dir, idx.dir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s/: %w", idx.dir, err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, ".") || strings.HasSuffix(n, recordLock) {
				continue
			}
			dir := filepath.Join(s.dir, idx.dir, n, idx.sub)
			got, err := readIDs(dir)
			if err != nil && !errors.Is(err, syscall.ENOTDIR) {
				return nil, fmt.Errorf("read %s: %w", dir, err)
			}
			ids = append(ids, got...)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// checkWaiting reports, and with repair settles, the waiting jobs in
// queued/ (of ids, found in the state directories where says) whose
// dependencies decide them, and those that name a job that does not exist.
func (s *Store) checkWaiting(ctx context.Context, repair bool, ids []string, where map[string][]string, r *Report) error {
	lookup := s.depLookup(ctx)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !slices.Contains(where[id], dirQueued) {
			continue
		}
		p := s.recordPath(dirQueued, id)
		env, err := s.readRecord(p, id)
		if err != nil || env.Job.State != jobstore.StateWaiting {
			continue
		}
		if repair {
			s.noteWaiting(id, true)
		}
		var dangling []Problem
		for _, d := range env.Job.After {
			if _, ok, err := lookup(d); err == nil && !ok {
				dangling = append(dangling, Problem{Kind: ProblemDanglingDependency, ID: id, Path: p,
					Detail: "waits for job " + d + ", which does not exist"})
			}
		}
		settled, changed, err := storekit.Settle(env.Job, "", lookup, time.Now())
		if err == nil && changed {
			prob := Problem{Kind: ProblemUnsettled, ID: id, Path: p,
				Detail: fmt.Sprintf("waits, but its dependencies make it %s", settled.State)}
			if repair {
				s.settle(ctx, id, "", s.lockJob)
				if j, err := s.get(ctx, id); err == nil && j.State != jobstore.StateWaiting {
					prob.Repaired = true
					for i := range dangling {
						dangling[i].Repaired = true
					}
				}
			}
			r.Problems = append(r.Problems, prob)
		}
		r.Problems = append(r.Problems, dangling...)
	}
	return nil
}
