package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// stallBound is how long a call whose ctx has ended may take to return
// while another process holds the lock it waits for. The holders in these
// tests hold their locks until they are killed, so a call that waited for
// the lock instead of its ctx would never return: the bound only has to be
// well under "forever", and generous enough for a loaded machine.
const stallBound = 20 * time.Second

// returnsPromptly runs f and fails the test if it does not return within
// stallBound.
func returnsPromptly[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		t.Logf("%s returned after %v: %v", what, time.Since(start).Round(time.Millisecond), r.err)
		return r.v, r.err
	case <-time.After(stallBound):
		t.Fatalf("%s did not return while another process held a lock it needs", what)
		panic("unreachable")
	}
}

// startHolder starts a process that holds the record locks of the jobs
// ids names (comma-separated; "all": every job there is) until the test
// ends, as a process stopped in the middle of changing those jobs would.
func startHolder(t *testing.T, dir, ids string) *testproc.Proc {
	t.Helper()
	c := startChild(t, dir, "hold-locks", childKey+"="+ids)
	require.Equal(t, "locked", c.Next(t))
	return c
}

// format2Stripe returns the record lock file that job id shared with
// other jobs in format 2 (1,024 files, FNV-1a of the ID): the jobs that a
// process stopped while it held id's lock used to delay.
func format2Stripe(id string) string {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= prime
	}
	return fmt.Sprintf("rec-%03x.lock", h%1024)
}

// TestFormat2StripeIsStable pins format2Stripe to the mapping format-2
// programs used (TestStoppedProcessDelaysOnlyItsOwnJobs picks its jobs by it).
func TestFormat2StripeIsStable(t *testing.T) {
	require.Equal(t, "rec-1d2.lock", format2Stripe("01M8MF4X6JB95R7N94JRT3F3R4"))
}

// TestStoppedProcessDelaysOnlyItsOwnJobs: a process stopped (SIGSTOP)
// while it holds the record lock of job X, as one stopped in the middle of
// a Complete or a SubmitBatch of X does, delays nothing of job Y, another
// process's job that shared X's lock file in format 2: Get, Claim,
// Complete and Wait of Y, and Get and List (which show X too), return at
// once, with no deadline. Each job has its own lock file, and reads take
// none.
func TestStoppedProcessDelaysOnlyItsOwnJobs(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	// Submit until two jobs share a format-2 lock file; set the others
	// aside so that Claim has only these two to choose from.
	byStripe := map[string]jobstore.Job{}
	var x, y jobstore.Job
	for x.ID == "" {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		if prev, ok := byStripe[format2Stripe(j.ID)]; ok {
			x, y = prev, j
			delete(byStripe, format2Stripe(j.ID))
			break
		}
		byStripe[format2Stripe(j.ID)] = j
	}
	for _, j := range byStripe {
		_, err := s.Cancel(ctx, j.ID)
		require.NoError(t, err)
	}
	holder := startHolder(t, dir, x.ID)
	require.NoError(t, holder.Signal(syscall.SIGSTOP))
	defer func() { _ = holder.Signal(syscall.SIGCONT) }()

	got, err := returnsPromptly(t, "Get", func() (jobstore.Job, error) { return s.Get(ctx, y.ID) })
	require.NoError(t, err)
	require.Equal(t, y, got)
	got, err = returnsPromptly(t, "Get", func() (jobstore.Job, error) { return s.Get(ctx, x.ID) })
	require.NoError(t, err)
	require.Equal(t, x, got)
	claimed, err := returnsPromptly(t, "Claim", func() (jobstore.Job, error) {
		return s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	})
	require.NoError(t, err)
	require.Equal(t, y.ID, claimed.ID, "Claim did not take the job beside the stopped process's")
	_, err = returnsPromptly(t, "Complete", func() (jobstore.Job, error) {
		return s.Complete(ctx, claimed.Lease(), jobstore.Succeeded(nil))
	})
	require.NoError(t, err)
	got, err = returnsPromptly(t, "Wait", func() (jobstore.Job, error) { return s.Wait(ctx, y.ID) })
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
	// Every job on one page: until two shared a stripe, the loop above
	// may have submitted more than a default page's 100.
	page, err := returnsPromptly(t, "List", func() (jobstore.Page, error) {
		return s.List(ctx, jobstore.ListOptions{Limit: jobstore.MaxListLimit})
	})
	require.NoError(t, err)
	require.Len(t, page.Jobs, len(byStripe)+2)
	require.Empty(t, page.Errors)
}

