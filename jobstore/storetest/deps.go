package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var depsTests = []test{
	{"WaitsForEveryDependency", testDepsWaitsForEvery},
	{"FailedDependencyCancels", testDepsFailedCancels},
	{"CanceledDependencyCancels", testDepsCanceledCancels},
	{"CancelCascades", testDepsCancelCascades},
	{"AfterAnyRunsWhatever", testDepsAfterAny},
	{"RetryOfDependencyIsNotAnEnd", testDepsRetryIsNotAnEnd},
	{"EndedDependencyAtSubmit", testDepsEndedAtSubmit},
	{"UnknownDependencyRefused", testDepsUnknownRefused},
	{"ByKey", testDepsByKey},
	{"GraphInOneBatch", testDepsGraphInOneBatch},
	{"GraphForwardNameRefused", testDepsGraphForwardRefused},
	{"RetryOfDependent", testDepsRetryOfDependent},
	{"CancelWaiting", testDepsCancelWaiting},
	{"ListAndStats", testDepsListAndStats},
	{"Dependents", testDepsDependents},
	{"DependedOnIsKept", testDepsDependedOnIsKept},
	{"ConcurrentEnds", testDepsConcurrentEnds},
	{"KeyReturnsExisting", testDepsKeyReturnsExisting},
}

var batchesTests = []test{
	{"StatusCountsStates", testBatchesStatus},
	{"CallbackRunsOnceAllEnded", testBatchesCallback},
	{"CallbackClosesBatch", testBatchesCallbackCloses},
	{"UnknownOrEmptyRefused", testBatchesUnknownRefused},
	{"CallbackOnceUnderConcurrentEnds", testBatchesCallbackConcurrent},
	{"CallbackWithOtherDependencies", testBatchesCallbackWithOthers},
	{"StaysClosed", testBatchesStaysClosed},
}

// depReader returns s as a jobstore.DependencyReader, failing the test if
// it is not one.
func depReader(t *testing.T, s jobstore.Store) jobstore.DependencyReader {
	t.Helper()
	dr, ok := s.(jobstore.DependencyReader)
	require.True(t, ok, "the store keeps dependencies but is not a jobstore.DependencyReader")
	return dr
}

// succeed claims the queued job j, the oldest of its kind, and completes
// it with success.
func succeed(t *testing.T, s jobstore.Store, j jobstore.Job) {
	t.Helper()
	c := claimKindID(t, s, j)
	complete(t, s, c, jobstore.Succeeded(nil))
}

// failFinally claims the queued job j, the oldest of its kind, and fails
// it for good.
func failFinally(t *testing.T, s jobstore.Store, j jobstore.Job) {
	t.Helper()
	c := claimKindID(t, s, j)
	require.Equal(t, jobstore.StateFailed, complete(t, s, c, jobstore.Outcome{Error: "boom", Permanent: true}).State)
}

// claimKindID claims the oldest queued job of j's kind and checks that it
// is j.
func claimKindID(t *testing.T, s jobstore.Store, j jobstore.Job) jobstore.Job {
	t.Helper()
	c := claim(t, s, "w", j.Kind)
	require.Equal(t, j.ID, c.ID, "claimed the wrong job")
	return c
}

// requireState checks the stored state of job id.
func requireState(t *testing.T, s jobstore.Store, id string, want jobstore.State) jobstore.Job {
	t.Helper()
	j := get(t, s, id)
	require.Equal(t, want, j.State, "job %s", id)
	return j
}

