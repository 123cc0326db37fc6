package filestore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// cycleKind is the kind of the job cycleJob moves around.
const cycleKind = "cycle"

// cycleJob moves the one job of kind cycleKind as fast as it can until
// ctx ends: claimed/ -> queued/ (a failure with attempts left, retried at
// once) while attempts last, then claimed/ -> done/ (a final failure) ->
// queued/ (Retry). It calls started after its first round.
func cycleJob(ctx context.Context, s *Store, worker string, started func()) error {
	for round := 0; ; round++ {
		if round == 1 && started != nil {
			started()
		}
		j, err := claimOne(ctx, s, worker)
		if err == nil && j.Kind != cycleKind {
			err = fmt.Errorf("claimed a job of kind %s", j.Kind)
		}
		if err == nil {
			final := j.Attempt >= j.MaxAttempts
			j, err = s.Complete(ctx, j.Lease(), jobstore.Outcome{Error: "again", RetryAfter: time.Nanosecond})
			if err == nil && final {
				_, err = s.Retry(ctx, j.ID)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// still is how many jobs stay put in each state directory while one moves.
const still = 200

// TestListStatsSeeMovingJobOnce: a job that exists throughout a List or a
// Stats call, while it moves between queued/, claimed/ and done/ as fast
// as another goroutine or another process can move it, is listed exactly
// once by every List and counted exactly once by every Stats.
func TestListStatsSeeMovingJobOnce(t *testing.T) {
	for _, where := range []string{"goroutine", "process"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			// NoSync: the job moves as fast as the filesystem renames.
			s := openAt(t, dir, &Options{NoSync: true})
			ctx := t.Context()
			// Jobs that stay put in every state directory, enough of them
			// that reading a directory takes a while: queued for later,
			// running (claimed here and held), and canceled in done/.
			batch := func(runAt time.Time) []jobstore.Submitted {
				specs := make([]jobstore.Spec, still)
				for i := range specs {
					specs[i] = jobstore.Spec{Kind: "still", RunAt: runAt}
				}
				subs, err := s.SubmitBatch(ctx, specs)
				require.NoError(t, err)
				return subs
			}
			batch(time.Time{})
			for range still {
				_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "holder"})
				require.NoError(t, err)
			}
			batch(time.Now().Add(time.Hour))
			for _, sub := range batch(time.Now().Add(time.Hour)) {
				_, err := s.Cancel(ctx, sub.Job.ID)
				require.NoError(t, err)
			}
			moving, _, err := s.Submit(ctx, jobstore.Spec{Kind: cycleKind, MaxAttempts: 1000})
			require.NoError(t, err)
			const total = 3*still + 1

			cctx, stop := context.WithCancel(ctx)
			if where == "goroutine" {
				started := make(chan struct{})
				done := make(chan error, 1)
				go func() { done <- cycleJob(cctx, s, "cycler", func() { close(started) }) }()
				t.Cleanup(func() {
					stop()
					require.NoError(t, <-done)
				})
				select {
				case <-started:
				case err := <-done:
					require.NoError(t, err)
					t.Fatal("the cycler stopped")
				}
			} else {
				defer stop()
				c := startChild(t, dir, "cycle", childNoSync+"=1")
				require.Equal(t, "cycling", c.Next(t))
			}

			const calls = 100
			for i := range calls {
				p, err := s.List(ctx, jobstore.ListOptions{Kind: cycleKind})
				require.NoError(t, err)
				n := 0
				for _, j := range p.Jobs {
					if j.ID == moving.ID {
						n++
					}
				}
				require.Equal(t, 1, n, "List %d of %d: the moving job seen %d times", i+1, calls, n)

				st, err := s.Stats(ctx)
				require.NoError(t, err)
				sum := 0
				for _, c := range st.Counts {
					sum += c
				}
				require.Equal(t, total, sum, "Stats %d of %d: %v", i+1, calls, st.Counts)
				sum = 0
				for _, c := range st.Kinds[cycleKind] {
					sum += c
				}
				require.Equal(t, 1, sum, "Stats %d of %d: the moving job counted %d times: %v", i+1, calls, sum, st.Kinds)
			}
		})
	}
}

// cycleChild is the "cycle" child role: it moves the job of kind
// cycleKind around until killed.
func cycleChild(ctx context.Context, s *Store, worker string) error {
	err := cycleJob(ctx, s, worker, func() { fmt.Println("cycling") })
	if err == nil {
		err = errors.New("stopped")
	}
	return err
}

// TestMoveRecorder: a recorder holds the IDs of the jobs that moved before
// its barrier, and says so when events may have been lost (a rebuilt
// watcher), so that List and Stats read a second time.
func TestMoveRecorder(t *testing.T) {
	s := openTest(t, nil)
	ctx := t.Context()

	r := s.recordMoves()
	require.NotNil(t, r, "the store has a watcher")
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	ids, complete, err := s.finishMoves(ctx, r)
	require.NoError(t, err)
	require.True(t, complete)
	require.Contains(t, ids, j.ID)

	r = s.recordMoves()
	require.NotNil(t, r)
	ids, complete, err = s.finishMoves(ctx, r)
	require.NoError(t, err)
	require.True(t, complete)
	require.Empty(t, ids, "nothing moved")

	r = s.recordMoves()
	require.NotNil(t, r)
	s.watchMu.Lock()
	w := s.watcher
	s.watchMu.Unlock()
	s.rebuildWatcher(w) // as after an overflow
	_, complete, err = s.finishMoves(ctx, r)
	require.NoError(t, err)
	require.False(t, complete, "events may have been lost")

	s.mu.Lock()
	n := len(s.recorders)
	s.mu.Unlock()
	require.Zero(t, n, "every recorder is unregistered")
}

