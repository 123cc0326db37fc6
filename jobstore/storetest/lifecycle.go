package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var pruneTests = []test{
	{"OnlyTerminalOlderThanCutoff", testPrune},
	{"OnlyGivenStates", testPruneStates},
}

func testPruneStates(t *testing.T, s jobstore.Store) {
	sp, ok := s.(jobstore.StatePruner)
	if !ok {
		t.Skip("the store is not a jobstore.StatePruner")
	}
	ctx := t.Context()
	byState := jobsInEveryState(t, s, func(jobstore.State) string { return "" })
	_, err := sp.PruneStates(ctx, 0, []jobstore.State{jobstore.StateQueued})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput, "a queued job is never pruned")

	time.Sleep(20 * time.Millisecond)
	n, err := sp.PruneStates(ctx, 10*time.Millisecond, []jobstore.State{jobstore.StateFailed, jobstore.StateCanceled})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for st, j := range byState {
		_, err := s.Get(ctx, j.ID)
		if st == jobstore.StateFailed || st == jobstore.StateCanceled {
			require.ErrorIs(t, err, jobstore.ErrNotFound, "%s job still there", st)
		} else {
			require.NoError(t, err, "%s job pruned", st)
		}
	}
	n, err = sp.PruneStates(ctx, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n, "no states: every terminal state")
	_, err = s.Get(ctx, byState[jobstore.StateSucceeded].ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testPrune(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	byState := jobsInEveryState(t, s, func(st jobstore.State) string { return "key-" + string(st) })
	delayed := submit(t, s, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Hour)})

	n, err := s.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n, "pruned jobs that finished less than an hour ago")

	time.Sleep(20 * time.Millisecond)
	n, err = s.Prune(ctx, 10*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 3, n, "want the succeeded, failed and canceled jobs pruned")
	for st, j := range byState {
		_, err := s.Get(ctx, j.ID)
		if st.Terminal() {
			require.ErrorIs(t, err, jobstore.ErrNotFound, "%s job still there after prune", st)
			_, err = s.Wait(ctx, j.ID)
			require.ErrorIs(t, err, jobstore.ErrNotFound)
		} else {
			require.NoError(t, err, "%s job pruned", st)
		}
	}
	get(t, s, delayed.ID)

	n, err = s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n, "queued and running jobs are never pruned")

	p, err := s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{delayed.ID, byState[jobstore.StateQueued].ID, byState[jobstore.StateRunning].ID, byState[jobstore.StateWaiting].ID}, ids(p.Jobs))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Counts[jobstore.StateQueued])
	require.Equal(t, 1, st.Counts[jobstore.StateRunning])
	require.Zero(t, st.Counts[jobstore.StateSucceeded]+st.Counts[jobstore.StateFailed]+st.Counts[jobstore.StateCanceled])

	// Pruned keys are free again; the others are still taken.
	for st, j := range byState {
		again, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: j.Key})
		require.NoError(t, err)
		require.Equal(t, st.Terminal(), created, "key of the pruned=%v %s job", st.Terminal(), st)
		if !created {
			require.Equal(t, j.ID, again.ID)
		}
	}
}

var statsTests = []test{
	{"CountsEveryState", testStats},
}

func testStats(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	for _, state := range jobstore.States() {
		n, ok := st.Counts[state]
		require.True(t, ok, "Counts lacks %s", state)
		require.Zero(t, n)
	}
	require.Len(t, st.Counts, len(jobstore.States()))
	require.NotNil(t, st.Kinds)
	require.Empty(t, st.Kinds)
	require.True(t, st.OldestQueuedAt.IsZero())

	byState := jobsInEveryState(t, s, func(jobstore.State) string { return "" })
	submit(t, s, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Hour)}) // queued, not due
	submitKind(t, s, "k")                                                    // queued, due, newer
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[jobstore.State]int{
		jobstore.StateQueued: 3, jobstore.StateRunning: 1, jobstore.StateSucceeded: 1,
		jobstore.StateFailed: 1, jobstore.StateCanceled: 1, jobstore.StateWaiting: 1,
	}, st.Counts)
	kinds := map[string]map[jobstore.State]int{"k": {jobstore.StateQueued: 2}}
	for state, j := range byState {
		kinds[j.Kind] = map[jobstore.State]int{state: 1}
	}
	require.Equal(t, kinds, st.Kinds, "counts by kind")
	oldest := byState[jobstore.StateQueued].RunAt
	require.True(t, st.OldestQueuedAt.Equal(oldest), "OldestQueuedAt %s, want %s", st.OldestQueuedAt, oldest)
}