func testDepsWaitsForEvery(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	b := submitKind(t, s, "b")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID, a.ID}})
	require.Equal(t, jobstore.StateWaiting, c.State)
	require.Equal(t, []string{a.ID, b.ID}, c.After, "a dependency named twice is kept once, in order")
	requireSameJob(t, c, get(t, s, c.ID))
	requireNoJob(t, s, "c")

	succeed(t, s, a)
	requireState(t, s, c.ID, jobstore.StateWaiting)
	requireNoJob(t, s, "c")

	// A failed attempt with attempts left is no end: still waiting.
	cb := claimID(t, s, "w", b.ID)
	require.Equal(t, jobstore.StateQueued, complete(t, s, cb, jobstore.Outcome{Error: "again", RetryAfter: time.Millisecond}).State)
	requireState(t, s, c.ID, jobstore.StateWaiting)
	cb = claimWhenDue(t, s, "w", "b")
	ended := time.Now()
	complete(t, s, cb, jobstore.Succeeded(nil))

	q := requireState(t, s, c.ID, jobstore.StateQueued)
	require.False(t, q.RunAt.Before(ended.Add(-time.Second)), "a promoted job is due from its promotion on")
	claimID(t, s, "w", c.ID)
}

func testDepsFailedCancels(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	b := submitKind(t, s, "b")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID}})
	failFinally(t, s, b)
	// Canceled as soon as one fails, without waiting for the others.
	got := requireState(t, s, c.ID, jobstore.StateCanceled)
	require.Equal(t, "dependency "+b.ID+" failed", got.LastError)
	require.False(t, got.FinishedAt.IsZero())
	succeed(t, s, a)
	requireState(t, s, c.ID, jobstore.StateCanceled)
	requireNoJob(t, s)
}

func testDepsCanceledCancels(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID}})
	_, err := s.Cancel(t.Context(), a.ID)
	require.NoError(t, err)
	got := requireState(t, s, c.ID, jobstore.StateCanceled)
	require.Equal(t, "dependency "+a.ID+" was canceled", got.LastError)
	requireNoJob(t, s)
}

func testDepsCancelCascades(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	b := submit(t, s, jobstore.Spec{Kind: "b", After: []string{a.ID}})
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{b.ID}})
	d := submit(t, s, jobstore.Spec{Kind: "d", After: []string{b.ID}, AfterAny: true})
	failFinally(t, s, a)
	require.Equal(t, "dependency "+a.ID+" failed", requireState(t, s, b.ID, jobstore.StateCanceled).LastError)
	require.Equal(t, "dependency "+b.ID+" was canceled", requireState(t, s, c.ID, jobstore.StateCanceled).LastError)
	requireState(t, s, d.ID, jobstore.StateQueued)
	claimID(t, s, "w", d.ID)
}

func testDepsAfterAny(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	b := submitKind(t, s, "b")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID}, AfterAny: true})
	require.True(t, c.AfterAny)
	failFinally(t, s, a)
	requireState(t, s, c.ID, jobstore.StateWaiting)
	_, err := s.Cancel(t.Context(), b.ID)
	require.NoError(t, err)
	q := requireState(t, s, c.ID, jobstore.StateQueued)
	require.Empty(t, q.LastError)
	claimID(t, s, "w", c.ID)
}

func testDepsRetryIsNotAnEnd(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID}, AfterAny: true})
	d := submit(t, s, jobstore.Spec{Kind: "d", After: []string{a.ID}})
	failFinally(t, s, a)
	requireState(t, s, c.ID, jobstore.StateQueued)
	requireState(t, s, d.ID, jobstore.StateCanceled)
	// A dependency retried later revives no canceled dependent.
	_, err := s.Retry(t.Context(), a.ID)
	require.NoError(t, err)
	succeed(t, s, a)
	requireState(t, s, d.ID, jobstore.StateCanceled)
}

func testDepsEndedAtSubmit(t *testing.T, s jobstore.Store) {
	ok := submitKind(t, s, "ok")
	succeed(t, s, ok)
	bad := submitKind(t, s, "bad")
	failFinally(t, s, bad)

	q := submit(t, s, jobstore.Spec{Kind: "q", After: []string{ok.ID}})
	require.Equal(t, jobstore.StateQueued, q.State, "a job whose dependencies all succeeded is queued at once")
	require.Equal(t, []string{ok.ID}, q.After)
	requireSameJob(t, q, get(t, s, q.ID))

	// A late graph behaves like an early one: canceled, not refused.
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{ok.ID, bad.ID}})
	require.Equal(t, jobstore.StateCanceled, c.State)
	require.Equal(t, "dependency "+bad.ID+" failed", c.LastError)
	requireSameJob(t, c, get(t, s, c.ID))

	any := submit(t, s, jobstore.Spec{Kind: "any", After: []string{bad.ID}, AfterAny: true})
	require.Equal(t, jobstore.StateQueued, any.State)
	claimID(t, s, "w", q.ID)
	claimID(t, s, "w", any.ID)
	requireNoJob(t, s)
}

