package filestore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// The state directories. A record lives in the directory of its state
// group; moving it between them is a rename.
const (
	dirQueued  = "queued"
	dirClaimed = "claimed"
	dirDone    = "done"
	dirKeys    = "keys"
	dirLocks   = "locks"
	dirTmp     = "tmp"
	formatFile = "FORMAT"
	recordExt  = ".json"
	recordLock = ".lock"
	leaseLock  = ".lease"
)

// stateDirs lists the state directories in the order a tie of revisions is
// broken: the later one wins, because every move goes forward from queued
// through claimed to done (or back to queued with a higher rev).
var stateDirs = []string{dirQueued, dirClaimed, dirDone}

// dirOf returns the state directory a job in state st belongs in.
func dirOf(st jobstore.State) string {
	switch {
	case st == jobstore.StateQueued || st == jobstore.StateWaiting:
		return dirQueued
	case st == jobstore.StateRunning:
		return dirClaimed
	default:
		return dirDone
	}
}

// envelope is the on-disk record: the job plus what the store needs to
// order versions of it.
type envelope struct {
	// Format is the record format, FormatVersion.
	Format int `json:"format"`
	// Rev counts the writes of this job's record, starting at 1. When a
	// crash leaves copies of a record in two state directories, the higher
	// Rev is the truth.
	Rev int64 `json:"rev"`
	// Job is the job.
	Job jobstore.Job `json:"job"`
	// Logged names the submission journal's entry of a journaled submit
	// (journalRef.String), kept by every later revision: the job may be
	// deleted only once that entry is covered (journal.go).
	Logged string `json:"logged,omitempty"`
}

// record is an envelope and the directory it was read from.
type record struct {
	envelope
	dir string
}

// CorruptError reports a file in the store that is not a valid record. It
// unwraps to jobstore.ErrCorrupt.
type CorruptError struct {
	// Path is the file's path.
	Path string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, if one caused the problem (such as
	// fs.ErrPermission for a file this process may not read).
	Err error
	// torn says the file is what a crash of the machine leaves of a write
	// that never reached the disk: empty, zero bytes, or a record cut
	// short (see ProblemTornRecord).
	torn bool
}

// isTorn reports whether err is a *CorruptError for a torn file.
func isTorn(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce) && ce.torn
}

// Error names the file and says what is wrong with it.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("filestore: %s: %s: %s", e.Path, jobstore.ErrCorrupt, e.Reason)
}

// Unwrap returns jobstore.ErrCorrupt, and Err if it is set.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{jobstore.ErrCorrupt, e.Err}
	}
	return []error{jobstore.ErrCorrupt}
}

// idFromName returns the job ID of a record file name, or false if the name
// is not <id>.json with a valid ID.
func idFromName(name string) (string, bool) {
	id, ok := strings.CutSuffix(name, recordExt)
	if !ok || jobstore.ValidateID(id) != nil {
		return "", false
	}
	return id, true
}

func (s *Store) recordPath(dir, id string) string {
	if p, ok := s.sub[dir]; ok {
		return p + id + recordExt
	}
	return filepath.Join(s.dir, dir, id+recordExt)
}

// lockPath returns the path of job id's record lock file: one per job, so
// that a process stopped while it holds one delays only that job. It is
// made when the job is submitted (or by the first change of a job from an
// older format) and removed once the job has no record (see dropLockIfGone).
func (s *Store) lockPath(id string) string  { return s.locksPath(id + recordLock) }
func (s *Store) leasePath(id string) string { return s.locksPath(id + leaseLock) }

// locksPath returns the path of the file name in locks/.
func (s *Store) locksPath(name string) string {
	if p, ok := s.sub[dirLocks]; ok {
		return p + name
	}
	return filepath.Join(s.dir, dirLocks, name)
}

// maxRecord bounds how much of a file is read as a record: a payload and a
// result at the limit, the longest error, the most dependencies a job may
// name (a batch's callback names every job of its batch), and room for the
// other fields.
func (s *Store) maxRecord() int64 {
	return 2*int64(s.opts.MaxPayload) + jobstore.MaxErrorLen + jobstore.MaxAfter*(26+3) + 64<<10
}