// TestLockWaitsEndWithCtx: a process that holds a job's record lock (as a
// stopped or hung process would) delays a change of that job (Cancel) only
// until its ctx ends, which it then returns. Claim takes the next claimable
// job rather than wait for the locked one, although the locked one is more
// urgent, and says there is none for now once only the locked one is left.
// Both protocols: range locks (Linux) and a lock file per job.
func TestLockWaitsEndWithCtx(t *testing.T) {
	forEachLockProtocol(t, testLockWaitsEndWithCtx)
}

func testLockWaitsEndWithCtx(t *testing.T, dir string) {
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	urgent, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Priority: 10})
	require.NoError(t, err)
	other, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	startHolder(t, dir, urgent.ID)

	c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = returnsPromptly(t, "Cancel", func() (jobstore.Job, error) { return s.Cancel(c, urgent.ID) })
	require.ErrorIs(t, err, context.DeadlineExceeded)

	j, err := returnsPromptly(t, "Claim", func() (jobstore.Job, error) {
		return s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	})
	require.NoError(t, err)
	require.Equal(t, other.ID, j.ID, "Claim waited for the locked job instead of taking the next")
	_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)

	// Only the locked job is left: Claim says there is none for now, and
	// asks to be called again soon.
	_, err = returnsPromptly(t, "Claim", func() (jobstore.Job, error) {
		return s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	})
	var nj *jobstore.NoJobError
	require.ErrorAs(t, err, &nj)
	require.False(t, nj.NextRunAt.IsZero())
}

// TestReadsTakeNoLock: Get, Wait, List and Stats take no record lock, so a
// process that holds the lock of the job they read (as a process stopped
// in the middle of changing it would) delays none of them: each returns
// the job at once, with no deadline.
func TestReadsTakeNoLock(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	j, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	startHolder(t, dir, j.ID)

	got, err := returnsPromptly(t, "Get", func() (jobstore.Job, error) { return s.Get(ctx, j.ID) })
	require.NoError(t, err)
	require.Equal(t, j, got)
	got, err = returnsPromptly(t, "Wait", func() (jobstore.Job, error) { return s.Wait(ctx, j.ID) })
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	// Every job on one page: until two shared a stripe, the loop above
	// may have submitted more than a default page's 100.
	page, err := returnsPromptly(t, "List", func() (jobstore.Page, error) {
		return s.List(ctx, jobstore.ListOptions{Limit: jobstore.MaxListLimit})
	})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	st, err := returnsPromptly(t, "Stats", func() (jobstore.Stats, error) { return s.Stats(ctx) })
	require.NoError(t, err)
	require.Equal(t, 1, st.Counts[jobstore.StateCanceled])
}

