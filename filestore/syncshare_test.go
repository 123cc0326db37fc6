//go:build unix

package filestore

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
)

// flush is syncShare.sync for a test that looks only at its error.
func flush(s *syncShare, since uint64) error {
	_, err := s.sync(since)
	return err
}

// leadFlush is syncShare.lead for a test that looks only at its error.
func leadFlush(s *syncShare, g, since uint64) error {
	_, err := s.lead(g, since)
	return err
}

// recv receives from ch, failing the test if nothing comes within 10
// seconds: a flush that waits for what never comes fails, not hangs.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came within 10 seconds")
		panic("unreachable")
	}
}

// countSyncer is a syncfs that counts its calls, fails with err when it
// is set, and, when hold is set, waits until it is closed.
type countSyncer struct {
	calls atomic.Int32
	err   atomic.Pointer[error]
	// entered, if set, is sent to when Sync begins.
	entered chan struct{}
	hold    chan struct{}
}

func (c *countSyncer) Sync() error {
	c.calls.Add(1)
	if c.entered != nil {
		select {
		case c.entered <- struct{}{}:
		default: // a second syncfs while the first is held: the test fails on its counts
		}
	}
	if c.hold != nil {
		<-c.hold
	}
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *countSyncer) Close() error { return nil }

func (c *countSyncer) fail(err error) { c.err.Store(&err) }

// joinShare opens the shared flushes of the store at dir for own, as a
// process of its own would: each has its own open file, and so its own
// flock.
func joinShare(t *testing.T, dir string, own syncer) *syncShare {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, dirLocks), 0o755))
	s, err := joinSyncShare(filepath.Join(dir, dirLocks, syncShareName), 0o644, own, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(s.close)
	return s
}

// readShare returns the state in the file of the store at dir.
func readShare(t *testing.T, dir string) shareState {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, dirLocks, syncShareName))
	require.NoError(t, err)
	st, ok := decodeShareState(b)
	require.True(t, ok, "the file of shared flushes is not valid: %x", b)
	return st
}

// isAlone reports whether s flushes alone for good.
func isAlone(s *syncShare) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alone
}

// leadWhileWaiting has leader, which holds the lock, make a flush once
// flushing (a group's flush in waiter's process) waits for it, and
// returns the group's error.
func leadWhileWaiting(t *testing.T, dir string, leader, waiter *syncShare, flushing func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	waited := waits(waiter)
	go func() { errc <- flushing() }()
	recv(t, waited)
	require.NoError(t, leadFlush(leader, readShare(t, dir).started, math.MaxUint64))
	return recv(t, errc)
}

// waits makes s report on the returned channel each time a group finds
// the lock held: once one does, it has read the count of flushes begun.
func waits(s *syncShare) <-chan struct{} {
	c := make(chan struct{}, 1)
	s.waiting = func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return c
}

// leadHeld makes a's next flush hold inside its syncfs until the returned
// function is called, and returns once that syncfs has begun.
func leadHeld(t *testing.T, a *syncShare, own *countSyncer) (release func() error) {
	t.Helper()
	own.entered, own.hold = make(chan struct{}, 1), make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- flush(a, math.MaxUint64) }()
	recv(t, own.entered)
	return func() error {
		close(own.hold)
		err := recv(t, errc)
		own.entered, own.hold = nil, nil
		return err
	}
}

