package filestore

import (
	"context"
	"sync"

	"github.com/jobdir/jobdir/jobstore"
)

// claimFlush makes claims durable in the background. A claim renames its
// job into claimed/ and returns at once; this Store's flusher then makes
// claimed/ durable, one flush for every claim made while the one before
// ran, so that a claim costs no fsync of its own however the callers
// claim (one at a time, as a runner's loop does, or at once). Where the
// Store's new records share a flush (durability.moved), the flusher joins
// it (durability.entries): the claims and the Completes of a moment are
// then covered by one syncfs, one journal commit instead of two. A power
// cut during an attempt whose claim was flushed leaves the job in
// claimed/, where recovery counts the attempt (recoverOne); the flush
// follows the claim by about one directory fsync or syncfs, a millisecond
// or a few.
type claimFlush struct {
	mu sync.Mutex
	// made counts the claims made, durable those that an fsync of
	// claimed/ covered; flushed is closed, and replaced, when a flush ends.
	made, durable uint64
	flushed       chan struct{}
	// wake asks the flusher for a flush.
	wake chan struct{}
}

func newClaimFlush() *claimFlush {
	return &claimFlush{flushed: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// noteClaim counts a claim whose rename into claimed/ was made and asks
// for a flush.
func (s *Store) noteClaim() {
	f := s.claims
	f.mu.Lock()
	f.made++
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// flushClaims is the flusher, a goroutine of the Store's until Close.
func (s *Store) flushClaims() {
	defer s.wg.Done()
	f := s.claims
	for {
		select {
		case <-s.closed:
			return
		case <-f.wake:
		}
		f.mu.Lock()
		upTo, idle := f.made, f.made <= f.durable
		f.mu.Unlock()
		if idle {
			// A wake left by a claim that the last flush covered.
			continue
		}
		err := s.durable.entries(dirClaimed)
		if err != nil {
			// The claims stay as they are; a later flush (the next claim's)
			// covers them, and until then a power cut may leave their
			// attempts uncounted.
			s.log.Warn("filestore: cannot make claims durable; their attempts may go uncounted after a power cut", "err", err)
		}
		f.mu.Lock()
		if err == nil && upTo > f.durable {
			f.durable = upTo
		}
		close(f.flushed)
		f.flushed = make(chan struct{})
		f.mu.Unlock()
	}
}

// waitClaimsDurable returns once every claim this Store made before the
// call is durable, or ctx ends, or the Store closes.
func (s *Store) waitClaimsDurable(ctx context.Context) error {
	f := s.claims
	f.mu.Lock()
	want := f.made
	f.mu.Unlock()
	for {
		f.mu.Lock()
		done, ch := f.durable >= want, f.flushed
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case f.wake <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return jobstore.ErrClosed
		}
	}
}
