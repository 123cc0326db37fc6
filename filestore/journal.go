package filestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// The submission journal (format 8). A new record made durable with an
// fsync of its file and of its directory costs a journal commit of the
// file system: the new inode, the blocks of two directories, the bitmaps,
// a few milliseconds on a busy disk. A submit instead writes its record
// unsynced (as a file without a name where it can, fileOps.WriteNew) and
// appends a copy of it to a journal file that is already allocated and
// written, makes that durable with fdatasync(2) (the data and one cache
// flush, no metadata), and only then names the record in queued/, so
// nobody sees the job before it is durable. The record itself is made
// durable later, with the records of every submit since,
// by one syncfs(2) (a cover). Until then a power cut may take the record,
// and the journal brings it back: whoever next takes the journal (at Open,
// in a recovery pass, or a Store that needs one) writes every record it
// holds beyond its cover that is not on disk (replay).
//
// Journals are files journal/<n>.log, a pool: a Store takes the first it
// can flock (created and written with zeros if need be) at its first
// journaled submit, keeps it for its life, and covers it at Close. A
// journal whose flock is free and which holds entries beyond its cover
// belongs to a Store that ended without its cover (killed, or cut off):
// it is replayed before it is used again.
//
// Its first block is the header: a magic string, the epoch, the cover (the
// offset below which every entry's record is durable) and a CRC-32C. From
// journalHeaderSize on come entries: the payload's length and a CRC-32C
// of the epoch, the length and the payload, the epoch, and the payload,
// the record as its file holds it. A scan stops at the first entry that is
// not whole and of the header's epoch. When the journal is full its Store
// covers it and starts a new epoch from the top (a wrap).
//
// Every record of a journaled submit names its entry (envelope.Logged): a
// job may be pruned or deleted only once its entry is covered, or its
// journal replay would bring it back (journalCovered).
//
// Only SubmitBatch and Submit (from a Store's second on) of jobs without a
// key or dependencies are journaled, and only where a syncfs reaches the
// disk (durability.moves); everything else makes its records durable as
// before.

const (
	journalDirName    = "journal"
	journalHeaderSize = 4096
	journalMagic      = "jobdir-journal1\n"
	// journalMaxSlots bounds the pool: a Store that finds every journal
	// taken submits without one.
	journalMaxSlots = 256
	// journalCoverEvery is how often a Store covers its journal while it
	// has entries beyond its cover, so that its jobs soon become prunable
	// and a replay has little to do (Options.journalCoverEvery in tests).
	journalCoverEvery = 500 * time.Millisecond
)

// journalSize is the size of a new journal file: room for about 40,000
// submits of small jobs between wraps (Options.journalSize in tests).
const journalSize int64 = 16 << 20

// journalRef names the entry of a journaled submit: the journal, its
// epoch and the entry's offset. Fixed width once encoded (ref), so that a
// record can name the entry it is about to be appended as.
type journalRef struct {
	Slot  int
	Epoch uint64
	Off   int64
}

// String encodes r as "<slot>:<epoch>:<offset>", each of fixed width.
func (r journalRef) String() string {
	return fmt.Sprintf("%04d:%016x:%012x", r.Slot, r.Epoch, r.Off)
}

// parseJournalRef decodes journalRef.String.
func parseJournalRef(s string) (journalRef, bool) {
	if len(s) != 4+1+16+1+12 || s[4] != ':' || s[21] != ':' {
		return journalRef{}, false
	}
	slot, err1 := strconv.ParseUint(s[:4], 10, 16)
	epoch, err2 := strconv.ParseUint(s[5:21], 16, 64)
	off, err3 := strconv.ParseUint(s[22:], 16, 48)
	if err1 != nil || err2 != nil || err3 != nil {
		return journalRef{}, false
	}
	return journalRef{Slot: int(slot), Epoch: epoch, Off: int64(off)}, true
}

var journalCRC = crc32.MakeTable(crc32.Castagnoli)

// journalHeader is the first block of a journal.
type journalHeader struct {
	epoch uint64
	cover int64
}

func (h journalHeader) encode() []byte {
	b := make([]byte, 0, 64)
	b = append(b, journalMagic...)
	b = binary.LittleEndian.AppendUint64(b, h.epoch)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.cover))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, journalCRC))
}