// TestSyncShare: the rules by which the processes of a store share their
// syncfs flushes (syncShare), each process played by a syncShare of its
// own open file: a group's flush is covered by another's syncfs only if
// that one began after the group's call, ended without error, and was
// made through a descriptor opened before the group's changes were
// written; after a failed syncfs every process then open flushes alone;
// a holder that does not let go is waited for at most shareWait, and
// then not for a while; a file that is not valid is never trusted.
func TestSyncShare(t *testing.T) {
	t.Run("CoveredByAnother", func(t *testing.T) {
		dir := t.TempDir()
		aOwn, bOwn := &countSyncer{}, &countSyncer{}
		a, b := joinShare(t, dir, aOwn), joinShare(t, dir, bOwn)
		// b's group calls while a holds the lock, before a's syncfs
		// begins: a's flush covers it.
		ok, err := a.tryLock()
		require.NoError(t, err)
		require.True(t, ok)
		errc := make(chan error, 1)
		waited := waits(b)
		go func() { errc <- flush(b, b.mark()) }()
		recv(t, waited)
		aOwn.entered = make(chan struct{}, 1)
		st := readShare(t, dir)
		go func() { errc <- leadFlush(a, st.started, math.MaxUint64) }()
		require.NoError(t, recv(t, errc))
		require.NoError(t, recv(t, errc))
		require.EqualValues(t, 1, aOwn.calls.Load())
		require.EqualValues(t, 0, bOwn.calls.Load(), "b made a syncfs of its own")
		got := readShare(t, dir)
		require.Equal(t, got.started, got.done)
		require.Equal(t, a.opened, got.doneBy)
	})

	t.Run("BegunBeforeDoesNotCount", func(t *testing.T) {
		dir := t.TempDir()
		aOwn, bOwn := &countSyncer{}, &countSyncer{}
		a, b := joinShare(t, dir, aOwn), joinShare(t, dir, bOwn)
		release := leadHeld(t, a, aOwn)
		// a's syncfs began before b's call: it may have missed b's
		// changes, so b waits for it and then makes its own.
		errc := make(chan error, 1)
		waited := waits(b)
		go func() { errc <- flush(b, b.mark()) }()
		recv(t, waited)
		require.EqualValues(t, 0, bOwn.calls.Load(), "b did not wait for the syncfs under way")
		require.NoError(t, release())
		require.NoError(t, recv(t, errc))
		require.EqualValues(t, 1, bOwn.calls.Load())
		got := readShare(t, dir)
		require.Equal(t, b.opened, got.doneBy)
		require.EqualValues(t, 2, got.done)
	})

	t.Run("OpenedAfterTheChangeDoesNotCount", func(t *testing.T) {
		dir := t.TempDir()
		aOwn := &countSyncer{}
		a := joinShare(t, dir, aOwn)
		since := a.mark() // a's change is written now
		bOwn := &countSyncer{}
		b := joinShare(t, dir, bOwn) // b opens its syncfs after it
		ok, err := b.tryLock()
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, leadWhileWaiting(t, dir, b, a, func() error { return flush(a, since) }))
		require.EqualValues(t, 1, bOwn.calls.Load())
		require.EqualValues(t, 1, aOwn.calls.Load(), "a counted on a syncfs whose descriptor was opened after its change")
	})

	t.Run("GroupTakesEarliestMark", func(t *testing.T) {
		// A group's flush counts on another's only if it counts for the
		// change marked first (durability.syncMoves).
		dir := t.TempDir()
		aOwn, bOwn := &countSyncer{}, &countSyncer{}
		a := joinShare(t, dir, aOwn)
		first := a.mark()
		b := joinShare(t, dir, bOwn)
		_, _, err := a.read() // a learns of b's opening
		require.NoError(t, err)
		second := a.mark()
		require.Greater(t, second, first)
		d := &durability{movesFS: aOwn}
		d.share.Store(a)
		ok, err := b.tryLock()
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, leadWhileWaiting(t, dir, b, a, func() error {
			_, err := d.syncMoves([]*flushWaiter{{since: second}, {since: first}})
			return err
		}))
		require.EqualValues(t, 1, aOwn.calls.Load(), "the group counted on a syncfs opened after its first change")
	})

	t.Run("FailureLeavesEachAlone", func(t *testing.T) {
		dir := t.TempDir()
		aOwn, bOwn, eOwn := &countSyncer{}, &countSyncer{}, &countSyncer{}
		a, b, e := joinShare(t, dir, aOwn), joinShare(t, dir, bOwn), joinShare(t, dir, eOwn)
		aOwn.fail(syscall.EIO)
		release := leadHeld(t, a, aOwn)
		errc := make(chan error, 1)
		waited := waits(b)
		go func() { errc <- flush(b, b.mark()) }()
		recv(t, waited)
		require.ErrorIs(t, release(), syscall.EIO)
		// b makes its own syncfs, which reports the error if it was in
		// b's files (this one does not).
		require.NoError(t, recv(t, errc))
		require.EqualValues(t, 1, bOwn.calls.Load())
		require.Equal(t, readShare(t, dir).opens, readShare(t, dir).failedAt)

		// From now on both flush alone, even while a newcomer's syncfs
		// could cover them; the newcomer, opened after the failure, shares.
		aOwn.err.Store(nil)
		cOwn, dOwn := &countSyncer{}, &countSyncer{}
		c, d := joinShare(t, dir, cOwn), joinShare(t, dir, dOwn)
		// e, open at the failure, learns of it from the file alone, even
		// while another holds the lock: it flushes at once, and alone.
		ok, err := c.tryLock()
		require.NoError(t, err)
		require.True(t, ok)
		start := time.Now()
		require.NoError(t, flush(e, e.mark()))
		require.Less(t, time.Since(start), shareWait, "e waited for the lock after a failure")
		require.True(t, isAlone(e), "e shares on after a failure while it was open")
		require.EqualValues(t, 1, eOwn.calls.Load())
		c.unlock()
		release = leadHeld(t, c, cOwn)
		require.NoError(t, flush(b, math.MaxUint64))
		require.NoError(t, flush(a, math.MaxUint64))
		require.EqualValues(t, 2, bOwn.calls.Load())
		require.EqualValues(t, 2, aOwn.calls.Load())
		require.NoError(t, release())
		ok, err = c.tryLock()
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, leadWhileWaiting(t, dir, c, d, func() error { return flush(d, d.mark()) }))
		require.EqualValues(t, 0, dOwn.calls.Load(), "a process opened after the failure did not share")
	})

	t.Run("HolderThatDoesNotLetGo", func(t *testing.T) {
		dir := t.TempDir()
		aOwn, bOwn := &countSyncer{}, &countSyncer{}
		a, b := joinShare(t, dir, aOwn), joinShare(t, dir, bOwn)
		ok, err := a.tryLock() // and never a syncfs: stopped
		require.NoError(t, err)
		require.True(t, ok)
		start := time.Now()
		require.NoError(t, flush(b, b.mark()))
		took := time.Since(start)
		require.EqualValues(t, 1, bOwn.calls.Load())
		require.GreaterOrEqual(t, took, shareWait)
		t.Logf("the first flush waited %v", took)
		// Then b flushes alone for shareSolo, without waiting.
		start = time.Now()
		require.NoError(t, flush(b, b.mark()))
		require.Less(t, time.Since(start), shareWait)
		require.EqualValues(t, 2, bOwn.calls.Load())
		b.mu.Lock()
		b.soloUntil = time.Time{}
		b.mu.Unlock()
		a.unlock()
		require.NoError(t, flush(b, b.mark()))
		require.Equal(t, b.opened, readShare(t, dir).doneBy, "b did not share again once the holder let go")
	})

	t.Run("BadFileNotTrusted", func(t *testing.T) {
		dir := t.TempDir()
		aOwn := &countSyncer{}
		a := joinShare(t, dir, aOwn)
		p := filepath.Join(dir, dirLocks, syncShareName)
		// A state whose done is past every flush begun, with a good
		// checksum, and one with a bad checksum that says the same: a
		// group that trusted either would flush nothing.
		bad := shareState{started: 5, done: 1 << 40, doneBy: 1, opens: 3}.encode()
		torn := shareState{started: 5, done: 1 << 40, doneBy: 1, opens: 3}.encode()
		torn[41] ^= 0xff
		for _, b := range [][]byte{bad, torn, []byte("garbage")} {
			require.NoError(t, os.WriteFile(p, b, 0o644))
			calls := aOwn.calls.Load()
			require.NoError(t, flush(a, 0))
			require.Equal(t, calls+1, aOwn.calls.Load(), "a trusted %x", b)
			a.mu.Lock()
			a.alone = false // a rewritten file notes a failure for every process open
			a.mu.Unlock()
		}
		got := readShare(t, dir)
		require.True(t, got.valid())
		// The processes that were open go alone: the file may have lost
		// a failure.
		require.GreaterOrEqual(t, got.failedAt, a.opened)
		require.NoError(t, flush(a, 0))
		a.mu.Lock()
		require.True(t, a.alone)
		a.mu.Unlock()
	})

	t.Run("EmptiedWhileOpen", func(t *testing.T) {
		// Emptied under running processes, the file no longer shows
		// their openings or a failure it may have held: each process
		// that was open flushes alone from then on, and the openings
		// of newcomers cannot take the numbers of the old ones.
		dir := t.TempDir()
		aOwn, bOwn := &countSyncer{}, &countSyncer{}
		a, b := joinShare(t, dir, aOwn), joinShare(t, dir, bOwn)
		require.NoError(t, flush(a, a.mark()))
		require.NoError(t, os.Truncate(filepath.Join(dir, dirLocks, syncShareName), 0))
		c := joinShare(t, dir, &countSyncer{}) // reads the empty file as new
		require.NoError(t, flush(b, b.mark()))
		require.EqualValues(t, 1, bOwn.calls.Load())
		require.NoError(t, flush(a, a.mark()))
		require.EqualValues(t, 2, aOwn.calls.Load())
		for _, p := range []*syncShare{a, b, c} {
			require.NoError(t, flush(p, p.mark()))
			require.True(t, isAlone(p), "process %d shares on after the file was emptied", p.opened)
		}
		d := joinShare(t, dir, &countSyncer{})
		require.Greater(t, d.opened, uint64(afreshGap), "a newcomer's opening may take an old number")
		require.NoError(t, flush(d, d.mark()))
		require.False(t, isAlone(d))
	})

	t.Run("FileCannotBeWritten", func(t *testing.T) {
		// A file the process can no longer write (here: its descriptor
		// made read-only) fails no flush: the process makes its own
		// syncfs, and flushes alone from then on.
		dir := t.TempDir()
		own := &countSyncer{}
		a := joinShare(t, dir, own)
		ro, err := syscall.Open(filepath.Join(dir, dirLocks, syncShareName), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		require.NoError(t, err)
		require.NoError(t, syscall.Close(a.fd))
		a.fd = ro // closed by the test's cleanup
		require.NoError(t, flush(a, a.mark()))
		require.EqualValues(t, 1, own.calls.Load())
		require.True(t, isAlone(a), "a shares on through a file it cannot write")
		require.NoError(t, flush(a, a.mark()))
		require.EqualValues(t, 2, own.calls.Load())
	})

	t.Run("NotARegularFile", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, dirLocks), 0o755))
		p := filepath.Join(dir, dirLocks, syncShareName)
		require.NoError(t, syscall.Mkfifo(p, 0o644))
		own := &countSyncer{}
		_, err := joinSyncShare(p, 0o644, own, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "not a regular file")
		require.NoError(t, os.Remove(p))
		elsewhere := filepath.Join(t.TempDir(), "elsewhere")
		require.NoError(t, os.Symlink(elsewhere, p))
		_, err = joinSyncShare(p, 0o644, own, slog.New(slog.DiscardHandler))
		require.ErrorIs(t, err, syscall.ELOOP)
		_, err = os.Stat(elsewhere)
		require.ErrorIs(t, err, os.ErrNotExist, "the file was made through the link")
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Groups of several processes at once: each returns only once a
		// syncfs that began after its call has ended, and fewer syncfs
		// are made than groups.
		dir := t.TempDir()
		const procs, flushes = 4, 100
		c := &syncClock{}
		var shares []*syncShare
		for range procs {
			shares = append(shares, joinShare(t, dir, stampSyncer{c}))
		}
		var wg sync.WaitGroup
		for _, s := range shares {
			wg.Go(func() {
				for range flushes {
					floor := c.begun.Load()
					if !assert.NoError(t, flush(s, s.mark())) {
						return
					}
					assert.Greater(t, c.endedBegan.Load(), floor, "sync returned before a syncfs begun after its call ended")
				}
			})
		}
		wg.Wait()
		t.Logf("%d flushes of %d processes made %d syncfs", procs*flushes, procs, c.begun.Load())
		assert.Less(t, c.begun.Load(), int64(procs*flushes), "no flush was shared")
	})
}

