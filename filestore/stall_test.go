package filestore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// holdStripes starts a process that holds the record lock files names
// ("all": every one) until the test ends.
func holdStripes(t *testing.T, dir, names string) {
	t.Helper()
	c := startChild(t, dir, "hold-locks", childKey+"="+names)
	require.Equal(t, "locked", c.Next(t))
}

// idOnStripe returns a new job ID whose record lock is stripe.
func idOnStripe(t *testing.T, stripe string) string {
	t.Helper()
	for range 1 << 20 {
		if id := jobstore.NewID(time.Now()); stripeName(id) == stripe {
			return id
		}
	}
	t.Fatal("no ID found for the stripe")
	return ""
}

// TestLockWaitsEndWithCtx: a process that holds a job's record lock (as a
// stopped or hung process would) delays Get, Wait and List of that job only
// until their ctx ends; they then return the ctx error. Other jobs are not
// delayed, and Claim takes the next claimable job rather than wait for the
// locked one, although the locked one is more urgent.
func TestLockWaitsEndWithCtx(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	urgent, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Priority: 10})
	require.NoError(t, err)
	var other jobstore.Job
	for {
		other, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		if stripeName(other.ID) != stripeName(urgent.ID) {
			break
		}
	}
	holdStripes(t, dir, stripeName(urgent.ID))

	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 200*time.Millisecond) }
	c, cancel := short()
	defer cancel()
	_, err = returnsPromptly(t, "Get", func() (jobstore.Job, error) { return s.Get(c, urgent.ID) })
	require.ErrorIs(t, err, context.DeadlineExceeded)

	c, cancel = short()
	defer cancel()
	_, err = returnsPromptly(t, "Wait", func() (jobstore.Job, error) { return s.Wait(c, urgent.ID) })
	require.ErrorIs(t, err, context.DeadlineExceeded)

	c, cancel = short()
	defer cancel()
	_, err = returnsPromptly(t, "List", func() (jobstore.Page, error) { return s.List(c, jobstore.ListOptions{}) })
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A job on another lock is not delayed at all.
	j, err := s.Get(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, other.ID, j.ID)

	c, cancel = context.WithTimeout(ctx, stallBound)
	defer cancel()
	j, err = returnsPromptly(t, "Claim", func() (jobstore.Job, error) {
		return s.Claim(c, jobstore.ClaimRequest{Worker: "w"})
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

// TestSubmitLockWaitEndsWithCtx: Submit and SubmitBatch take the record
// locks of their new jobs; when a stopped process holds every record lock,
// they return their ctx error.
func TestSubmitLockWaitEndsWithCtx(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	holdStripes(t, dir, "all")
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(t.Context(), 200*time.Millisecond)
	}
	for _, key := range []string{"", "stalled"} {
		c, cancel := short()
		defer cancel()
		_, err := returnsPromptly(t, "Submit", func() (jobstore.Job, error) {
			j, _, err := s.Submit(c, jobstore.Spec{Kind: "k", Key: key})
			return j, err
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	c, cancel := short()
	defer cancel()
	_, err := returnsPromptly(t, "SubmitBatch", func() ([]jobstore.Submitted, error) {
		return s.SubmitBatch(c, []jobstore.Spec{{Kind: "k", Key: "stalled-too"}, {Kind: "k"}})
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestSubmitAvoidsLockedStripes: a process stopped while it holds record
// locks (one stopped in a large SubmitBatch holds hundreds) does not delay
// Submit: a new job whose record lock is busy gets another ID.
func TestSubmitAvoidsLockedStripes(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	var held []string
	busy := make(map[string]bool)
	for n := 0; n < lockStripes; n += 2 {
		name := fmt.Sprintf("rec-%03x%s", n, recordLock)
		held = append(held, name)
		busy[name] = true
	}
	holdStripes(t, dir, strings.Join(held, ","))
	c, cancel := context.WithTimeout(t.Context(), stallBound)
	defer cancel()
	for i := range 20 {
		j, err := returnsPromptly(t, "Submit", func() (jobstore.Job, error) {
			key := ""
			if i%2 == 0 {
				key = fmt.Sprint("key-", i)
			}
			j, _, err := s.Submit(c, jobstore.Spec{Kind: "k", Key: key})
			return j, err
		})
		require.NoError(t, err)
		require.False(t, busy[stripeName(j.ID)], "a new job on a lock held elsewhere")
	}
}

// TestOpenSkipsLockedRepairs: the repairs Open makes (a dead worker's job,
// a key file whose job was never published) need record locks; when a
// stopped process holds them, Open still returns, and the repairs are made
// later, once the locks are free.
func TestOpenSkipsLockedRepairs(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openAt(t, dir, &Options{NoSync: true})
	dead, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	// Another Store claims the job and goes away without completing it.
	other, err := Open(ctx, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err)
	_, err = other.Claim(ctx, jobstore.ClaimRequest{Worker: "gone"})
	require.NoError(t, err)
	require.NoError(t, other.Close())
	// A key file whose job, on the same lock, was never published.
	orphan := jobstore.NewJob(jobstore.Spec{Kind: "k", Key: "orphan"}, time.Now())
	orphan.ID = idOnStripe(t, stripeName(dead.ID))
	data, err := encodeRecord(envelope{Rev: 1, Job: orphan})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.keyPath(keyName("orphan")), data, 0o600))

	holder := startChild(t, dir, "hold-locks", childKey+"="+stripeName(dead.ID))
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
