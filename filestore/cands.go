package filestore

import (
	"container/heap"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// candIndex is the claim candidate set: every job believed to be queued,
// with only what picking needs (no payloads). Per queue and kind it keeps a
// heap of due jobs in claim order and a heap of not-yet-due jobs by RunAt,
// so that a claim costs O(groups · log n) rather than a pass over the
// backlog, and a paused queue's jobs cost a claim nothing.
// Removal is lazy: heap items carry the sequence number of the set that
// made them, and items no longer current are dropped when they surface.
// It is not safe for concurrent use; the Store guards it with s.mu.
type candIndex struct {
	byID  map[string]candEntry
	kinds map[group]*kindQueue
	seq   uint64
	items int // heap items, current or not
}

// part names a partition of a queue.
type part struct{ queue, partition string }

// group is the queue and kind of a set of candidates.
type group struct{ queue, kind string }

type cand struct {
	queue     string
	partition string
	kind      string
	priority  int
	runAt     time.Time
}

type candEntry struct {
	cand
	seq uint64
}

type candItem struct {
	id  string
	c   cand
	seq uint64
}

type kindQueue struct {
	due    dueHeap
	future futureHeap
}

func newCandIndex() *candIndex {
	return &candIndex{byID: make(map[string]candEntry), kinds: make(map[group]*kindQueue)}
}

func (x *candIndex) len() int { return len(x.byID) }

func (x *candIndex) has(id string) bool {
	_, ok := x.byID[id]
	return ok
}

// ids returns the IDs of every candidate.
func (x *candIndex) ids() map[string]bool {
	m := make(map[string]bool, len(x.byID))
	for id := range x.byID {
		m[id] = true
	}
	return m
}

// set makes job id a candidate with c, replacing what was known of it.
func (x *candIndex) set(id string, c cand) {
	if e, ok := x.byID[id]; ok && e.cand == c {
		return
	}
	x.seq++
	x.byID[id] = candEntry{cand: c, seq: x.seq}
	q := x.kinds[c.group()]
	if q == nil {
		q = &kindQueue{}
		x.kinds[c.group()] = q
	}
	heap.Push(&q.future, candItem{id: id, c: c, seq: x.seq})
	x.items++
	if x.items > 2*len(x.byID)+1024 {
		x.compact()
	}
}

// del removes job id from the candidates.
func (x *candIndex) del(id string) { delete(x.byID, id) }

func (x *candIndex) live(it candItem) bool {
	e, ok := x.byID[it.id]
	return ok && e.seq == it.seq
}

// compact rebuilds the heaps from the current candidates, dropping the
// items that lazy removal left behind.
func (x *candIndex) compact() {
	x.kinds = make(map[group]*kindQueue)
	x.items = 0
	for id, e := range x.byID {
		q := x.kinds[e.group()]
		if q == nil {
			q = &kindQueue{}
			x.kinds[e.group()] = q
		}
		q.future = append(q.future, candItem{id: id, c: e.cand, seq: e.seq})
		x.items++
	}
	for _, q := range x.kinds {
		heap.Init(&q.future)
	}
}

func (c cand) group() group { return group{queue: c.queue, kind: c.kind} }

// settle moves the group's jobs that are due at now from the future heap
// to the due heap and drops items that are no longer current from both
// tops.
func (x *candIndex) settle(kind group, now time.Time) *kindQueue {
	q := x.kinds[kind]
	if q == nil {
		return nil
	}
	for len(q.future) > 0 {
		top := q.future[0]
		if !x.live(top) {
			heap.Pop(&q.future)
			x.items--
			continue
		}
		if top.c.runAt.After(now) {
			break
		}
		heap.Pop(&q.future)
		heap.Push(&q.due, top)
	}
	for len(q.due) > 0 && !x.live(q.due[0]) {
		heap.Pop(&q.due)
		x.items--
	}
	if len(q.due) == 0 && len(q.future) == 0 {
		delete(x.kinds, kind)
		return nil
	}
	return q
}

// pick returns the best due candidate of a queue and kind req accepts, of
// a queue not in blocked and a partition that skipPart (if not nil) does
// not pass over, that is not in tried, or an empty one (id "") and the
// earliest RunAt among those candidates not yet due.
// The tried candidates, and those of the partitions passed over, that it
// meets on the way are taken off the heaps and added to aside, so that
// the next pick of the same claim does not meet them again; the claim
// gives them back with restore when it ends.
func (x *candIndex) pick(req jobstore.ClaimRequest, blocked map[string]bool, skipPart func(part) bool, now time.Time, tried map[string]bool, aside *[]candItem) (candItem, time.Time) {
	var best candItem
	var next time.Time
	for k := range x.kinds {
		if blocked[k.queue] || !req.Accepts(k.queue, k.kind) {
			continue
		}
		q := x.settle(k, now)
		if q == nil {
			continue
		}
		if len(q.future) > 0 && (next.IsZero() || q.future[0].c.runAt.Before(next)) {
			next = q.future[0].c.runAt
		}
		// Set aside the candidates this claim already tried, and those of
		// the partitions it found full.
		for len(q.due) > 0 && (tried[q.due[0].id] || !x.live(q.due[0]) || (skipPart != nil && q.due[0].c.partition != "" && skipPart(part{k.queue, q.due[0].c.partition}))) {
			it := heap.Pop(&q.due).(candItem)
			x.items--
			if x.live(it) {
				*aside = append(*aside, it)
			}
		}
		if len(q.due) > 0 {
			top := q.due[0]
			if best.id == "" || claimsBefore(top, best) {
				best = top
			}
		}
	}
	return best, next
}

// restore gives back the candidates that picks set aside, those still
// current: each is made current again under a new sequence number, so that
// a copy that a compaction put back in the heaps meanwhile is dropped.
func (x *candIndex) restore(aside []candItem) {
	for _, it := range aside {
		e, ok := x.byID[it.id]
		if !ok || e.seq != it.seq {
			continue // gone, or set again since: its own item is in the heaps
		}
		x.seq++
		x.byID[it.id] = candEntry{cand: e.cand, seq: x.seq}
		q := x.kinds[e.group()]
		if q == nil {
			q = &kindQueue{}
			x.kinds[e.group()] = q
		}
		heap.Push(&q.future, candItem{id: it.id, c: e.cand, seq: x.seq})
		x.items++
	}
}

// nextRunAt returns the earliest RunAt after now among all candidates, or
// zero.
func (x *candIndex) nextRunAt(now time.Time) time.Time {
	var next time.Time
	for k := range x.kinds {
		q := x.settle(k, now)
		if q != nil && len(q.future) > 0 && (next.IsZero() || q.future[0].c.runAt.Before(next)) {
			next = q.future[0].c.runAt
		}
	}
	return next
}

// claimsBefore reports whether a is claimed before b, in the order of
// storekit.ClaimOrder (higher priority, then earlier RunAt, then older
// ID), written out on the candidates' fields: the heaps compare often, and
// two whole jobs per comparison cost a claim more than its heap work
// (TestCandIndexMatchesBruteForce checks the order against ClaimOrder).
func claimsBefore(a, b candItem) bool {
	if a.c.priority != b.c.priority {
		return a.c.priority > b.c.priority
	}
	if !a.c.runAt.Equal(b.c.runAt) {
		return a.c.runAt.Before(b.c.runAt)
	}
	return a.id < b.id
}

// dueHeap orders due candidates by claim order.
type dueHeap []candItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return claimsBefore(h[i], h[j]) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(candItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// futureHeap orders candidates not yet due by RunAt.
type futureHeap []candItem

func (h futureHeap) Len() int { return len(h) }
func (h futureHeap) Less(i, j int) bool {
	if !h[i].c.runAt.Equal(h[j].c.runAt) {
		return h[i].c.runAt.Before(h[j].c.runAt)
	}
	return h[i].id < h[j].id
}
func (h futureHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *futureHeap) Push(x any)   { *h = append(*h, x.(candItem)) }
func (h *futureHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