// readRecord reads and checks the record at path, which must hold job id
// (empty: any). It returns an error matching fs.ErrNotExist if there is no
// file, and a *CorruptError for anything that is not a valid record:
// symbolic links and directories are reported, never followed.
func (s *Store) readRecord(path, id string) (envelope, error) {
	data, typ, err := readRegular(path, s.maxRecord())
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return envelope{}, &CorruptError{Path: path, Reason: "is a symbolic link (not followed)"}
		}
		if errors.Is(err, fs.ErrPermission) {
			// One file with the wrong owner (say, written by root) must not
			// stop List, Claim or Fsck: it is reported and skipped like any
			// record that cannot be read.
			return envelope{}, &CorruptError{Path: path, Reason: "cannot be read: permission denied (check its owner and mode)", Err: err}
		}
		if pe, ok := errors.AsType[*fs.PathError](err); ok && pe.Op == "read" {
			return envelope{}, fmt.Errorf("filestore: %w", err)
		}
		return envelope{}, err
	}
	if typ != 0 {
		return envelope{}, &CorruptError{Path: path, Reason: fmt.Sprintf("is not a regular file (%s)", typ)}
	}
	return decodeRecord(path, id, data, s.maxRecord())
}

// decodeRecord parses and checks one record file's contents.
func decodeRecord(path, id string, data []byte, limit int64) (envelope, error) {
	var env envelope
	corrupt := func(format string, a ...any) (envelope, error) {
		return envelope{}, &CorruptError{Path: path, Reason: fmt.Sprintf(format, a...)}
	}
	if int64(len(data)) > limit {
		return corrupt("larger than %d bytes", limit)
	}
	if len(data) == 0 {
		return envelope{}, &CorruptError{Path: path, Reason: "empty file", torn: true}
	}
	if err := json.Unmarshal(data, &env); err != nil {
		if why := tornReason(data); why != "" {
			return envelope{}, &CorruptError{Path: path, Reason: why, torn: true}
		}
		return corrupt("not a record: %v", err)
	}
	switch {
	case env.Format == 0:
		return corrupt("no format version")
	case env.Format > FormatVersion:
		return corrupt("record format %d is newer than this program's %d", env.Format, FormatVersion)
	case env.Rev < 1:
		return corrupt("bad revision %d", env.Rev)
	case jobstore.ValidateID(env.Job.ID) != nil:
		return corrupt("bad job id %q", env.Job.ID)
	case id != "" && env.Job.ID != id:
		return corrupt("holds job %s, not %s", env.Job.ID, id)
	case !env.Job.State.Valid():
		return corrupt("unknown state %q", env.Job.State)
	case env.Job.Queue != "" && jobstore.ValidateQueue(env.Job.Queue) != nil:
		return corrupt("bad queue name %q", env.Job.Queue)
	case env.Job.Partition != "" && jobstore.ValidatePartition(env.Job.Partition) != nil:
		return corrupt("bad partition %q", env.Job.Partition)
	}
	// A record of format 3 or older has no queue: its job is in the
	// default queue.
	env.Job.Queue = jobstore.QueueOf(env.Job.Queue)
	return env, nil
}

// tornReason says how data, which is not a record, is what a crash of the
// machine leaves of one whose write did not reach the disk: only zero bytes
// (blocks allocated but never written), or a record cut short, perhaps
// followed by zero bytes. It returns "" for anything else.
func tornReason(data []byte) string {
	rest := bytes.TrimRight(data, "\x00")
	if len(rest) == 0 {
		return "only zero bytes"
	}
	var v json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(rest)).Decode(&v); errors.Is(err, io.ErrUnexpectedEOF) && rest[0] == '{' {
		return fmt.Sprintf("cut short after %d bytes", len(rest))
	}
	return ""
}

// encodeRecord returns the file contents of env.
func encodeRecord(env envelope) ([]byte, error) {
	env.Format = FormatVersion
	data, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("filestore: encode job %s: %w", env.Job.ID, err)
	}
	return append(data, '\n'), nil
}

// claimNote is what a claim writes, without fsync, just before it renames
// the record from queued/ into claimed/: the record itself is not
// rewritten (docs/format.md, Claim). A record in claimed/ that still says
// queued is running as the note says if the note names its revision;
// otherwise its claim was interrupted. The note is an extended attribute
// of the record (claimNoteXattr) where the store has range locks (format
// 8 on Linux) and the file system keeps extended attributes, else JSON in
// the job's lease file.
type claimNote struct {
	// Rev is the revision of the record the claim moved.
	Rev int64 `json:"rev"`
	// Worker is the claimant.
	Worker string `json:"worker"`
	// ClaimedAt is when the claim was made.
	ClaimedAt time.Time `json:"claimed_at"`
}

// maxClaimNote bounds how much of a lease file is read as a claim note.
const maxClaimNote = 4 << 10