// syncClock numbers the syncfs calls of several processes as they begin,
// and keeps the highest number of those that have ended.
type syncClock struct{ begun, endedBegan atomic.Int64 }

// stampSyncer is a syncfs of a process that reports to a syncClock.
type stampSyncer struct{ c *syncClock }

func (s stampSyncer) Sync() error {
	n := s.c.begun.Add(1)
	time.Sleep(2 * time.Millisecond) // a journal commit
	for {
		cur := s.c.endedBegan.Load()
		if n <= cur || s.c.endedBegan.CompareAndSwap(cur, n) {
			return nil
		}
	}
}

func (stampSyncer) Close() error { return nil }

// shareFlushesChild is the child of TestSyncShareAcrossProcesses: it
// opens the shared flushes of the store at dir, prints "joined", then
// obeys lines on stdin: "lock" takes the lock and prints "locked"; "lead"
// (with the lock) makes a flush, whose syncfs prints "syncfs", and prints
// "led".
func shareFlushesChild(dir string) error {
	own := &printSyncer{}
	s, err := joinSyncShare(filepath.Join(dir, dirLocks, syncShareName), 0o644, own, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	fmt.Println("joined")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "lock":
			if ok, err := s.tryLock(); err != nil || !ok {
				return fmt.Errorf("lock: %v %v", ok, err)
			}
			fmt.Println("locked")
		case "lead":
			st, _, err := s.read()
			if err != nil {
				return err
			}
			if err := leadFlush(s, st.started, math.MaxUint64); err != nil {
				return err
			}
			fmt.Println("led")
		}
	}
	return sc.Err()
}

