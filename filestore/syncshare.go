//go:build unix

package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// syncShareName is the file in locks/ through which the processes of a
// store share their syncfs(2) flushes (syncShare).
const syncShareName = "syncfs"

// syncShare lets the processes of a store share the syncfs(2) flushes of
// their new records (durability.moved). A syncfs commits everything
// written on the file system before it began, whoever wrote it; so when
// two processes each flush their own group, every commit carries the
// changes of both, and the second syncfs forces a commit of its own that
// the first already covered: twice the commits, each half as full.
// Through locks/syncfs, a group's flush waits for a syncfs another
// process begins after the group's changes, and makes its own only when
// none does.
//
// The file holds a few counters (shareState): the syncfs flushes begun
// and the last one that ended without error, and who made it. They are
// changed only by the holder of the file's flock, which it holds from
// before its syncfs begins until the counters say how it ended; they are
// read without the lock, and a read that meets a write under way (its
// checksum does not match) is made again. A group whose changes are made
// reads the count of flushes begun, g; a flush numbered above g began
// after them and covers them. The group then polls the counters until one
// such flush has ended without error, or takes the lock and makes one.
//
// What a syncfs says about errors: it reports the writeback errors of the
// whole file system that happened after its descriptor was opened, each
// once per descriptor. So
//
//   - a process counts on another's syncfs only if that one's descriptor
//     was opened before its changes were written (each opening gets a
//     number, and a change notes the highest it knows, mark);
//   - a syncfs that fails is noted in the file (failedAt), and every
//     process that was open then flushes alone from then on: the error may
//     have been in its own file, reported to the other descriptor, and a
//     later syncfs there would not report it again. Each such process
//     reports it on its own next syncfs, and then fsyncs each file as
//     after any failed syncfs (flushCost).
//
// A process stopped while it holds the lock, or whose syncfs takes
// longer than shareWait, must not hold up the others: a group waits for
// a holder that changes nothing in the file for shareWait at most, then
// makes a syncfs of its own and flushes alone for shareSolo. The file
// holds no record. A bad one (torn by a power cut, written by hand), or
// one that shows fewer openings than a process has seen (emptied under
// it), is not trusted (shareState.valid, read) and is written afresh by
// the next flush, noting a failure for every process open (afresh); a
// process that cannot use the file flushes alone, as every process did
// before.
//
// TestSyncShare shows each of these rules; TestSyncShareAcrossProcesses
// two processes whose flushes are shared, and one stopped or killed
// while it holds the lock.
type syncShare struct {
	path string
	fd   int
	// own is this Store's syncfs, opened before this process numbered its
	// opening.
	own syncer
	// opened is this opening's number; seen the highest number read from
	// the file.
	opened uint64
	seen   atomic.Uint64
	log    *slog.Logger
	// waiting, if set, is called each time a group finds the lock held
	// (a test seam).
	waiting func()

	mu sync.Mutex
	// soloUntil: until then a flush is made alone, after a wait ran out.
	soloUntil time.Time
	// alone: this process flushes alone for good, as a flush failed,
	// somewhere, while it was open, or the file failed it.
	alone bool
}

const (
	// shareWait is how long a group waits for another process's syncfs
	// before it makes its own. A syncfs takes a journal commit, a few
	// milliseconds, and up to about 25 ms on a busy loop-mounted file
	// system; one that takes longer than this is held up by the disk, and
	// a syncfs of its own then only queues behind it.
	shareWait = 50 * time.Millisecond
	// sharePoll is how often a waiting group reads the counters.
	sharePoll = 200 * time.Microsecond
	// shareSolo is how long a process flushes alone after a wait ran out
	// (its holder may be stopped), before it tries to share again.
	shareSolo = time.Second
)

// shareState is the content of locks/syncfs: five counters, then a
// CRC-32C of them, in little-endian order.
type shareState struct {
	// started numbers the last syncfs begun, done the last that ended
	// without error, and doneBy is the opening number of its maker.
	started, done, doneBy uint64
	// opens numbers the openings of the file by processes that share;
	// failedAt is opens when a syncfs last failed (0: never).
	opens, failedAt uint64
}

const shareStateSize = 5*8 + 4

var shareCRC = crc32.MakeTable(crc32.Castagnoli)

func (st shareState) encode() []byte {
	b := make([]byte, shareStateSize)
	for i, v := range []uint64{st.started, st.done, st.doneBy, st.opens, st.failedAt} {
		binary.LittleEndian.PutUint64(b[i*8:], v)
	}
	binary.LittleEndian.PutUint32(b[40:], crc32.Checksum(b[:40], shareCRC))
	return b
}