func decodeJournalHeader(b []byte, size int64) (journalHeader, bool) {
	n := len(journalMagic)
	if len(b) < n+20 || string(b[:n]) != journalMagic {
		return journalHeader{}, false
	}
	if crc32.Checksum(b[:n+16], journalCRC) != binary.LittleEndian.Uint32(b[n+16:]) {
		return journalHeader{}, false
	}
	h := journalHeader{epoch: binary.LittleEndian.Uint64(b[n:]), cover: int64(binary.LittleEndian.Uint64(b[n+8:]))}
	if h.epoch == 0 || h.cover < journalHeaderSize || h.cover > size {
		return journalHeader{}, false
	}
	return h, true
}

// entrySize is the size of the entry of a payload of n bytes.
func entrySize(n int) int64 { return 16 + int64(n) }

// appendEntry appends the entry of payload, of epoch, to b.
func appendEntry(b []byte, epoch uint64, payload []byte) []byte {
	var head [16]byte
	binary.LittleEndian.PutUint32(head[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(head[4:], entryCRC(epoch, head[0:4], payload))
	binary.LittleEndian.PutUint64(head[8:], epoch)
	return append(append(b, head[:]...), payload...)
}

// entryCRC is the CRC-32C of an entry of epoch: of the epoch, the length
// (as written) and the payload.
func entryCRC(epoch uint64, length, payload []byte) uint32 {
	var e [8]byte
	binary.LittleEndian.PutUint64(e[:], epoch)
	c := crc32.Update(0, journalCRC, e[:])
	c = crc32.Update(c, journalCRC, length)
	return crc32.Update(c, journalCRC, payload)
}

// voidEpoch is what the epoch field of a voided entry holds: the entry's
// epoch with every bit flipped. A scan passes over a voided entry (its CRC
// still checks, against the epoch) and goes on with the next: see
// journal.void.
func voidEpoch(epoch uint64) uint64 { return ^epoch }

// journalEntry is an entry a scan found.
type journalEntry struct {
	off     int64
	payload []byte
}

// scanJournal returns the entries of epoch in data, the journal's bytes
// from journalHeaderSize on, until the first that is not whole and of
// that epoch.
func scanJournal(data []byte, epoch uint64) []journalEntry {
	return scanJournalFrom(data, journalHeaderSize, epoch)
}

// scanJournalFrom is scanJournal of data read from offset base.
func scanJournalFrom(data []byte, base int64, epoch uint64) []journalEntry {
	var out []journalEntry
	for pos := 0; pos+16 <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[pos:]))
		e := binary.LittleEndian.Uint64(data[pos+8:])
		void := e == voidEpoch(epoch)
		if n == 0 || (e != epoch && !void) || pos+16+n > len(data) {
			break
		}
		payload := data[pos+16 : pos+16+n]
		if entryCRC(epoch, data[pos:pos+4], payload) != binary.LittleEndian.Uint32(data[pos+4:]) {
			break
		}
		if !void {
			out = append(out, journalEntry{off: base + int64(pos), payload: payload})
		}
		pos += 16 + n
	}
	return out
}

// journal is the journal a Store holds.
type journal struct {
	s    *Store
	slot int
	path string
	f    *os.File // flocked for the Store's life
	size int64

	// mu is held from the choice of an entry's place until it is written:
	// entries are written in the order of their offsets, so an fdatasync
	// that begins after one is written covers every entry before it, and
	// a scan meets no hole.
	mu    sync.Mutex
	epoch uint64
	off   int64 // the end of the entries written
	cover int64 // the header's cover
	// mark is durability.mark() before the first record beyond the cover
	// was written (math.MaxUint64 if none): the cover's syncfs must be
	// one that may report their writeback errors.
	mark uint64
	// broken, once set, stops the journal's use: a write, fdatasync or
	// cover failed. Guarded by bmu, which is never held while waiting.
	bmu    sync.Mutex
	broken error
	// pending holds the offsets of the first entries of submits (single
	// or batches) whose records are named in queued/ only once their
	// entries are durable: a cover stops below the lowest, since a syncfs
	// before the naming does not make it durable, and a wrap waits for
	// them.
	pending map[int64]bool

	// syncs shares the fdatasyncs of the entries written at one moment.
	syncs *groupSync
	// covering is held by a cover, one at a time.
	covering sync.Mutex
}