func testDepsUnknownRefused(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	a := submitKind(t, s, "a")
	missing := jobstore.NewID(time.Now())
	for _, spec := range []jobstore.Spec{
		{Kind: "c", After: []string{a.ID, missing}},
		{Kind: "c", AfterKeys: []string{"no-such-key"}},
		{Kind: "c", After: []string{"not-an-id"}},
		{Kind: "c", AfterSpecs: []int{0}},
		{Kind: "c", Key: "k", After: []string{missing}},
	} {
		_, _, err := s.Submit(ctx, spec)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "spec %+v", spec)
	}
	_, err := s.SubmitBatch(ctx, []jobstore.Spec{{Kind: "x"}, {Kind: "c", After: []string{missing}}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	require.ErrorContains(t, err, missing)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, total(st), "a refused submit created a job")
	_, err = s.GetByKey(ctx, "k")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testDepsByKey(t *testing.T, s jobstore.Store) {
	a := submit(t, s, jobstore.Spec{Kind: "a", Key: "build-1"})
	b := submitKind(t, s, "b")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{b.ID}, AfterKeys: []string{"build-1"}})
	require.Equal(t, []string{b.ID, a.ID}, c.After, "After first, then AfterKeys, resolved to IDs")
	succeed(t, s, a)
	succeed(t, s, b)
	claimID(t, s, "w", c.ID)
}

func testDepsGraphInOneBatch(t *testing.T, s jobstore.Store) {
	pre := submit(t, s, jobstore.Spec{Kind: "pre", Key: "pre"})
	// A diamond and a tail: 0 -> {1, 2} -> 3, 3 -> 4 by key; and pre.
	out := submitBatch(t, s, []jobstore.Spec{
		{Kind: "n0"},
		{Kind: "n1", AfterSpecs: []int{0}},
		{Kind: "n2", AfterSpecs: []int{0}, AfterKeys: []string{"pre"}},
		{Kind: "n3", Key: "n3", AfterSpecs: []int{1, 2}},
		{Kind: "n4", AfterKeys: []string{"n3"}},
	})
	ids := make([]string, len(out))
	for i, r := range out {
		require.True(t, r.Created)
		ids[i] = r.Job.ID
		requireSameJob(t, r.Job, get(t, s, r.Job.ID))
	}
	require.Equal(t, jobstore.StateQueued, out[0].Job.State)
	require.Equal(t, []string{ids[0]}, out[1].Job.After)
	require.Equal(t, []string{pre.ID, ids[0]}, out[2].Job.After)
	require.Equal(t, []string{ids[1], ids[2]}, out[3].Job.After)
	require.Equal(t, []string{ids[3]}, out[4].Job.After, "a key of an earlier spec of the batch names its job")
	for _, r := range out[1:] {
		require.Equal(t, jobstore.StateWaiting, r.Job.State)
	}
	// Only what is ready runs, in dependency order.
	succeed(t, s, out[0].Job)
	claimed := map[string]bool{}
	for range 2 {
		c := claim(t, s, "w")
		claimed[c.ID] = true
		complete(t, s, c, jobstore.Succeeded(nil))
	}
	require.True(t, claimed[ids[1]] && claimed[pre.ID], "claimed %v", claimed)
	requireState(t, s, ids[3], jobstore.StateWaiting)
	succeed(t, s, out[2].Job)
	succeed(t, s, out[3].Job)
	succeed(t, s, out[4].Job)
}