// printSyncer is a syncfs that says so on stdout.
type printSyncer struct{}

func (printSyncer) Sync() error  { fmt.Println("syncfs"); return nil }
func (printSyncer) Close() error { return nil }

// TestSyncShareAcrossProcesses: the shared flushes between real
// processes. A group whose process finds another holding the lock is
// covered by that one's syncfs, which begins after its call, and makes
// none of its own; a holder stopped with the lock held delays it by
// shareWait at most, and a holder killed with it not at all.
func TestSyncShareAcrossProcesses(t *testing.T) {
	send := func(t *testing.T, c *testproc.Proc, line string) {
		_, err := fmt.Fprintln(c.Stdin(), line)
		require.NoError(t, err)
	}
	// start starts the other process, makes this one's share, and has
	// the other take the lock.
	start := func(t *testing.T) (string, *testproc.Proc, *syncShare, *countSyncer) {
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, dirLocks), 0o755))
		c := startChild(t, dir, "share-flushes")
		require.Equal(t, "joined", c.Next(t))
		own := &countSyncer{}
		s := joinShare(t, dir, own)
		send(t, c, "lock")
		require.Equal(t, "locked", c.Next(t))
		return dir, c, s, own
	}

	t.Run("Covered", func(t *testing.T) {
		_, c, s, own := start(t)
		errc := make(chan error, 1)
		waited := waits(s)
		go func() { errc <- flush(s, s.mark()) }()
		recv(t, waited)
		send(t, c, "lead")
		require.Equal(t, "syncfs", c.Next(t))
		require.Equal(t, "led", c.Next(t))
		require.NoError(t, recv(t, errc))
		require.EqualValues(t, 0, own.calls.Load(), "the group made a syncfs of its own")
	})

	t.Run("HolderStopped", func(t *testing.T) {
		_, c, s, own := start(t)
		require.NoError(t, c.Stop(t.Context()))
		began := time.Now()
		require.NoError(t, flush(s, s.mark()))
		took := time.Since(began)
		t.Logf("the flush took %v beside a stopped holder", took)
		require.EqualValues(t, 1, own.calls.Load())
		require.GreaterOrEqual(t, took, shareWait, "the flush did not wait for the holder")
		require.Less(t, took, time.Second)
		require.NoError(t, c.Signal(syscall.SIGCONT))
	})

	t.Run("HolderKilled", func(t *testing.T) {
		dir, c, s, own := start(t)
		require.NoError(t, c.Signal(syscall.SIGKILL))
		require.Error(t, c.Wait(t.Context()))
		began := time.Now()
		require.NoError(t, flush(s, s.mark()))
		require.Less(t, time.Since(began), shareWait, "the lock of a dead process was waited for")
		require.EqualValues(t, 1, own.calls.Load())
		require.Equal(t, s.opened, readShare(t, dir).doneBy, "the flush was not shared")
	})
}