var closeTests = []test{
	{"MethodsReturnErrClosed", testCloseMethods},
	{"UnblocksWaiters", testCloseUnblocks},
}

func testCloseMethods(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")

	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, jobstore.ErrClosed, "Submit")
	_, err = s.Get(ctx, j.ID)
	require.ErrorIs(t, err, jobstore.ErrClosed, "Get")
	_, err = s.List(ctx, jobstore.ListOptions{})
	require.ErrorIs(t, err, jobstore.ErrClosed, "List")
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrClosed, "Claim")
	require.ErrorIs(t, s.AwaitWork(ctx), jobstore.ErrClosed, "AwaitWork")
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.ErrorIs(t, err, jobstore.ErrClosed, "Complete")
	require.ErrorIs(t, s.WatchCancel(ctx, c.Lease()), jobstore.ErrClosed, "WatchCancel")
	require.ErrorIs(t, s.Release(ctx, c.Lease()), jobstore.ErrClosed, "Release")
	_, err = s.Cancel(ctx, j.ID)
	require.ErrorIs(t, err, jobstore.ErrClosed, "Cancel")
	_, err = s.Retry(ctx, j.ID)
	require.ErrorIs(t, err, jobstore.ErrClosed, "Retry")
	_, err = s.Wait(ctx, j.ID)
	require.ErrorIs(t, err, jobstore.ErrClosed, "Wait")
	_, err = s.Prune(ctx, 0)
	require.ErrorIs(t, err, jobstore.ErrClosed, "Prune")
	_, err = s.Stats(ctx)
	require.ErrorIs(t, err, jobstore.ErrClosed, "Stats")
}

func testCloseUnblocks(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w", j.ID)
	other := submitKind(t, s, "other")
	calls := map[string]*async{
		"Wait":        start(func() error { _, err := s.Wait(ctx, other.ID); return err }),
		"WatchCancel": start(func() error { return s.WatchCancel(ctx, c.Lease()) }),
		"AwaitWork": start(func() error {
			for {
				if err := s.AwaitWork(ctx); err != nil {
					return err
				}
			}
		}),
	}
	time.Sleep(settle)
	require.NoError(t, s.Close())
	for name, a := range calls {
		require.ErrorIs(t, a.result(t), jobstore.ErrClosed, "%s blocked across Close", name)
	}
}

var copyTests = []test{
	{"SubmitCopiesPayload", testCopySubmit},
	{"ReturnedJobsAreCopies", testCopyReturned},
}

func testCopySubmit(t *testing.T, s jobstore.Store) {
	payload := json.RawMessage(`{"n":1}`)
	j := submit(t, s, jobstore.Spec{Kind: "k", Payload: payload})
	copy(payload, `{"n":2}`)
	require.JSONEq(t, `{"n":1}`, string(get(t, s, j.ID).Payload), "the store aliases the caller's payload")

	c := claimID(t, s, "w", j.ID)
	result := json.RawMessage(`[1]`)
	complete(t, s, c, jobstore.Succeeded(result))
	copy(result, `[2]`)
	require.JSONEq(t, `[1]`, string(get(t, s, j.ID).Result), "the store aliases the caller's result")
}