func testDepsGraphForwardRefused(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	for _, specs := range [][]jobstore.Spec{
		{{Kind: "a", AfterSpecs: []int{1}}, {Kind: "b"}},
		{{Kind: "a", AfterSpecs: []int{0}}},
		{{Kind: "a", AfterKeys: []string{"later"}}, {Kind: "b", Key: "later"}},
	} {
		_, err := s.SubmitBatch(ctx, specs)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "specs %+v", specs)
	}
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, total(st), "a refused graph created jobs")
	_, err = s.GetByKey(ctx, "later")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testDepsRetryOfDependent(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	a := submitKind(t, s, "a")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID}})
	failFinally(t, s, a)
	requireState(t, s, c.ID, jobstore.StateCanceled)

	// Retried while its dependency is still failed: refused, unchanged.
	_, err := s.Retry(ctx, c.ID)
	require.ErrorIs(t, err, jobstore.ErrDependencyFailed)
	require.ErrorIs(t, err, jobstore.ErrInvalidTransition)
	var de *jobstore.DependencyError
	require.ErrorAs(t, err, &de)
	require.Equal(t, c.ID, de.ID)
	require.Equal(t, a.ID, de.Other, "the error names the failed dependency")
	requireState(t, s, c.ID, jobstore.StateCanceled)

	_, err = s.Retry(ctx, a.ID)
	require.NoError(t, err)
	r, err := s.Retry(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, r.State, "a retried dependent waits for its dependencies again")
	require.Empty(t, r.FinishedAt)
	requireNoJob(t, s, "c")
	succeed(t, s, a)
	claimID(t, s, "w", c.ID)

	// Retried once its dependency succeeded: queued at once.
	d := submitKind(t, s, "d")
	e := submit(t, s, jobstore.Spec{Kind: "e", After: []string{d.ID}})
	succeed(t, s, d)
	ce := claimID(t, s, "w", e.ID)
	complete(t, s, ce, jobstore.Outcome{Error: "x", Permanent: true})
	r, err = s.Retry(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, r.State)
}

func testDepsCancelWaiting(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID}})
	got, err := s.Cancel(t.Context(), c.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	require.Empty(t, got.LastError)
	requireSameJob(t, got, get(t, s, c.ID))
	succeed(t, s, a)
	requireState(t, s, c.ID, jobstore.StateCanceled)
	requireNoJob(t, s)
}

func testDepsListAndStats(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	a := submitKind(t, s, "a")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID}})
	page, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateWaiting}})
	require.NoError(t, err)
	require.Equal(t, []string{c.ID}, ids(page.Jobs))
	page, err = s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}})
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, ids(page.Jobs))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Counts[jobstore.StateWaiting])
	require.Equal(t, 1, st.Counts[jobstore.StateQueued])
	require.Equal(t, 1, st.Kinds["c"][jobstore.StateWaiting])
	require.Equal(t, a.RunAt.Unix(), st.OldestQueuedAt.Unix(), "a waiting job is not due")

	succeed(t, s, a)
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Counts[jobstore.StateWaiting])
	require.Equal(t, 1, st.Counts[jobstore.StateQueued])
}

func testDepsDependents(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	dr := depReader(t, s)
	a := submitKind(t, s, "a")
	b := submit(t, s, jobstore.Spec{Kind: "b", After: []string{a.ID}})
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID}, AfterAny: true})
	got, err := dr.Dependents(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, []string{b.ID, c.ID}, ids(got))
	require.Equal(t, jobstore.StateWaiting, got[0].State)
	got, err = dr.Dependents(ctx, c.ID)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = dr.Dependents(ctx, "nope")
	require.ErrorIs(t, err, jobstore.ErrInvalidID)
	// They stay named after the dependency ended.
	succeed(t, s, a)
	got, err = dr.Dependents(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, []string{b.ID, c.ID}, ids(got))
}