// claimNoteXattr is the extended attribute of a record that holds the
// note of its claim (encodeClaimNote), in a store of format 8 on Linux.
const claimNoteXattr = "user.jobdir.claim"

// claimNoteVersion is the first byte of a note in claimNoteXattr.
const claimNoteVersion = 1

// encodeClaimNote returns n as the value of claimNoteXattr: the version
// byte, the revision (uvarint), the claim's time (Unix nanoseconds, 8
// bytes big-endian) and the worker name. Small, so that ext4 keeps it in
// the record's inode (with 256-byte inodes, up to 60 bytes for this name,
// so worker names up to about 49 bytes) and a claim writes no block of
// its own; a longer one takes a block.
func encodeClaimNote(n claimNote) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+8+len(n.Worker))
	b = append(b, claimNoteVersion)
	b = binary.AppendUvarint(b, uint64(n.Rev))
	b = binary.BigEndian.AppendUint64(b, uint64(n.ClaimedAt.UnixNano()))
	return append(b, n.Worker...)
}

// decodeClaimNote parses a value of claimNoteXattr; false if it is not a
// valid note.
func decodeClaimNote(b []byte) (claimNote, bool) {
	if len(b) < 1 || b[0] != claimNoteVersion {
		return claimNote{}, false
	}
	rev, k := binary.Uvarint(b[1:])
	if k <= 0 || rev < 1 || rev > math.MaxInt64 {
		return claimNote{}, false
	}
	rest := b[1+k:]
	if len(rest) < 8 {
		return claimNote{}, false
	}
	n := claimNote{Rev: int64(rev), ClaimedAt: time.Unix(0, int64(binary.BigEndian.Uint64(rest))).UTC(), Worker: string(rest[8:])}
	if jobstore.ValidateWorker(n.Worker) != nil {
		return claimNote{}, false
	}
	return n, true
}