// errJournalFull says an entry does not fit in what is left of the
// journal until its next wrap.
var errJournalFull = errors.New("journal full")

// journaling reports whether this Store journals its submits: where new
// records share a syncfs, which a cover needs.
func (s *Store) journaling() bool {
	return !s.opts.noJournal && (s.durable.moves != nil || s.opts.journalAlways && !s.durable.none && s.durable.shared == nil)
}

// journalFor returns the Store's journal, taking one from the pool at the
// first call; nil if it has none (none can be had, or it broke), and then
// submits make their records durable as before.
func (s *Store) journalFor(ctx context.Context) *journal {
	if !s.journaling() {
		return nil
	}
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if s.jr != nil {
		if s.jr.isBroken() {
			return nil
		}
		return s.jr
	}
	if s.jclosed || time.Now().Before(s.jretry) {
		return nil
	}
	jr, err := s.takeJournal(ctx)
	if err != nil {
		s.jretry = time.Now().Add(time.Minute)
		s.log.Warn("filestore: cannot take a submission journal; submits make their records durable one by one for a minute", "err", err)
		return nil
	}
	s.jr = jr
	s.wg.Add(1)
	go s.coverJournal(jr)
	return jr
}

func (j *journal) isBroken() bool { return j.failure() != nil }

// failure returns what broke j, nil if nothing did.
func (j *journal) failure() error {
	j.bmu.Lock()
	defer j.bmu.Unlock()
	return j.broken
}

// fail breaks j with err, unless something broke it before, and returns
// what broke it.
func (j *journal) fail(err error) error {
	j.bmu.Lock()
	defer j.bmu.Unlock()
	if j.broken == nil {
		j.broken = err
	}
	return j.broken
}

// journalPath is the path of journal slot n.
func (s *Store) journalPath(n int) string {
	return filepath.Join(s.dir, journalDirName, strconv.Itoa(n)+".log")
}

// takeJournal takes the first journal of the pool whose flock is free,
// replaying it first if it needs it, or makes a new one.
func (s *Store) takeJournal(ctx context.Context) (*journal, error) {
	dir := filepath.Join(s.dir, journalDirName)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := s.fs.Mkdir(dir, s.dirPerm); err != nil {
			return nil, err
		}
		if err := s.fs.SyncDir(s.dir); err != nil {
			return nil, err
		}
	}
	var errs []error
	for n := range journalMaxSlots {
		j, ok, err := s.openJournal(ctx, n, true)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// One journal that cannot be taken (its replay waits for a
			// record lock, a file planted in its place) is left for the
			// next pass; the next slot may do.
			errs = append(errs, err)
			if len(errs) >= 4 {
				break
			}
			continue
		}
		if ok {
			return j, nil
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return nil, errors.New("every journal is taken")
}

// openJournal takes journal slot n if its flock is free, making it if
// create and it is missing, and replaying it if it holds entries beyond
// its cover. ok is false if another Store holds it (or it is missing and
// not create).
func (s *Store) openJournal(ctx context.Context, n int, create bool) (*journal, bool, error) {
	p := s.journalPath(n)
	flag := os.O_RDWR | noFollow
	if create {
		flag |= os.O_CREATE
	}
	// Through the store's root: neither journal/ nor the file may be a
	// link that leads out of the store.
	var f *os.File
	var err error
	if s.root != nil {
		f, err = s.root.OpenFile(filepath.Join(journalDirName, strconv.Itoa(n)+".log"), flag, s.filePerm)
	} else {
		f, err = os.OpenFile(p, flag, s.filePerm)
	}
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a regular file", p)
	}
	if err == nil && fi.Size() == 0 && fi.Mode().Perm() != s.filePerm.Perm() {
		err = f.Chmod(s.filePerm) // made now: the umask does not narrow it
	}
	if err != nil {
		_ = f.Close()
		return nil, false, err
	}
	if err := flockFile(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	j := &journal{s: s, slot: n, path: p, f: f, size: fi.Size(), mark: math.MaxUint64, syncs: newGroupSync()}
	if err := j.open(ctx, create); err != nil {
		unlockFile(f)
		return nil, false, fmt.Errorf("journal %s: %w", p, err)
	}
	return j, true, nil
}