// TestBarrierOfAnotherStoreEndsNoWait: two Stores on one directory that
// have made as many listings as each other, as two processes that are
// each PID 1 of their own PID namespace would have, name their barriers
// apart, and the event of one's barrier does not end the other's wait:
// a wait ended early would read an index that lacks the changes made
// before the call.
func TestBarrierOfAnotherStoreEndsNoWait(t *testing.T) {
	dir := t.TempDir()
	a, b := openAt(t, dir, nil), openAt(t, dir, nil)
	ctx := t.Context()
	b.barrierSeq.Store(a.barrierSeq.Load())

	ra, rb := a.recordMoves(), b.recordMoves()
	require.NotNil(t, ra)
	require.NotNil(t, rb)
	require.NotEqual(t, ra.barrier, rb.barrier, "the barriers of two Stores share a name")
	_, complete, err := b.finishMoves(ctx, rb)
	require.NoError(t, err)
	require.True(t, complete)

	// Once a's watcher has handled a later barrier of a's own, it has
	// handled b's.
	_, complete, err = a.finishMoves(ctx, a.recordMoves())
	require.NoError(t, err)
	require.True(t, complete)
	select {
	case <-ra.done:
		t.Fatal("the event of another Store's barrier ended a wait")
	default:
	}
	_, complete, err = a.finishMoves(ctx, ra)
	require.NoError(t, err)
	require.True(t, complete)
}

// TestListWithoutIndex: a List that does not want done/ lists the
// directories it wants instead of building the index, which would list
// done/, the history, too; it still sees a job that keeps moving between
// queued/ and claimed/ exactly once per call. A List that wants done/,
// or one whose listing meets more than directListMax names, builds the
// index for the calls after it.
func TestListWithoutIndex(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	specs := make([]jobstore.Spec, still)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "still", RunAt: time.Now().Add(time.Hour)}
	}
	subs, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	for _, sub := range subs {
		_, err := s.Cancel(ctx, sub.Job.ID)
		require.NoError(t, err)
	}
	_, err = s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	const moves = 300 // a release counts an attempt: fewer than MaxAttempts
	moving, _, err := s.Submit(ctx, jobstore.Spec{Kind: cycleKind, MaxAttempts: 1000})
	require.NoError(t, err)

	// The job moves between queued/ and claimed/ only, claimed and then
	// released, with a pause after each move, while the test lists. (With
	// no pauses a Get can miss a job that moves between each of its passes
	// over the directories, with or without the index; see readShared.)
	done := make(chan error, 1)
	go func() {
		for n := 0; n < moves; {
			j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "mover"})
			if errors.Is(err, jobstore.ErrNoJob) {
				continue // not yet seen back in queued/
			}
			if err == nil && j.ID != moving.ID {
				err = fmt.Errorf("claimed %s, not the moving job", j.ID)
			}
			if err == nil {
				time.Sleep(100 * time.Microsecond)
				err = s.Release(ctx, j.Lease())
				time.Sleep(100 * time.Microsecond)
			}
			if err != nil {
				done <- err
				return
			}
			n++
		}
		done <- nil
	}()

	opts := jobstore.ListOptions{Kind: cycleKind, States: []jobstore.State{jobstore.StateQueued, jobstore.StateRunning}}
	lists := 0
	for busy := true; busy; lists++ {
		select {
		case err := <-done:
			require.NoError(t, err)
			busy = false
		default:
		}
		p, err := s.List(ctx, opts)
		require.NoError(t, err)
		require.Len(t, p.Jobs, 1, "List %d", lists+1)
	}
	require.Greater(t, lists, 10, "too few Lists while the job moved")
	require.False(t, s.indexIsReady(), "a List of queued and running jobs built the index")

	p, err := s.List(ctx, jobstore.ListOptions{Kind: "still", States: []jobstore.State{jobstore.StateQueued}, Limit: 3})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 3)
	require.False(t, s.indexIsReady(), "a listing of %d names built the index", still+1)

	p, err = s.List(ctx, jobstore.ListOptions{Kind: "still", States: []jobstore.State{jobstore.StateCanceled}, Limit: 3})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 3)
	require.True(t, s.indexIsReady(), "a List of finished jobs did not build the index")
}

// TestListWithoutIndexBuildsItForMany: a List whose direct listing meets
// more than directListMax names builds the index for the next calls.
func TestListWithoutIndexBuildsItForMany(t *testing.T) {
	s := openTest(t, &Options{NoSync: true})
	ctx := t.Context()
	specs := make([]jobstore.Spec, directListMax+1)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	_, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	p, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
	require.True(t, s.indexIsReady())
}