// decodeShareState reads b, the file's first bytes: ok=false if they are
// not a state (torn, or not written by this code), with the counters they
// hold if they are long enough. An empty file is the state of a store
// where no flush was shared yet.
func decodeShareState(b []byte) (shareState, bool) {
	if len(b) == 0 {
		return shareState{}, true
	}
	if len(b) < 40 {
		return shareState{}, false
	}
	var v [5]uint64
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	st := shareState{started: v[0], done: v[1], doneBy: v[2], opens: v[3], failedAt: v[4]}
	if len(b) < shareStateSize || binary.LittleEndian.Uint32(b[40:]) != crc32.Checksum(b[:40], shareCRC) {
		return st, false
	}
	return st, st.valid()
}

// valid reports whether the counters can be as this code writes them.
func (st shareState) valid() bool {
	return st.done <= st.started && st.doneBy <= st.opens && st.failedAt <= st.opens
}

// errShareBusy is joinSyncShare's error when the lock of the shared
// flushes was held for shareWait by others: it may be tried again later.
var errShareBusy = errors.New("its lock is held by other processes without a pause, or by one that does not let it go (stopped?)")

// joinSyncShare opens locks/syncfs at path (made with perm if missing)
// for the flushes of own, a syncfs opened before this call, and numbers
// this opening. The Store flushes alone while it cannot: for good if the
// file cannot be used, for a while if its lock was held too long
// (errShareBusy).
func joinSyncShare(path string, perm os.FileMode, own syncer, log *slog.Logger) (*syncShare, error) {
	fd, err := openSharedFile(path, perm)
	if err != nil {
		return nil, err
	}
	s := &syncShare{path: path, fd: fd, own: own, log: log}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		s.close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		s.close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	// Numbering the opening takes the lock, which a stopped process may
	// hold: wait for it no longer than for a flush.
	deadline := time.Now().Add(shareWait)
	for {
		ok, err := s.tryLock()
		if err != nil {
			s.close()
			return nil, err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, errShareBusy
		}
		time.Sleep(sharePoll)
	}
	cur, ok, err := s.read()
	if err == nil {
		if !ok {
			cur = cur.afresh(0)
		}
		cur.opens++
		err = s.write(cur)
	}
	// Unlocked before the descriptor is closed: once closed, its number
	// may be another file's, whose lock an unlock would drop.
	s.unlock()
	if err != nil {
		s.close()
		return nil, err
	}
	s.opened = cur.opens
	s.seen.Store(cur.opens)
	return s, nil
}

// afresh returns a valid state that follows st, whatever st holds, for a
// process that has seen openings numbered up to seen: every count at
// least where it was, nothing done, and a failure noted for every process
// open until now, since a failure the file held may be lost. The openings
// go on from afreshGap above the highest known, since openings the file
// no longer shows (it was emptied) may have been numbered meanwhile: none
// of those may number a later one alike.
func (st shareState) afresh(seen uint64) shareState {
	opens := max(st.opens, st.doneBy, st.failedAt, seen) + afreshGap
	return shareState{started: max(st.started, st.done) + 1, opens: opens, failedAt: opens}
}

// afreshGap is how far afresh moves the count of openings on.
const afreshGap = 1 << 32

// mark returns what a change must note before it writes what a flush of
// the group will cover: only a syncfs by a process numbered no higher
// counts for it.
func (s *syncShare) mark() uint64 {
	if s == nil {
		return 0
	}
	return s.seen.Load()
}

// sync makes durable the changes of a group, all made before the call,
// the first of which noted since (mark): by a syncfs that another process
// begins after the call, or by one of its own, whose duration it returns
// (zero when another's covered the group).
func (s *syncShare) sync(since uint64) (time.Duration, error) {
	if s.solo() {
		return s.ownSync()
	}
	st, ok, err := s.read()
	if err != nil {
		return s.broken(err)
	}
	// g is the count of flushes begun, read after the group's changes:
	// from the first valid read.
	g, known := st.started, ok
	last, moved := st, time.Now()
	for {
		if ok && !known {
			g, known = st.started, true
		}
		if ok {
			switch {
			case st.failedAt >= s.opened:
				s.goAlone()
				return s.ownSync()
			case st.done > g && st.doneBy <= since:
				return 0, nil
			case st.done > g:
				// A syncfs began after the call, but through a descriptor
				// opened after the group's changes (a process that has
				// just opened the store): it does not count, and waiting
				// for the next one would take as long as a syncfs.
				return s.ownSync()
			}
		}
		locked, err := s.tryLock()
		if err != nil {
			return s.broken(err)
		}
		if locked {
			if !known {
				g = math.MaxUint64 // no flush but its own covers the group
			}
			return s.lead(g, since)
		}
		if s.waiting != nil {
			s.waiting()
		}
		if now := time.Now(); st != last {
			last, moved = st, now
		} else if now.Sub(moved) > shareWait {
			// The holder of the lock has made no syncfs for that long.
			s.soloFor(shareSolo)
			return s.ownSync()
		}
		time.Sleep(sharePoll)
		if st, ok, err = s.read(); err != nil {
			return s.broken(err)
		}
	}
}