// journalMaxSize bounds the size of a journal file that is read whole: a
// file planted there must not make every Open read (and allocate) it.
const journalMaxSize = 1 << 30

// open reads j's header and replays what it holds beyond its cover. With
// use (the Store takes j for its own submits) it then starts a new epoch
// in any case, so that no entry of an earlier epoch, written but never
// acknowledged, can follow its own; without (a replay pass) it starts one
// only after a replay. A new file (or one whose header is not valid, as a
// crash while it was made leaves: no entry is written before the header)
// is written with zeros first.
func (j *journal) open(ctx context.Context, use bool) error {
	s := j.s
	if j.size > journalMaxSize {
		return fmt.Errorf("%d bytes: larger than any journal", j.size)
	}
	head := make([]byte, 64)
	var h journalHeader
	ok := false
	if j.size >= journalHeaderSize*2 {
		if _, err := j.f.ReadAt(head, 0); err != nil {
			return err
		}
		h, ok = decodeJournalHeader(head, j.size)
	}
	if !ok {
		if err := j.zero(); err != nil {
			return err
		}
		// Epochs grow: from the clock, so that a journal made again (its
		// file removed, or cut short) does not reuse the epochs of the
		// one before, which records may still name (journalCovered).
		j.epoch, j.off, j.cover = max(1, uint64(time.Now().UnixNano())), journalHeaderSize, journalHeaderSize
		return j.writeHeader()
	}
	j.epoch, j.cover, j.off = h.epoch, h.cover, h.cover
	// Entries follow each other from the top, so one beyond the cover
	// begins at it: if there is none, there is nothing to replay (and
	// nothing to read of a journal of many megabytes).
	first := make([]byte, 16)
	if _, err := j.f.ReadAt(first, h.cover); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if n, e := int64(binary.LittleEndian.Uint32(first)), binary.LittleEndian.Uint64(first[8:]); n != 0 && (e == h.epoch || e == voidEpoch(h.epoch)) && h.cover+16+n <= j.size {
		data := make([]byte, j.size-journalHeaderSize)
		if _, err := j.f.ReadAt(data, journalHeaderSize); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var todo []journalEntry
		for _, e := range scanJournal(data, h.epoch) {
			if e.off >= h.cover {
				todo = append(todo, e)
			}
		}
		if len(todo) > 0 {
			if err := s.replay(ctx, todo); err != nil {
				return err
			}
		}
		use = true // a new epoch, also after voided entries alone
	}
	if !use {
		return nil
	}
	j.epoch++
	j.off, j.cover = journalHeaderSize, journalHeaderSize
	return j.writeHeader()
}

// zero makes j a journal of journalSize bytes, every one written, so that
// an entry overwrites data already on disk and its fdatasync flushes no
// metadata; then durable, with its name.
func (j *journal) zero() error {
	s := j.s
	size := journalSize
	if s.opts.journalSize > 0 {
		size = s.opts.journalSize
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if err := s.fs.JournalWrite(j.f, buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return err
		}
	}
	j.size = size
	if err := s.fs.SyncFile(j.path); err != nil {
		return err
	}
	return s.fs.SyncDir(filepath.Dir(j.path))
}

// writeHeader writes j's header (its epoch and cover) and makes it
// durable.
func (j *journal) writeHeader() error {
	s := j.s
	if err := s.fs.JournalWrite(j.f, journalHeader{epoch: j.epoch, cover: j.cover}.encode(), 0); err != nil {
		return err
	}
	return j.fdatasync()
}

// fdatasync makes what was written into j durable, through the shared
// fdatasync of its entries. A failure breaks j for good, before anyone
// else's fdatasync can begin: the kernel reports a write error once per
// open file, so an fdatasync after a failed one may succeed with an
// entry's data lost, and every caller after a failure must fail too.
func (j *journal) fdatasync() error {
	if err := j.syncs.sync(func() error {
		if err := j.s.fs.JournalSync(j.f); err != nil {
			return j.fail(err)
		}
		return nil
	}); err != nil {
		return err
	}
	return j.failure()
}