// TestSubmitNotDelayedByHeldLocks: Submit and SubmitBatch take only the
// record locks of their new jobs, which nobody else knows yet, so a
// process that holds every record lock there is (as one stopped in the
// middle of a large SubmitBatch holds hundreds) delays none of them, with
// or without a key. Only a Submit of the key of a queued job whose lock is
// held waits, until its ctx ends: that job's own submit may be under way.
func TestSubmitNotDelayedByHeldLocks(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "held"})
	require.NoError(t, err)
	for range 20 {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	// Another Store, whose key cache may not know the key (opened first:
	// its cleanup, a check of the store, runs after the holder is gone).
	s2 := openAt(t, dir, &Options{NoSync: true})
	startHolder(t, dir, "all")
	for _, key := range []string{"", "new"} {
		_, err := returnsPromptly(t, "Submit", func() (jobstore.Job, error) {
			j, _, err := s2.Submit(ctx, jobstore.Spec{Kind: "k", Key: key})
			return j, err
		})
		require.NoError(t, err)
	}
	out, err := returnsPromptly(t, "SubmitBatch", func() ([]jobstore.Submitted, error) {
		return s2.SubmitBatch(ctx, []jobstore.Spec{{Kind: "k", Key: "batch"}, {Kind: "k"}})
	})
	require.NoError(t, err)
	require.Len(t, out, 2)
	// The key of a queued job whose lock is held: its submit may still be
	// under way in the holder (a failed fsync would take the job back), so
	// this Submit waits for it, until its ctx ends.
	c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = returnsPromptly(t, "Submit", func() (jobstore.Job, error) {
		j, _, err := s2.Submit(c, jobstore.Spec{Kind: "k", Key: "held"})
		return j, err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestOpenSkipsLockedRepairs: the repairs Open makes (a dead worker's job,
// a key file whose job was never published) need record locks; when a
// stopped process holds them, Open still returns, and the repairs are made
// later, once the locks are free.
func TestOpenSkipsLockedRepairs(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	// No recovery of its own: the recovery passes below are the test's.
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	dead, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	// Another Store claims the job and goes away without completing it.
	other, err := Open(ctx, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err)
	_, err = other.Claim(ctx, jobstore.ClaimRequest{Worker: "gone"})
	require.NoError(t, err)
	require.NoError(t, other.Close())
	// A key file whose job was never published.
	orphan := jobstore.NewJob(jobstore.Spec{Kind: "k", Key: "orphan"}, time.Now())
	data, err := encodeRecord(envelope{Rev: 1, Job: orphan})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.keyPath(keyName("orphan")), data, 0o600))

	holder := startChild(t, dir, "hold-locks", childKey+"="+dead.ID+","+orphan.ID)
	require.Equal(t, "locked", holder.Next(t))
	c, cancel := context.WithTimeout(ctx, stallBound)
	defer cancel()
	s2, err := returnsPromptly(t, "Open", func() (*Store, error) {
		return Open(c, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	})
	require.NoError(t, err)
	defer s2.Close()
	_, err = returnsPromptly(t, "Fsck", func() (Report, error) {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return s2.Fsck(c, false)
	})
	require.ErrorIs(t, err, context.DeadlineExceeded, "Fsck waits for locks, until its ctx ends")

	// The holder goes away: recovery and the next submit of the key
	// finish what Open left.
	require.NoError(t, holder.Signal(syscall.SIGKILL))
	_ = holder.Wait(t.Context())
	_, err = s2.recoverDead(ctx, true)
	require.NoError(t, err)
	j, err := s2.Get(ctx, dead.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, 1, j.Attempt)
	j, created, err := s2.Submit(ctx, jobstore.Spec{Kind: "k", Key: "orphan"})
	require.NoError(t, err)
	require.True(t, created, "the key of a job never published was not freed")
	require.NotEqual(t, orphan.ID, j.ID)
}

// stopInsideChild is the child of TestProcessStoppedInsideAChange: on
// the store in childDir it submits a job of kind "x" (childKey "submit"),
// or submits, claims and completes one (childKey "complete"), and stops
// itself (SIGSTOP) at the worst moment of that Submit or Complete: at the
// fsync of the directory the record went to (for a Submit through the
// submission journal, the fdatasync of its entry), with the job's record
// lock held, its record in place (for a Complete, its old copy in claimed/ not
// yet removed) and, for a Complete, its lease held. It prints "stopping
// ID" first.
func stopInsideChild() int {
	ctx := context.Background()
	mode := os.Getenv(childKey)
	var armed atomic.Bool
	var id atomic.Value
	id.Store("a new job") // a Submit's ID is known only inside it
	want := dirQueued
	if mode == "complete" {
		want = dirDone
	}
	inj := &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		// A journaled Submit's worst moment is its journal's fdatasync,
		// under the journal's mutex; a Complete's, the fsync of done/.
		at := op == fsfault.SyncDir && filepath.Base(path) == want || mode == "submit" && op == fsfault.JournalSync
		if at && armed.CompareAndSwap(true, false) {
			fmt.Printf("stopping %s\n", id.Load())
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
		return nil
	}}
	s, err := Open(ctx, os.Getenv(childDir), &Options{Faults: inj.Func(), RecoverInterval: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	if mode == "submit" {
		s.journalFor(ctx) // taken (made, written, fsynced) before the stop is armed
		journalFromNow(s)
		armed.Store(true)
		_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "x"})
	} else {
		var j jobstore.Job
		if j, _, err = s.Submit(ctx, jobstore.Spec{Kind: "x"}); err == nil {
			if j, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "stopped", Kinds: []string{"x"}}); err == nil {
				id.Store(j.ID)
				armed.Store(true)
				_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stop-inside:", err)
		return 1
	}
	select {} // until killed
}

// TestProcessStoppedInsideAChange: a process stopped inside a Submit or a
// Complete, at the moment it holds the most (a journaled Submit: the
// journal's mutex, its fdatasync under way; a Complete: the job's record
// lock, its lease, the record written and the fsync of its directory
// under way),
// delays no operation on any other job: Get, Cancel, Claim, Complete and
// List of other jobs return without waiting for it (a wait would last
// until the process is killed). How long each took is logged; the
// benchmarks and the torture run hold the figures.
func TestProcessStoppedInsideAChange(t *testing.T) {
	for _, mode := range []string{"submit", "complete"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			s := openAt(t, dir, nil)
			ctx := t.Context()
			y1, _, err := s.Submit(ctx, jobstore.Spec{Kind: "y"})
			require.NoError(t, err)
			y2, _, err := s.Submit(ctx, jobstore.Spec{Kind: "y"})
			require.NoError(t, err)

			c := startChild(t, dir, "stop-inside", childKey+"="+mode)
			line := c.Next(t)
			require.True(t, strings.HasPrefix(line, "stopping "), "child said %q", line)
			stopCtx, cancel := context.WithTimeout(ctx, stallBound)
			defer cancel()
			require.NoError(t, c.Stop(stopCtx))
			defer func() { _ = c.Signal(syscall.SIGCONT) }()

			timed := func(what string, f func() error) {
				t.Helper()
				start := time.Now()
				_, err := returnsPromptly(t, what, func() (struct{}, error) { return struct{}{}, f() })
				require.NoError(t, err, what)
				t.Logf("%s (other jobs) while a process is stopped inside a %s: %s", what, mode, time.Since(start).Round(10*time.Microsecond))
			}
			timed("Get", func() error { _, err := s.Get(ctx, y1.ID); return err })
			var claimed jobstore.Job
			timed("Claim", func() error {
				var err error
				claimed, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"y"}})
				return err
			})
			timed("Complete", func() error { _, err := s.Complete(ctx, claimed.Lease(), jobstore.Succeeded(nil)); return err })
			other := y2
			if claimed.ID == y2.ID {
				other = y1
			}
			timed("Cancel", func() error { _, err := s.Cancel(ctx, other.ID); return err })
			// Two of this test's jobs, and the stopped process's, but for
			// a journaled submit's, which is named in queued/ only once
			// its entry is durable.
			want, whose := 3, "two of this test's, one of the stopped process's"
			if mode == "submit" && s.journaling() {
				want, whose = 2, "this test's; the stopped process's submit is not durable yet"
			}
			timed("List", func() error {
				page, err := s.List(ctx, jobstore.ListOptions{})
				if err == nil && len(page.Jobs) != want {
					err = fmt.Errorf("List shows %d jobs, want %d (%s): %v", len(page.Jobs), want, whose, page.Jobs)
				}
				return err
			})
			timed("Stats", func() error { _, err := s.Stats(ctx); return err })
		})
	}
}

// TestNextLockPoll: a lock wait retries every 0.1 to 0.25 ms for its
// first 5 ms, the length of a common hold (a write and an fsync), then
// backs off, doubling, to 10 ms, so that a lock a stopped process holds
// costs its waiters a try every 10 ms.
func TestNextLockPoll(t *testing.T) {
	var waited time.Duration
	delay := lockPollMin
	var fast []time.Duration
	for waited < lockPollFastFor {
		fast = append(fast, delay)
		waited += delay
		delay = nextLockPoll(delay, waited)
	}
	require.Equal(t, []time.Duration{lockPollMin, 2 * lockPollMin}, fast[:2])
	for _, d := range fast[2:] {
		require.Equal(t, lockPollFast, d, "a retry in the first %v came after %v", lockPollFastFor, d)
	}
	var slow []time.Duration
	for range 10 {
		slow = append(slow, delay)
		waited += delay
		delay = nextLockPoll(delay, waited)
	}
	require.Equal(t, 2*lockPollFast, slow[0])
	require.Equal(t, lockPollMax, slow[len(slow)-1])
	for i := 1; i < len(slow); i++ {
		require.Equal(t, min(2*slow[i-1], lockPollMax), slow[i])
	}
}
