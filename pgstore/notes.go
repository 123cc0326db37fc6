package pgstore

// noteKeep is how many of the latest job notifications a store remembers.
const noteKeep = 4096

// notes remembers which jobs the latest noteKeep job notifications named:
// those the listener received from any process, and this store's own
// signals. It lets a WatchCancel of a job this store has just claimed skip
// reading the row: if no notification named the job since the claim
// began, while the listener was up all along, the row is as the claim
// left it (running, for this lease, no cancel requested), since every
// change that ends a lease or requests a cancel notifies.
type notes struct {
	// seq counts the notifications; last maps a job to the seq of the
	// latest that named it, for the jobs of the ring.
	seq  uint64
	last map[string]uint64
	ring [noteKeep]string
	// floor is the seq of the latest notification forgotten: what came
	// before it is not known any more.
	floor uint64
}

// add records a notification about job id.
func (n *notes) add(id string) {
	n.seq++
	slot := &n.ring[n.seq%noteKeep]
	if n.seq > noteKeep {
		old := n.seq - noteKeep
		if n.last[*slot] == old {
			delete(n.last, *slot)
		}
		n.floor = old
	}
	*slot = id
	n.last[id] = n.seq
}

// notePoint is where a store's job notifications were at some moment.
type notePoint struct {
	seq, listenGen uint64
	// listening: the listener was up.
	listening bool
}

// notePointLocked returns where the store's job notifications are now.
// The caller holds s.mu.
func (s *Store) notePointLocked() notePoint {
	return notePoint{seq: s.notes.seq, listenGen: s.listenGen, listening: s.listening}
}

// quietSinceLocked reports whether the store knows that no notification
// about job id came since p: the listener was up at p and has been ever
// since, and no notification it received (nor any signal of this store)
// named id. The caller holds s.mu.
func (s *Store) quietSinceLocked(id string, p notePoint) bool {
	return p.listening && s.listening && s.listenGen == p.listenGen &&
		s.notes.floor <= p.seq && s.notes.last[id] <= p.seq
}