// append appends size bytes of entries, whose payloads write returns,
// given the reference of the first entry, under j.mu: write writes the
// jobs' records as new files, to be named in queued/ once the entries are
// durable, and returns one payload per job, together size bytes of
// entries. It returns once the entries are durable; errJournalFull if
// they do not fit before the journal's next wrap. at is the offset of the
// first entry once the entries are reserved (their write was tried), -1
// before: from then they are pending until the caller calls published,
// and only then may it void them.
func (j *journal) append(size int64, write func(ref journalRef) ([][]byte, error)) (at int64, err error) {
	j.mu.Lock()
	if err := j.failure(); err != nil {
		j.mu.Unlock()
		return -1, err
	}
	if j.off+size > j.size {
		j.mu.Unlock()
		return -1, errJournalFull
	}
	ref := journalRef{Slot: j.slot, Epoch: j.epoch, Off: j.off}
	if j.mark == math.MaxUint64 {
		j.mark = j.s.durable.mark()
	}
	payloads, err := write(ref)
	if err != nil {
		j.mu.Unlock()
		return -1, err
	}
	buf := make([]byte, 0, size)
	for _, p := range payloads {
		buf = appendEntry(buf, j.epoch, p)
	}
	if int64(len(buf)) != size {
		j.mu.Unlock()
		return -1, fmt.Errorf("journal: entries of %d bytes, not the %d reserved", len(buf), size)
	}
	// Pending from now on, until the caller calls published: even if the
	// write fails, part of it may be on disk.
	if j.pending == nil {
		j.pending = map[int64]bool{}
	}
	j.pending[ref.Off] = true
	if err := j.s.fs.JournalWrite(j.f, buf, j.off); err != nil {
		j.mu.Unlock()
		return ref.Off, j.fail(err)
	}
	j.off += size
	j.mu.Unlock()
	return ref.Off, j.fdatasync()
}

// published notes that the records of the submit whose entries begin at
// off (append's at) are named in place (or dropped, or taken back): a
// cover may go beyond them.
func (j *journal) published(off int64) {
	j.mu.Lock()
	delete(j.pending, off)
	j.mu.Unlock()
}

// coverEnd is where a cover may end: the end of the entries, or the first
// entry of a submit whose records are not in place yet. j.mu is held.
func (j *journal) coverEnd() int64 {
	end := j.off
	for off := range j.pending {
		end = min(end, off)
	}
	return end
}

// void voids the entries of refs (of jobs whose submit failed and was taken
// back after their entries were written), so that no replay writes them
// back: a scan passes over them. Best effort: the journal is broken, and
// if its disk lost the void, a power cut may bring the jobs back.
func (j *journal) void(refs []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range refs {
		ref, ok := parseJournalRef(r)
		if !ok || ref.Slot != j.slot || ref.Epoch != j.epoch {
			continue
		}
		var e [8]byte
		binary.LittleEndian.PutUint64(e[:], voidEpoch(ref.Epoch))
		if err := j.s.fs.JournalWrite(j.f, e[:], ref.Off+8); err != nil {
			j.fail(err)
		}
	}
	_ = j.fdatasync()
}

// coverNow makes every record of j's entries durable with one syncfs and
// notes it in the header. With wrap it holds off new entries meanwhile and
// starts a new epoch from the top.
func (j *journal) coverNow(wrap bool) error {
	j.covering.Lock()
	defer j.covering.Unlock()
	j.mu.Lock()
	for wrap && len(j.pending) > 0 {
		// A submit names its records outside j.mu, in a few milliseconds
		// at most (a batch of thousands).
		j.mu.Unlock()
		time.Sleep(time.Millisecond)
		j.mu.Lock()
	}
	if err := j.failure(); err != nil {
		j.mu.Unlock()
		return err
	}
	end, since := j.coverEnd(), j.mark
	if end == j.cover {
		j.mu.Unlock()
		return nil
	}
	if !wrap {
		if end == j.off {
			// Else the pending submit's mark stays: its records are named
			// after this cover's syncfs.
			j.mark = math.MaxUint64
		}
		j.mu.Unlock()
	}
	err := j.s.durable.syncAll(since)
	if err != nil {
		// A syncfs failed (here or before): fsync each record instead,
		// which reports its own writeback error.
		err = j.coverByFsyncs(j.cover, end)
	}
	if !wrap {
		j.mu.Lock()
	}
	defer j.mu.Unlock()
	if err != nil {
		return j.fail(fmt.Errorf("cover: %w", err))
	}
	if wrap {
		j.epoch++
		j.off, j.cover, j.mark = journalHeaderSize, journalHeaderSize, math.MaxUint64
	} else {
		j.cover = end
	}
	if err := j.writeHeader(); err != nil {
		return j.fail(fmt.Errorf("cover: %w", err))
	}
	return nil
}