func testDepsDependedOnIsKept(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	a := submitKind(t, s, "a")
	b := submitKind(t, s, "b")
	c := submit(t, s, jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID}})
	succeed(t, s, a)
	time.Sleep(5 * time.Millisecond)
	n, err := s.Prune(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Zero(t, n, "Prune removed a job that a waiting job names")
	requireState(t, s, a.ID, jobstore.StateSucceeded)
	if d, ok := s.(jobstore.Deleter); ok {
		err := d.Delete(ctx, a.ID)
		require.ErrorIs(t, err, jobstore.ErrDependedOn)
		var de *jobstore.DependencyError
		require.ErrorAs(t, err, &de)
		require.Equal(t, a.ID, de.ID)
		require.Equal(t, c.ID, de.Other, "the error names the waiting job")
	}
	succeed(t, s, b)
	claimID(t, s, "w", c.ID)
	n, err = s.Prune(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, 2, n, "once nothing waits for them, the dependencies are pruned")
}

func testDepsConcurrentEnds(t *testing.T, s jobstore.Store) {
	const n = 20
	deps := make([]string, n)
	for i := range deps {
		deps[i] = submitKind(t, s, "dep").ID
	}
	c := submit(t, s, jobstore.Spec{Kind: "c", After: deps, AfterAny: true})
	claimed := make([]jobstore.Job, n)
	for i := range claimed {
		claimed[i] = claim(t, s, fmt.Sprintf("w%d", i), "dep")
	}
	errs := parallel(n, func(i int) error {
		o := jobstore.Succeeded(nil)
		if i%3 == 0 {
			o = jobstore.Outcome{Error: "x", Permanent: true}
		}
		_, err := s.Complete(t.Context(), claimed[i].Lease(), o)
		return err
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	requireState(t, s, c.ID, jobstore.StateQueued)
	claimID(t, s, "w", c.ID)
	requireNoJob(t, s)
}

func testDepsKeyReturnsExisting(t *testing.T, s jobstore.Store) {
	a := submitKind(t, s, "a")
	c := submit(t, s, jobstore.Spec{Kind: "c", Key: "k", After: []string{a.ID}})
	again, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "c", Key: "k", After: []string{a.ID}})
	require.NoError(t, err)
	require.False(t, created)
	requireSameJob(t, c, again)
}

// batchOf submits n jobs of kind "m" to batch name.
func batchOf(t *testing.T, s jobstore.Store, name string, n int) []jobstore.Job {
	t.Helper()
	out := make([]jobstore.Job, n)
	for i := range out {
		out[i] = submit(t, s, jobstore.Spec{Kind: "m", Batch: name})
		require.Equal(t, name, out[i].Batch)
	}
	return out
}