func testCopyReturned(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submit(t, s, jobstore.Spec{Kind: "k", Payload: json.RawMessage(`{"n":1}`)})
	mutate := func(j jobstore.Job) {
		if len(j.Payload) > 0 {
			j.Payload[len(j.Payload)-2] = '9'
		}
		if len(j.Result) > 0 {
			j.Result[len(j.Result)-2] = '9'
		}
	}
	mutate(j)
	got := get(t, s, j.ID)
	mutate(got)
	c := claimID(t, s, "w", j.ID)
	mutate(c)
	p, err := s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	mutate(p.Jobs[0])
	require.JSONEq(t, `{"n":1}`, string(get(t, s, j.ID).Payload), "a returned job aliases the stored payload")

	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`[1]`)))
	mutate(done)
	w, err := s.Wait(ctx, j.ID)
	require.NoError(t, err)
	mutate(w)
	final := get(t, s, j.ID)
	require.JSONEq(t, `{"n":1}`, string(final.Payload), "a returned job aliases the stored payload")
	require.JSONEq(t, `[1]`, string(final.Result), "a returned job aliases the stored result")
}

var concurrentTests = []test{
	{"SubmitSameKey", testConcurrentSubmitKey},
	{"ClaimersNeverShare", testConcurrentClaimers},
	{"CancelRacingClaim", testConcurrentCancelClaim},
	{"WaitersSeeCompletion", testConcurrentWaiters},
}

// parallel runs f(0) … f(n-1) in n goroutines, released together, and
// returns their errors.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-startGate
			errs[i] = f(i)
		})
	}
	close(startGate)
	wg.Wait()
	return errs
}

func testConcurrentSubmitKey(t *testing.T, s jobstore.Store) {
	const n = 32
	jobs := make([]jobstore.Job, n)
	created := make([]bool, n)
	errs := parallel(n, func(i int) (err error) {
		jobs[i], created[i], err = s.Submit(t.Context(), jobstore.Spec{
			Kind: "k", Key: "the-one", Payload: json.RawMessage(fmt.Sprint(i)),
		})
		return err
	})
	winners := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, jobs[0].ID, jobs[i].ID, "two jobs for one key")
		if created[i] {
			winners++
		}
	}
	require.Equal(t, 1, winners, "exactly one Submit creates the job")
	p, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
}

func testConcurrentClaimers(t *testing.T, s jobstore.Store) {
	const m, k = 8, 200
	want := map[string]bool{}
	for i := range k {
		want[submit(t, s, jobstore.Spec{Kind: fmt.Sprintf("k%d", i%4), Priority: i % 3}).ID] = true
	}
	claimed := make([][]jobstore.Job, m)
	errs := parallel(m, func(i int) error {
		for {
			j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: fmt.Sprintf("claimer-%d", i)})
			if errors.Is(err, jobstore.ErrNoJob) {
				return nil
			}
			if err != nil {
				return err
			}
			claimed[i] = append(claimed[i], j)
		}
	})
	owner := map[string]string{}
	for i := range m {
		require.NoError(t, errs[i])
		for _, j := range claimed[i] {
			prev, dup := owner[j.ID]
			require.False(t, dup, "job %s handed to both %s and %s", j.ID, prev, j.Worker)
			owner[j.ID] = j.Worker
			require.Equal(t, 1, j.Attempt)
			require.Equal(t, fmt.Sprintf("claimer-%d", i), j.Worker)
		}
	}
	require.Len(t, owner, k, "the claimers together did not get every job")
	p, err := s.List(t.Context(), jobstore.ListOptions{Limit: k})
	require.NoError(t, err)
	require.Len(t, p.Jobs, k)
	for _, got := range p.Jobs {
		require.True(t, want[got.ID], "unknown job %s", got.ID)
		require.Equal(t, jobstore.StateRunning, got.State)
		require.Equal(t, owner[got.ID], got.Worker, "the store records another worker than the one it told")
		require.Equal(t, 1, got.Attempt)
	}
}