// coverByFsyncs makes the records of j's entries in [from, end) durable
// with an fsync of each, where it is now (queued/ or claimed/: one in
// done/ was made durable by the change that put it there), and of those
// directories.
func (j *journal) coverByFsyncs(from, end int64) error {
	s := j.s
	data := make([]byte, end-from)
	if _, err := j.f.ReadAt(data, from); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, e := range scanJournalFrom(data, from, j.epoch) {
		env, err := decodeRecord("journal entry", "", e.payload, s.maxRecord())
		if err != nil {
			return fmt.Errorf("entry at %d: %w", e.off, err)
		}
		for _, d := range []string{dirQueued, dirClaimed} {
			p := s.recordPath(d, env.Job.ID)
			if _, err := os.Lstat(p); err != nil {
				continue
			}
			if err := s.fs.SyncFile(p); err != nil {
				return err
			}
			dirs[d] = true
		}
	}
	for d := range dirs {
		if err := s.fs.SyncDir(filepath.Join(s.dir, d)); err != nil {
			return err
		}
	}
	return nil
}

// coverJournal covers j every journalCoverEvery while it has entries
// beyond its cover, until the Store closes.
func (s *Store) coverJournal(j *journal) {
	defer s.wg.Done()
	every := journalCoverEvery
	if s.opts.journalCoverEvery > 0 {
		every = s.opts.journalCoverEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			if err := j.coverNow(false); err != nil {
				s.log.Warn("filestore: cannot cover the submission journal; submits make their records durable one by one", "path", j.path, "err", err)
				return
			}
		}
	}
}

// closeJournal covers the Store's journal and lets it go, at Close. One
// that cannot be covered is let go as it is, for the next Store that takes
// it to replay.
func (s *Store) closeJournal() {
	s.jmu.Lock()
	j := s.jr
	s.jr = nil
	s.jmu.Unlock()
	if j == nil {
		return
	}
	if err := j.coverNow(true); err != nil && !errors.Is(err, jobstore.ErrClosed) {
		s.log.Warn("filestore: cannot cover the submission journal at close; the next Store to take it replays it", "path", j.path, "err", err)
	}
	// A submit that took j before Close writes no entry after this: the
	// file may be another Store's in a moment.
	j.mu.Lock()
	j.fail(fmt.Errorf("filestore: journal: %w", jobstore.ErrClosed))
	j.mu.Unlock()
	unlockFile(j.f)
}

// closingJournals stops journalFor from taking a journal, before Close
// waits for the Store's goroutines (a cover's is started with the
// journal).
func (s *Store) closingJournals() {
	s.jmu.Lock()
	s.jclosed = true
	s.jmu.Unlock()
}

// journaled appends the entries of jobs (records written by write, given
// each job's entry) to j, the Store's journal. It reports false if they
// do not fit, and the caller then makes the records durable as before; a
// failed write or fdatasync breaks the journal and is returned, after
// which the caller does the same. at is append's: the offset of the first
// entry once they were reserved (pending until published), else -1.
func (s *Store) journaled(j *journal, jobs []jobstore.Job, write func(envs []envelope, data [][]byte) error) (ok bool, at int64, err error) {
	// Each record is encoded once, naming a probe entry of the same width
	// as its own, whose place is known only under the journal's mutex:
	// then the reference, the last field of the record, is written over
	// the probe's.
	probe := journalRef{Slot: j.slot}.String()
	marker := []byte(`"logged":"` + probe + `"`)
	datas := make([][]byte, len(jobs))
	var size int64
	for i, job := range jobs {
		data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 1, Job: job, Logged: probe})
		if err != nil {
			return false, -1, err
		}
		datas[i] = data
		size += entrySize(len(data))
	}
	if size > j.size/4 {
		return false, -1, nil // too large to journal
	}
	for try := 0; ; try++ {
		at, err := j.append(size, func(ref journalRef) ([][]byte, error) {
			envs := make([]envelope, len(jobs))
			off := ref.Off
			for i, job := range jobs {
				r := ref
				r.Off = off
				envs[i] = envelope{Format: FormatVersion, Rev: 1, Job: job, Logged: r.String()}
				at := bytes.LastIndex(datas[i], marker)
				if at < 0 {
					return nil, fmt.Errorf("journal: record of job %s names no entry", job.ID)
				}
				copy(datas[i][at+len(`"logged":"`):], envs[i].Logged)
				off += entrySize(len(datas[i]))
			}
			if err := write(envs, datas); err != nil {
				return nil, err
			}
			return datas, nil
		})
		if errors.Is(err, errJournalFull) && try == 0 {
			if err := j.coverNow(true); err != nil {
				return false, -1, nil
			}
			continue
		}
		if errors.Is(err, errJournalFull) {
			return false, -1, nil
		}
		return err == nil, at, err
	}
}

