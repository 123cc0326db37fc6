package storekit

import (
	"github.com/jobdir/jobdir/jobstore"
)

// WorkCount is a store's account of work signals, which AwaitWork and
// AwaitWorkSince compare against: how many times work may have become
// claimable (a submit, a requeue, a retry), and how far the latest Claim
// that found nothing had seen. It holds no lock: the store guards it with
// its own. The zero value is ready.
type WorkCount struct {
	seq, noJob uint64
}

// Signal counts one signal of work.
func (w *WorkCount) Signal() { w.seq++ }

// Seq returns the count now: a Claim notes it when it begins, and puts it
// in its NoJobError (Since) if it finds nothing.
func (w *WorkCount) Seq() uint64 { return w.seq }

// NoJob records that a Claim that began at seq found nothing.
func (w *WorkCount) NoJob(seq uint64) { w.noJob = max(w.noJob, seq) }

// Arrived reports whether a waiter should return at once rather than
// wait. With nj, the caller's own NoJobError: whether work was signalled
// since that Claim began. Without (nil, a plain AwaitWork): whether work
// was signalled since the latest Claim that found nothing, which it then
// counts as seen, so that it wakes one such waiter, not every later one.
func (w *WorkCount) Arrived(nj *jobstore.NoJobError) bool {
	if nj != nil {
		return w.seq != nj.Since
	}
	if w.seq == w.noJob {
		return false
	}
	w.noJob = w.seq
	return true
}