func testConcurrentCancelClaim(t *testing.T, s jobstore.Store) {
	const claimers, k = 4, 100
	var all []string
	for range k {
		all = append(all, submitKind(t, s, "k").ID)
	}
	order := append([]string(nil), all...)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	// Short random pauses interleave the cancels with the claims whatever
	// the store's speed. Claimers keep going until the canceler is done, so
	// a job that Cancel reported canceled but left queued gets claimed.
	pause := func() { time.Sleep(rand.N(100 * time.Microsecond)) }
	claimed := make([][]jobstore.Job, claimers)
	var canceled []jobstore.Job
	var cancelDone atomic.Bool
	errs := parallel(claimers+1, func(i int) error {
		if i == claimers {
			defer cancelDone.Store(true)
			for _, id := range order {
				j, err := s.Cancel(t.Context(), id)
				if err != nil {
					return err
				}
				canceled = append(canceled, j)
				pause()
			}
			return nil
		}
		for {
			j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: fmt.Sprintf("claimer-%d", i)})
			if errors.Is(err, jobstore.ErrNoJob) {
				if cancelDone.Load() {
					return nil
				}
				pause()
				continue
			}
			if err != nil {
				return err
			}
			claimed[i] = append(claimed[i], j)
			pause()
		}
	})
	for _, err := range errs {
		require.NoError(t, err)
	}

	lease := map[string]jobstore.Lease{}
	for _, js := range claimed {
		for _, j := range js {
			_, dup := lease[j.ID]
			require.False(t, dup, "job %s claimed twice", j.ID)
			lease[j.ID] = j.Lease()
		}
	}
	// What Cancel returned agrees with what the claimers saw.
	for _, c := range canceled {
		_, wasClaimed := lease[c.ID]
		switch c.State {
		case jobstore.StateCanceled:
			require.False(t, wasClaimed, "job %s: Cancel reported it canceled, yet it was claimed", c.ID)
		case jobstore.StateRunning:
			require.True(t, wasClaimed, "job %s: Cancel saw it running, but no claimer got it", c.ID)
			require.True(t, c.CancelRequested)
		default:
			t.Fatalf("job %s: Cancel returned state %s", c.ID, c.State)
		}
	}
	// And so does the store, now and after the claimers finish.
	for _, id := range all {
		j := get(t, s, id)
		l, wasClaimed := lease[id]
		if !wasClaimed {
			require.Equal(t, jobstore.StateCanceled, j.State, "job %s neither claimed nor canceled", id)
			require.Zero(t, j.Attempt, "job %s canceled but its attempt counter moved", id)
			continue
		}
		require.Equal(t, jobstore.StateRunning, j.State, "job %s: claimed, so Cancel must leave it running", id)
		require.True(t, j.CancelRequested, "job %s: claimed and canceled but CancelRequested unset", id)
		require.True(t, j.Holds(l), "job %s: the claimer's lease no longer holds it", id)
		require.NoError(t, s.WatchCancel(t.Context(), l))
		f, err := s.Complete(t.Context(), l, jobstore.Outcome{Error: "canceled"})
		require.NoError(t, err)
		require.Equal(t, jobstore.StateCanceled, f.State)
	}
	requireNoJob(t, s)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, k, st.Counts[jobstore.StateCanceled])
	t.Logf("%d jobs canceled while queued, %d while running", k-len(lease), len(lease))
}

func testConcurrentWaiters(t *testing.T, s jobstore.Store) {
	const n, workers = 20, 4
	var jobs []jobstore.Job
	for i := range n {
		jobs = append(jobs, submit(t, s, jobstore.Spec{Kind: "k", Payload: json.RawMessage(fmt.Sprint(i))}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	results := make([]jobstore.Job, n)
	waiters := make([]*async, n)
	for i, j := range jobs {
		waiters[i] = start(func() (err error) { results[i], err = s.Wait(ctx, j.ID); return err })
	}
	time.Sleep(settle)
	errs := parallel(workers, func(w int) error {
		for {
			j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: fmt.Sprintf("w%d", w)})
			if errors.Is(err, jobstore.ErrNoJob) {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(j.Payload)); err != nil {
				return err
			}
		}
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, w := range waiters {
		require.NoError(t, w.result(t))
		require.Equal(t, jobstore.StateSucceeded, results[i].State)
		require.JSONEq(t, fmt.Sprint(i), string(results[i].Result))
	}
}
