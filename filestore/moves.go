package filestore

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// List and Stats read the state directories one after another, so a job
// that moves between them during the reads (a Retry, a failed attempt
// going back to queued/, recovery) can be missed by every read, or seen
// twice. A moveRecorder closes that gap: registered with the watcher
// before the reads, it collects the ID named by every event in a state
// directory. After the reads the caller writes a barrier, a dot-file that
// every scanner ignores, and waits until the watcher has handled its
// event. The watcher's events come from one inotify instance in the order
// the kernel made them, so a job that existed throughout the call yet was
// missed by the reads moved during the call, and its last move named it
// in an event before the barrier's: it is among the recorded IDs, which
// the caller reads once more by ID. When events may have been lost (no
// watcher, an overflow, or the barrier's event does not come in time) the
// caller reads the directories a second time instead.
type moveRecorder struct {
	ids     map[string]struct{}
	barrier string        // the barrier file's name
	done    chan struct{} // closed when the barrier's event is handled, or events were lost
	lost    bool          // events may have been lost; set under Store.mu before done closes
}

// barrierPrefix begins every barrier file's name. A barrier lives in
// claimed/ for a moment; a process that dies in that moment leaves an
// empty dot-file there, which every scanner ignores.
const barrierPrefix = ".barrier."

// nextBarrier returns the name of this Store's next barrier,
// .barrier.<nonce>.<seq>. A Store ends a wait at the event of its own
// barrier's name, whoever made it, so the name must be one no other Store
// on the directory makes: not the process ID, which every process that is
// PID 1 of its own PID namespace (a container) shares, but a nonce of 64
// random bits drawn at Open (newNonce) and a sequence within the Store.
func (s *Store) nextBarrier() string {
	return barrierPrefix + s.barrierNonce + "." + strconv.FormatUint(s.barrierSeq.Add(1), 10)
}

// barrierWait bounds the wait for a barrier's event, for filesystems that
// send no events although the watch was set up.
const barrierWait = 2 * time.Second

// recordMoves registers a recorder with the watcher. It returns nil when
// the store has no watcher (events are not coming); the caller then reads
// twice.
func (s *Store) recordMoves() *moveRecorder {
	s.watch()
	r := &moveRecorder{
		ids:     make(map[string]struct{}),
		barrier: s.nextBarrier(),
		done:    make(chan struct{}),
	}
	s.mu.Lock()
	s.recorders[r] = struct{}{}
	s.mu.Unlock()
	// Registered first: a watcher rebuilt from here on marks r lost (see
	// loseMoves), and one rebuilt before was in place before the call.
	s.watchMu.Lock()
	w := s.watcher
	s.watchMu.Unlock()
	if w == nil {
		s.stopMoves(r)
		return nil
	}
	return r
}

// stopMoves unregisters r.
func (s *Store) stopMoves(r *moveRecorder) {
	s.mu.Lock()
	delete(s.recorders, r)
	s.mu.Unlock()
}

// finishMoves writes r's barrier, waits for its event and unregisters r.
// It returns the IDs recorded, and false if events may have been lost, so
// that the caller must read the directories again. A nil r returns false.
func (s *Store) finishMoves(ctx context.Context, r *moveRecorder) (map[string]struct{}, bool, error) {
	if r == nil {
		return nil, false, nil
	}
	defer s.stopMoves(r)
	p := filepath.Join(s.dir, dirClaimed, r.barrier)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		// A store this process cannot write to (read-only): no barrier.
		s.log.Debug("filestore: cannot write a listing barrier; reading twice", "err", err)
		return nil, false, nil
	}
	f.Close()
	_ = os.Remove(p)
	t := time.NewTimer(barrierWait)
	defer t.Stop()
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-s.closed:
		return nil, false, nil
	case <-t.C:
		return nil, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.lost {
		return nil, false, nil
	}
	return r.ids, true, nil
}

// recordMove notes an event about job id, or about the file name in state
// directory dir, for every recorder: the event of a recorder's own barrier
// (in claimed/, by its exact name) ends its wait. The caller holds s.mu.
func (s *Store) recordMove(dir, id, name string) {
	for r := range s.recorders {
		if id != "" {
			r.ids[id] = struct{}{}
		} else if dir == dirClaimed && name == r.barrier {
			close(r.done)
			delete(s.recorders, r)
		}
	}
}

// loseMoves tells every recorder, the next Stats and the index that
// events may have been lost. The caller holds s.mu.
func (s *Store) loseMoves() {
	s.statsLost = true
	s.dropIndex()
	for r := range s.recorders {
		r.lost = true
		close(r.done)
		delete(s.recorders, r)
	}
}
