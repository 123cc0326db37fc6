package filestore

import (
	"errors"
	"os"
	"time"
)

// A Store that claims learns at once when another Store that claims ends,
// so that the jobs whose leases that Store held run again without waiting
// for the next recovery pass (RecoverInterval). From its first Claim a
// Store holds its staging lock, tmp/<sid>.lock, open a second time, for
// writing (the end mark; nothing writes it). The kernel closes it when the
// process ends in any way, SIGKILL and the OOM killer included, and Close
// closes it after releasing the Store's leases and before removing the
// lock. On Linux inotify reports that close (IN_CLOSE_WRITE) to every
// watcher of tmp/ (ends_linux.go); the lock's own descriptor, and a
// sweep's, are read-only and report nothing, so a Store that never
// claimed (a command that reads) ends without a word. A Store watches
// tmp/ from its first Claim, and each end it sees starts a recovery pass
// at once and more after endFollowUps. Elsewhere, and for a Store that
// cannot watch, the periodic pass alone finds a dead worker's job.

// endFollowUps are the delays, from a Store's end, of the recovery passes
// after the first: the kernel releases an ending process's locks one file
// at a time, so its lease files may still be held when the close of its
// end mark is seen.
var endFollowUps = []time.Duration{time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond}

// watchEndsOnce, at a Store's first Claim, opens its end mark and starts
// the watch of other Stores' ends. A Store that cannot says so in its log:
// its own end is then found by the others' periodic pass, as are theirs
// by it.
func (s *Store) watchEndsOnce() {
	s.endsOnce.Do(func() {
		s.watchMu.Lock()
		defer s.watchMu.Unlock()
		if s.isClosed() {
			return // Close has stopped what was to stop: start nothing
		}
		if err := s.openEndMark(); err != nil {
			s.log.Warn("filestore: cannot mark this store for others to see it end; if this process dies, its jobs run again after other processes' next recovery pass (RecoverInterval)", "err", err)
		}
		stop, err := s.watchEnds()
		if err != nil {
			s.log.Warn("filestore: cannot watch for the end of other processes; the jobs of a dead worker run again after the next recovery pass (RecoverInterval)", "err", err)
			return
		}
		s.stopEnds = stop
	})
}

// openEndMark opens the staging lock for writing, checking that the name
// still holds the locked file. Called with watchMu held.
func (s *Store) openEndMark() error {
	if s.tmpLock == nil {
		return nil // a Store opened without a staging directory
	}
	f, err := os.OpenFile(s.tmpLock.Path(), os.O_WRONLY|noFollow, 0)
	if err != nil {
		return err
	}
	if !sameFile(f, s.tmpLock) {
		_ = f.Close()
		return errors.New("the staging lock " + s.tmpLock.Path() + " was replaced")
	}
	s.endMark = f
	return nil
}

// closeEndMark closes the end mark, if open: the others see this Store
// end.
func (s *Store) closeEndMark() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.endMark != nil {
		_ = s.endMark.Close()
		s.endMark = nil
	}
}

// sameFile reports whether a and b are open on one inode.
func sameFile(a, b statter) bool {
	ai, err := a.Stat()
	if err != nil {
		return false
	}
	bi, err := b.Stat()
	return err == nil && os.SameFile(ai, bi)
}