// replay writes back the records of entries, the entries of a journal
// beyond its cover whose Store ended without covering them, and makes
// them durable with one syncfs. For each entry, under its job's record
// lock (waited for a second at most: a record lock held longer leaves the
// journal for the next pass):
//   - a valid record of a later revision, anywhere: the job changed since,
//     and its change made that record durable;
//   - a valid record of the entry's revision in queued/: written again
//     from the entry, since a failed writeback of the first may have been
//     reported to the Store that is gone and nobody else;
//   - the same in claimed/: left, with the claim's note on it;
//   - copies that are not valid records (a power cut kept the name, not
//     the data), or none: the entry's record is written where such a copy
//     was, claimed/ if one was there, else queued/.
//
// No job of an entry beyond its cover can have been deleted (Prune and
// Delete wait for the cover, journalCovered).
func (s *Store) replay(ctx context.Context, entries []journalEntry) error {
	// The flush is opened first, to report the writeback errors of what
	// follows; where there is none, each record written is fsynced.
	sync, done, err := s.durable.prepareSyncAll()
	if err != nil {
		sync = nil
	} else {
		defer done()
	}
	var written []string
	since := s.durable.mark()
	for _, e := range entries {
		env, err := decodeRecord("journal entry", "", e.payload, s.maxRecord())
		if err != nil {
			// Its CRC matched: written so by a program that is not this one.
			return fmt.Errorf("entry at %d: %w", e.off, err)
		}
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		unlock, err := s.lockJob(lctx, env.Job.ID)
		cancel()
		if err != nil {
			return fmt.Errorf("replay job %s: %w", env.Job.ID, err)
		}
		p, err := s.replayOne(env)
		unlock()
		if err != nil {
			return fmt.Errorf("replay job %s: %w", env.Job.ID, err)
		}
		if p != "" {
			written = append(written, p)
		}
	}
	if sync != nil {
		if err := sync(since); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		return nil
	}
	dirs := map[string]bool{}
	for _, p := range written {
		if err := s.fs.SyncFile(p); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if err := s.fs.SyncDir(d); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	return nil
}

// replayOne writes back the record of env, a journal entry, if it needs
// it (see replay), and returns the path it wrote ("" if none). The caller
// holds the job's record lock.
func (s *Store) replayOne(env envelope) (string, error) {
	id := env.Job.ID
	f, err := s.locate(id)
	if err != nil {
		return "", err
	}
	if f.ok && f.rec.Rev > env.Rev {
		return "", nil
	}
	dir := dirQueued
	if f.ok {
		if f.rec.dir != dirQueued {
			return "", nil
		}
	} else {
		for _, c := range f.corrupt {
			if ce, ok := errors.AsType[*CorruptError](c); ok && filepath.Base(filepath.Dir(ce.Path)) == dirClaimed {
				dir = dirClaimed
			}
		}
		s.log.Warn("filestore: replay: a submitted job's record was lost; written again from the submission journal", "id", id, "dir", dir)
	}
	if err := s.writeRecord(dir, env, false); err != nil {
		return "", err
	}
	s.touched(id)
	if dir == dirQueued {
		s.setCand(env.Job)
	}
	return s.recordPath(dir, id), nil
}

// replayJournals replays every journal of the pool that no Store holds
// and that holds entries beyond its cover: those of Stores that ended
// without covering them. Open and each recovery pass call it; one that
// cannot be replayed now is logged and left for the next pass.
func (s *Store) replayJournals(ctx context.Context) error {
	names, err := readNames(filepath.Join(s.dir, journalDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		n, err := strconv.Atoi(strings.TrimSuffix(name, ".log"))
		if err != nil || !strings.HasSuffix(name, ".log") || n < 0 || n >= journalMaxSlots {
			continue
		}
		if !s.journalDirty(n) {
			// Looked at without its flock, which a Store taking a journal
			// would find held and pass over for a new one.
			continue
		}
		j, ok, err := s.openJournal(ctx, n, false)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("filestore: cannot replay a submission journal; left for the next pass", "path", s.journalPath(n), "err", err)
			continue
		}
		if ok {
			unlockFile(j.f)
		}
	}
	return nil
}

// journalDirty reports whether journal slot n may hold entries beyond its
// cover, from its header and the entry that would begin at its cover
// (see journal.open): true too if it cannot be read, for openJournal to
// report why.
func (s *Store) journalDirty(n int) bool {
	var f *os.File
	var err error
	if s.root != nil {
		f, err = s.root.OpenFile(filepath.Join(journalDirName, strconv.Itoa(n)+".log"), os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	} else {
		f, err = os.OpenFile(s.journalPath(n), os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return true
	}
	head := make([]byte, 64)
	if _, err := f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return true
	}
	h, ok := decodeJournalHeader(head, fi.Size())
	if !ok {
		// Being made, or cut short while it was made: no entry was ever
		// written into it.
		return false
	}
	first := make([]byte, 16)
	if _, err := f.ReadAt(first, h.cover); err != nil && !errors.Is(err, io.EOF) {
		return true
	}
	n64, e := int64(binary.LittleEndian.Uint32(first)), binary.LittleEndian.Uint64(first[8:])
	return n64 != 0 && (e == h.epoch || e == voidEpoch(h.epoch)) && h.cover+16+n64 <= fi.Size()
}

// journalCovered reports whether the entry logged names (envelope.Logged)
// is covered: its record made durable, so that the job may be deleted
// without a replay bringing it back. A record of a submit that was not
// journaled names none. The answer is made durable before it is given:
// the journal's header is read, then its file fdatasynced, so that a cover
// seen in the page cache is on the disk.
func (s *Store) journalCovered(logged string) (bool, error) {
	if logged == "" {
		return true, nil
	}
	ref, ok := parseJournalRef(logged)
	if !ok {
		return true, nil // not a reference this program made: nothing to replay
	}
	s.jmu.Lock()
	known, ok := s.jcovered[ref.Slot]
	s.jmu.Unlock()
	if ok && known.epoch == ref.Epoch && known.cover > ref.Off {
		return true, nil // seen covered, and durably, before
	}
	var f *os.File
	var err error
	if s.root != nil {
		f, err = s.root.OpenFile(filepath.Join(journalDirName, strconv.Itoa(ref.Slot)+".log"), os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	} else {
		f, err = os.OpenFile(s.journalPath(ref.Slot), os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil // no journal: nothing to replay
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	head := make([]byte, 64)
	if _, err := f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	h, ok := decodeJournalHeader(head, fi.Size())
	if !ok {
		return false, nil // being made, or torn: not known
	}
	if h.epoch == ref.Epoch && h.cover <= ref.Off {
		return false, nil
	}
	// A later epoch, or a cover beyond the entry; or an earlier epoch, of
	// a journal made again since (epochs only grow in one file): the
	// entry is gone either way.
	if err := s.fs.JournalSync(f); err != nil {
		return false, err
	}
	s.jmu.Lock()
	if s.jcovered == nil {
		s.jcovered = map[int]journalHeader{}
	}
	if prev := s.jcovered[ref.Slot]; h.epoch > prev.epoch || h.epoch == prev.epoch && h.cover > prev.cover {
		s.jcovered[ref.Slot] = h
	}
	s.jmu.Unlock()
	return true, nil
}

// coverOwnJournal covers this Store's journal now, if it has one (Delete
// of a job this Store just submitted need not wait for the next cover).
func (s *Store) coverOwnJournal() {
	s.jmu.Lock()
	j := s.jr
	s.jmu.Unlock()
	if j != nil {
		_ = j.coverNow(false)
	}
}