// broken makes this process flush alone from now on, as the file of
// shared flushes failed it with err, and makes the flush of the caller.
func (s *syncShare) broken(err error) (time.Duration, error) {
	s.log.Warn("filestore: the file of shared flushes failed; flushing alone", "path", s.path, "err", err)
	s.goAlone()
	return s.ownSync()
}

// lead makes the flush a group waits for, holding the lock: unless one
// that covers the group ended while it took the lock, it numbers a new
// syncfs, makes it and notes how it ended.
func (s *syncShare) lead(g, since uint64) (time.Duration, error) {
	defer s.unlock()
	st, ok, rerr := s.read()
	switch {
	case rerr != nil:
		return s.broken(rerr)
	case !ok:
		st = st.afresh(s.seen.Load())
	case st.failedAt >= s.opened:
		s.goAlone()
		return s.ownSync()
	case st.done > g && st.doneBy <= since:
		return 0, nil
	}
	st.started++
	if err := s.write(st); err != nil {
		return s.broken(err)
	}
	took, err := s.ownSync()
	if err == nil {
		st.done, st.doneBy = st.started, s.opened
	} else {
		st.failedAt = st.opens
		s.goAlone()
	}
	if werr := s.write(st); werr != nil {
		// The others do not learn of it. Of a flush done, no harm but
		// time: they make their own. A failure they must learn, or one
		// whose records it was could count on a later flush: the file is
		// emptied instead, which they take for one rewritten, and so for
		// a failure (read, afresh).
		s.log.Warn("filestore: cannot note a shared flush", "path", s.path, "err", werr, "flush_err", err)
		if err != nil {
			if terr := unix.Ftruncate(s.fd, 0); terr != nil {
				s.log.Error("filestore: cannot tell the store's other processes of a failed syncfs; they may count on later ones", "path", s.path, "err", terr)
			}
		}
	}
	return took, err
}

// read returns the state in the file; ok=false if it is not valid after a
// few tries (a write under way makes a torn read), with the counters it
// holds, if any, for afresh.
func (s *syncShare) read() (shareState, bool, error) {
	var b [shareStateSize]byte
	var st shareState
	for range 3 {
		n, err := unix.Pread(s.fd, b[:], 0)
		if err != nil {
			return shareState{}, false, &os.PathError{Op: "read", Path: s.path, Err: err}
		}
		var ok bool
		if st, ok = decodeShareState(b[:n]); ok && st.opens < s.seen.Load() {
			// Fewer openings than this process has seen: the file was
			// emptied or rewritten since, and says nothing of the
			// processes numbered before.
			return st, false, nil
		}
		if ok {
			for o := s.seen.Load(); st.opens > o && !s.seen.CompareAndSwap(o, st.opens); o = s.seen.Load() {
			}
			return st, true, nil
		}
	}
	return st, false, nil
}

func (s *syncShare) write(st shareState) error {
	if _, err := unix.Pwrite(s.fd, st.encode(), 0); err != nil {
		return &os.PathError{Op: "write", Path: s.path, Err: err}
	}
	return nil
}

func (s *syncShare) tryLock() (bool, error) {
	err := ignoringEINTR(func() error { return unix.Flock(s.fd, unix.LOCK_EX|unix.LOCK_NB) })
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "flock", Path: s.path, Err: err}
	}
	return true, nil
}

func (s *syncShare) unlock() { _ = unix.Flock(s.fd, unix.LOCK_UN) }

func (s *syncShare) solo() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alone || time.Now().Before(s.soloUntil)
}

func (s *syncShare) soloFor(d time.Duration) {
	s.mu.Lock()
	s.soloUntil = time.Now().Add(d)
	s.mu.Unlock()
	s.log.Debug("filestore: another process held the shared flush too long (stopped?); flushing alone for a while", "for", d)
}

func (s *syncShare) goAlone() {
	s.mu.Lock()
	s.alone = true
	s.mu.Unlock()
}

// ownSync makes this process's own syncfs and times it.
func (s *syncShare) ownSync() (time.Duration, error) {
	start := time.Now()
	err := s.own.Sync()
	return time.Since(start), err
}

// close closes the file; the caller closes own.
func (s *syncShare) close() { _ = unix.Close(s.fd) }
