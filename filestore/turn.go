package filestore

import (
	"context"
	"sync"
)

// turn is the in-process half of a record lock: any number of shared
// holders or one exclusive holder, with ctx-bounded waits. A waiting
// exclusive holder goes before shared holders that arrive after it, so
// that readers, however many, never keep a change (a Complete) waiting for
// more than the reads already under way. The zero value is an unlocked
// turn. It is safe for concurrent use.
type turn struct {
	mu sync.Mutex
	// readers holds the shared holders; writer is set while the exclusive
	// holder has the turn; writersWaiting counts exclusive waiters.
	readers        int
	writer         bool
	writersWaiting int
	// changed is closed and replaced whenever the turn is given up, or an
	// exclusive waiter gives up waiting; nil until someone waits.
	changed chan struct{}
}

// lock takes the turn, exclusively or shared, waiting until it is free or
// ctx ends (then it returns ctx.Err() and holds nothing).
func (t *turn) lock(ctx context.Context, exclusive bool) error {
	t.mu.Lock()
	waiting := false
	for {
		free := !t.writer && (exclusive && t.readers == 0 || !exclusive && t.writersWaiting == 0)
		if free {
			if waiting {
				t.writersWaiting--
			}
			if exclusive {
				t.writer = true
			} else {
				t.readers++
			}
			t.mu.Unlock()
			return nil
		}
		if exclusive && !waiting {
			waiting = true
			t.writersWaiting++
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
			t.mu.Lock()
		case <-ctx.Done():
			t.mu.Lock()
			if waiting {
				t.writersWaiting--
				// Readers held back for this waiter may go now.
				t.wake()
			}
			t.mu.Unlock()
			return ctx.Err()
		}
	}
}

// enter takes the turn as lock does with wait, or as tryLock does
// without: it reports whether it took it, and returns ctx.Err() if a wait
// ended with ctx.
func (t *turn) enter(ctx context.Context, exclusive, wait bool) (bool, error) {
	if !wait {
		return t.tryLock(exclusive), nil
	}
	if err := t.lock(ctx, exclusive); err != nil {
		return false, err
	}
	return true, nil
}

// tryLock takes the turn if it is free now, without waiting, and reports
// whether it did.
func (t *turn) tryLock(exclusive bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.writer || exclusive && t.readers > 0 || !exclusive && t.writersWaiting > 0 {
		return false
	}
	if exclusive {
		t.writer = true
	} else {
		t.readers++
	}
	return true
}

// unlock gives up a turn that lock took with the same exclusive flag.
func (t *turn) unlock(exclusive bool) {
	t.mu.Lock()
	if exclusive {
		t.writer = false
	} else {
		t.readers--
	}
	t.wake()
	t.mu.Unlock()
}

// wake wakes every waiter to look again. The caller holds t.mu.
func (t *turn) wake() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}