// writeClaimNote writes n, the note of a claim of job id whose record is
// in queued/. With range locks it goes into the record's extended
// attribute, unless the file system keeps none (ENOTSUP: then, for the
// rest of the Store's life, into the lease file, made if missing, after
// removing any note on the record, which readers look at first). Any
// other failure fails the claim: a note left in the lease file while an
// older one of the same revision stays on the record (a claim whose rename
// failed) would be read in its place. Without range locks it goes into the
// lease file, which the lease's flock already made, in place.
func (s *Store) writeClaimNote(id string, n claimNote) error {
	if s.ranges != nil && !s.noXattrs.Load() {
		err := s.fs.SetXattr(s.recordPath(dirQueued, id), claimNoteXattr, encodeClaimNote(n))
		if !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		if !s.noXattrs.Swap(true) {
			s.log.Info("filestore: the file system keeps no extended attributes; claim notes go to lease files", "dir", s.dir)
		}
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if s.ranges != nil {
		// A note on the record (there only if the attribute failed for
		// some other reason before) would be read in place of this one.
		qp := s.recordPath(dirQueued, id)
		if err := s.fs.SetXattr(qp, claimNoteXattr, nil); err != nil && !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		// No lease file is locked: make it, or replace it, whole.
		return s.fs.WriteFile(s.leasePath(id), s.tmpDir, data, s.filePerm, false)
	}
	return s.fs.Overwrite(s.leasePath(id), data)
}

// readClaimNote reads the note of the claim of job id, whose record is in
// claimed/: the record's extended attribute, or, only if it has none
// (ENODATA, or ENOTSUP where the file system keeps none), the job's lease
// file (where a claim of format 7, or one on a file system without
// extended attributes, wrote it). It returns false if there is none that
// can be read: no note, a link, garbage. Another error reading the
// attribute is returned: the lease file may hold an older note of the same
// revision, which would name another worker.
func (s *Store) readClaimNote(id string) (claimNote, bool, error) {
	if s.ranges != nil {
		var buf [512]byte
		p := s.recordPath(dirClaimed, id)
		n, err := lgetxattr(p, claimNoteXattr, buf[:])
		switch {
		case err == nil:
			note, ok := decodeClaimNote(buf[:n])
			return note, ok, nil
		case errors.Is(err, syscall.ERANGE):
			return claimNote{}, false, nil // larger than any note
		case errors.Is(err, syscall.ENOENT):
			return claimNote{}, false, nil // moved since it was read
		case !errors.Is(err, syscall.ENODATA) && !errors.Is(err, syscall.ENOTSUP):
			return claimNote{}, false, fmt.Errorf("filestore: read the claim note of %s: %w", p, err)
		}
	}
	data, typ, err := readRegular(s.leasePath(id), maxClaimNote)
	if err != nil || typ != 0 || len(data) == 0 || len(data) > maxClaimNote {
		return claimNote{}, false, nil
	}
	var n claimNote
	if err := json.Unmarshal(data, &n); err != nil || n.Rev < 1 || jobstore.ValidateWorker(n.Worker) != nil {
		return claimNote{}, false, nil
	}
	return n, true, nil
}

// applyClaimNote makes rec, a record in claimed/ that still says queued,
// the running job its claim note describes, if the note is for this
// revision; otherwise rec stays an interrupted claim.
func (s *Store) applyClaimNote(rec *record) error {
	n, ok, err := s.readClaimNote(rec.Job.ID)
	if err != nil || !ok {
		return err
	}
	rec.withNote(n)
	return nil
}

// withNote makes rec, a record in claimed/ that still says queued, the
// running job note n describes, if n is for this revision.
func (rec *record) withNote(n claimNote) {
	if n.Rev != rec.Rev {
		return
	}
	// The job was due when it was claimed; ApplyClaim checks that against
	// the claim's own time.
	if j, err := storekit.ApplyClaim(rec.Job, n.Worker, n.ClaimedAt); err == nil {
		rec.Job = j
	}
}

// heldClaim is what a claim of this process read and wrote: the record it
// moved into claimed/ (as it was in queued/) and the note it set on it.
// Its job shares no memory with a job handed out (Job.Clone).
type heldClaim struct {
	rec  record
	note claimNote
}

// heldRecord returns what readJob(id, true) would: the current record of
// job id, whose lease this process holds as h. The caller holds the
// record lock exclusively.
//
// While the file in claimed/ carries the note h's claim set on it
// (compared byte for byte), it is the file that claim moved there,
// unchanged: no record is ever written in place (every change, a Cancel's
// included, is a new file, which has no note), and only the holder of the
// lease moves a claimed record. Its contents are then the record the claim
// read, with the note applied, and the three state directories are not
// read again; the claim removed the stale copies they may have held.
// Otherwise (no note kept with the claim, a note in the lease file, a
// record changed since) it reads them as readJob does.
func (s *Store) heldRecord(h *leaseHold, id string) (record, error) {
	if c, ok := claimOf(h); ok && s.ranges != nil {
		var buf [512]byte
		n, err := lgetxattr(s.recordPath(dirClaimed, id), claimNoteXattr, buf[:])
		if err == nil && bytes.Equal(buf[:n], encodeClaimNote(c.note)) {
			if note, ok := decodeClaimNote(buf[:n]); ok {
				rec := c.rec
				rec.Job = rec.Job.Clone()
				rec.withNote(note)
				return rec, nil
			}
		}
	}
	return s.readJob(id, true)
}

// found is what locate finds for one job ID.
type found struct {
	// rec is the current record (highest rev); ok is false if none.
	rec record
	ok  bool
	// stale lists the paths of older copies in other state directories.
	stale []string
	// corrupt lists the copies that could not be read.
	corrupt []error
}

// locate reads every copy of job id's record. The caller holds the record
// lock (shared at least), so no operation is half done unless its process
// died.
func (s *Store) locate(id string) (found, error) {
	var f found
	for _, dir := range stateDirs {
		p := s.recordPath(dir, id)
		env, err := s.readRecord(p, id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case errors.Is(err, jobstore.ErrCorrupt):
			f.corrupt = append(f.corrupt, err)
			continue
		case err != nil:
			return f, err
		}
		if f.ok {
			if env.Rev < f.rec.Rev {
				f.stale = append(f.stale, p)
				continue
			}
			f.stale = append(f.stale, s.recordPath(f.rec.dir, id))
		}
		f.rec = record{envelope: env, dir: dir}
		f.ok = true
	}
	if f.ok && f.rec.dir == dirClaimed && f.rec.Job.State == jobstore.StateQueued {
		if err := s.applyClaimNote(&f.rec); err != nil {
			return f, err
		}
	}
	return f, nil
}

// current returns job id's record, or an error wrapping ErrNotFound (or
// ErrCorrupt if the only copies are corrupt).
func (f found) current(id string) (record, error) {
	if f.ok {
		return f.rec, nil
	}
	if len(f.corrupt) > 0 {
		return record{}, f.corrupt[0]
	}
	return record{}, fmt.Errorf("job %s: %w", id, jobstore.ErrNotFound)
}