func testBatchesStatus(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	dr := depReader(t, s)
	js := batchOf(t, s, "exports", 3)
	submitBatch(t, s, []jobstore.Spec{{Kind: "m", Batch: "exports"}, {Kind: "other"}})
	succeed(t, s, js[0])
	failFinally(t, s, js[1])
	b, err := dr.Batch(ctx, "exports")
	require.NoError(t, err)
	require.Equal(t, "exports", b.Name)
	require.Equal(t, 4, b.Total)
	require.Equal(t, map[jobstore.State]int{jobstore.StateSucceeded: 1, jobstore.StateFailed: 1, jobstore.StateQueued: 2}, b.States)
	require.False(t, b.Closed)
	require.False(t, b.Ended())
	_, err = dr.Batch(ctx, "nope")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = dr.Batch(ctx, "bad name")
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

func testBatchesCallback(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	dr := depReader(t, s)
	js := batchOf(t, s, "b", 3)
	cb := submit(t, s, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	require.Equal(t, jobstore.StateWaiting, cb.State)
	require.True(t, cb.AfterAny, "a callback runs whatever the outcomes")
	require.Equal(t, "b", cb.AfterBatch)
	require.ElementsMatch(t, []string{js[0].ID, js[1].ID, js[2].ID}, cb.After)
	succeed(t, s, js[0])
	failFinally(t, s, js[1])
	requireState(t, s, cb.ID, jobstore.StateWaiting)
	_, err := s.Cancel(ctx, js[2].ID)
	require.NoError(t, err)
	requireState(t, s, cb.ID, jobstore.StateQueued)
	b, err := dr.Batch(ctx, "b")
	require.NoError(t, err)
	require.True(t, b.Closed)
	require.Equal(t, []string{cb.ID}, b.Callbacks)
	require.Equal(t, 3, b.Total, "the callback is not a job of its batch")
	require.True(t, b.Ended())
	claimID(t, s, "w", cb.ID)
	requireNoJob(t, s)
}

func testBatchesCallbackCloses(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	batchOf(t, s, "b", 2)
	submit(t, s, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.ErrorIs(t, err, jobstore.ErrBatchClosed)
	_, err = s.SubmitBatch(ctx, []jobstore.Spec{{Kind: "x"}, {Kind: "m", Batch: "b"}})
	require.ErrorIs(t, err, jobstore.ErrBatchClosed)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, total(st), "a refused submit created a job")
	// A second callback of a closed batch waits for the same jobs.
	cb2 := submit(t, s, jobstore.Spec{Kind: "cb2", AfterBatch: "b"})
	require.Len(t, cb2.After, 2)
}

func testBatchesUnknownRefused(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "nope"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	require.ErrorContains(t, err, "nope")
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b", AfterBatch: "b"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: strings.Repeat("x", 200)})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, total(st))
	// The refusal did not close the batch.
	batchOf(t, s, "nope", 1)
}

func testBatchesCallbackConcurrent(t *testing.T, s jobstore.Store) {
	const n = 30
	js := batchOf(t, s, "fan", n)
	cb := submit(t, s, jobstore.Spec{Kind: "cb", AfterBatch: "fan"})
	claimed := make([]jobstore.Job, n)
	for i := range claimed {
		claimed[i] = claim(t, s, fmt.Sprintf("w%d", i), "m")
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range claimed {
		wg.Go(func() {
			_, err := s.Complete(t.Context(), claimed[i].Lease(), jobstore.Succeeded(nil))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, js, n)
	claimID(t, s, "w", cb.ID)
	requireNoJob(t, s)
}

func testBatchesCallbackWithOthers(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	m := batchOf(t, s, "b", 1)[0]
	k := submit(t, s, jobstore.Spec{Kind: "k", Key: "setup"})
	x := submitKind(t, s, "x")
	cb := submit(t, s, jobstore.Spec{Kind: "cb", AfterBatch: "b", AfterKeys: []string{"setup"}, After: []string{x.ID}})
	require.ElementsMatch(t, []string{m.ID, k.ID, x.ID}, cb.After)
	succeed(t, s, m)
	succeed(t, s, x)
	requireState(t, s, cb.ID, jobstore.StateWaiting)
	time.Sleep(5 * time.Millisecond)
	n, err := s.Prune(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Zero(t, n, "Prune removed a job that the callback waits for")
	if dr, ok := s.(jobstore.DependencyReader); ok {
		deps, err := dr.Dependents(ctx, k.ID)
		require.NoError(t, err)
		require.Equal(t, []string{cb.ID}, ids(deps), "a callback is a dependent of the job it names by key")
	}
	// The job it names by key ends last: that end queues it at once.
	failFinally(t, s, k)
	requireState(t, s, cb.ID, jobstore.StateQueued)
}

func testBatchesStaysClosed(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	sp, ok := s.(jobstore.StatePruner)
	if !ok {
		t.Skip("the store prunes no states alone")
	}
	js := batchOf(t, s, "b", 2)
	cb := submit(t, s, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	failFinally(t, s, js[0])
	succeed(t, s, js[1])
	succeed(t, s, cb)
	time.Sleep(5 * time.Millisecond)
	n, err := sp.PruneStates(ctx, time.Nanosecond, []jobstore.State{jobstore.StateSucceeded})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.ErrorIs(t, err, jobstore.ErrBatchClosed, "a batch whose callback was pruned is closed while it has jobs")
	// Once every job of the batch is gone, its name is free again.
	n, err = s.Prune(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	batchOf(t, s, "b", 1)
}
