package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var workerTests = []test{
	{"RegisterAndList", testWorkersRegister},
	{"Unregister", testWorkersUnregister},
	{"NameInUse", testWorkersNameInUse},
	{"InvalidInput", testWorkersInvalid},
	{"RunningJobs", testWorkersRunning},
	{"AfterClose", testWorkersClose},
	{"EndedAreRemembered", testWorkersEnded},
}

// registry returns s as a WorkerRegistry, or skips the test.
func registry(t *testing.T, s jobstore.Store) jobstore.WorkerRegistry {
	t.Helper()
	reg, ok := s.(jobstore.WorkerRegistry)
	if !ok {
		t.Skip("the store is not a jobstore.WorkerRegistry")
	}
	return reg
}

// register registers info and fails the test if it cannot.
func register(t *testing.T, reg jobstore.WorkerRegistry, info jobstore.WorkerInfo) func() error {
	t.Helper()
	unregister, err := reg.RegisterWorker(t.Context(), info)
	require.NoError(t, err)
	require.NotNil(t, unregister)
	return unregister
}

// workers lists reg's workers and fails the test if it cannot.
func workers(t *testing.T, reg jobstore.WorkerRegistry) []jobstore.WorkerInfo {
	t.Helper()
	ws, err := reg.Workers(t.Context())
	require.NoError(t, err)
	return ws
}

func workerIDs(ws []jobstore.WorkerInfo) []string {
	ids := []string{}
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}

func testWorkersRegister(t *testing.T, s jobstore.Store) {
	reg := registry(t, s)
	require.Empty(t, workers(t, reg), "a new store lists no workers")
	started := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	b := jobstore.WorkerInfo{ID: "host-b", Host: "host", PID: 42, StartedAt: started, Kinds: []string{"z", "a", "z"}, Concurrency: 4, Version: "v1.2.3"}
	register(t, reg, b)
	register(t, reg, jobstore.WorkerInfo{ID: "host-a", Concurrency: 1})

	ws := workers(t, reg)
	require.Equal(t, []string{"host-a", "host-b"}, workerIDs(ws), "sorted by ID")
	got := ws[1]
	require.Equal(t, "host", got.Host)
	require.Equal(t, 42, got.PID)
	require.True(t, started.Equal(got.StartedAt), "started at %v, listed %v", started, got.StartedAt)
	require.Equal(t, []string{"a", "z"}, got.Kinds, "kinds sorted, without repeats")
	require.Equal(t, 4, got.Concurrency)
	require.Equal(t, "v1.2.3", got.Version)
	require.Empty(t, got.Running)
	require.Empty(t, ws[0].Kinds, "no kinds: every kind")
	require.False(t, ws[0].StartedAt.IsZero(), "a zero StartedAt becomes now")
	require.True(t, ws[0].Serves("anything"))
	require.True(t, got.Serves("a"))
	require.False(t, got.Serves("b"))
}

func testWorkersUnregister(t *testing.T, s jobstore.Store) {
	reg := registry(t, s)
	ua := register(t, reg, jobstore.WorkerInfo{ID: "a", Concurrency: 1})
	register(t, reg, jobstore.WorkerInfo{ID: "b", Concurrency: 1})
	require.NoError(t, ua())
	require.Equal(t, []string{"b"}, workerIDs(workers(t, reg)))
	require.NoError(t, ua(), "unregister is idempotent")
	require.Equal(t, []string{"b"}, workerIDs(workers(t, reg)), "a second unregister takes nothing else")
}

func testWorkersNameInUse(t *testing.T, s jobstore.Store) {
	reg := registry(t, s)
	u := register(t, reg, jobstore.WorkerInfo{ID: "w", Host: "first", Concurrency: 1})
	_, err := reg.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Host: "second", Concurrency: 1})
	require.ErrorIs(t, err, jobstore.ErrWorkerExists)
	ws := workers(t, reg)
	require.Len(t, ws, 1)
	require.Equal(t, "first", ws[0].Host, "the refused registration changed the live one")

	require.NoError(t, u())
	u = register(t, reg, jobstore.WorkerInfo{ID: "w", Host: "second", Concurrency: 1})
	ws = workers(t, reg)
	require.Len(t, ws, 1, "the name is free once its worker unregisters")
	require.Equal(t, "second", ws[0].Host)
	require.NoError(t, u())
}

func testWorkersInvalid(t *testing.T, s jobstore.Store) {
	reg := registry(t, s)
	for name, info := range map[string]jobstore.WorkerInfo{
		"no ID":          {Concurrency: 1},
		"space in ID":    {ID: "a b", Concurrency: 1},
		"no concurrency": {ID: "w"},
		"bad kind":       {ID: "w", Concurrency: 1, Kinds: []string{""}},
		"negative PID":   {ID: "w", Concurrency: 1, PID: -1},
	} {
		u, err := reg.RegisterWorker(t.Context(), info)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
		require.Nil(t, u, name)
	}
	require.Empty(t, workers(t, reg), "an invalid registration is listed")
}

func testWorkersRunning(t *testing.T, s jobstore.Store) {
	reg := registry(t, s)
	register(t, reg, jobstore.WorkerInfo{ID: "w1", Concurrency: 2, Kinds: []string{"k"}})
	register(t, reg, jobstore.WorkerInfo{ID: "w2", Concurrency: 1})
	a := submitKind(t, s, "k")
	b := submitKind(t, s, "k")
	submitKind(t, s, "k")
	claimID(t, s, "w1", a.ID)
	claimID(t, s, "w1", b.ID)

	ws, err := jobstore.ListWorkers(t.Context(), s)
	require.NoError(t, err)
	require.Equal(t, []string{"w1", "w2"}, workerIDs(ws))
	require.Equal(t, []string{a.ID, b.ID}, ws[0].Running, "w1 runs a and b, oldest first")
	require.Empty(t, ws[1].Running)

	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Empty(t, jobstore.UnservedKinds(st, ws), "w1 serves k")
}

func testWorkersClose(t *testing.T, s jobstore.Store) {
	reg := registry(t, s)
	u := register(t, reg, jobstore.WorkerInfo{ID: "w", Concurrency: 1})
	require.NoError(t, s.Close())
	require.NoError(t, u(), "unregister after Close")
	_, err := reg.Workers(t.Context())
	require.ErrorIs(t, err, jobstore.ErrClosed)
	_, err = reg.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Concurrency: 1})
	require.ErrorIs(t, err, jobstore.ErrClosed)
}

// testWorkersEnded: a WorkerHistory lists a worker that unregistered among
// the ended ones, with the time it ended, from the given time on; a worker
// of that name live again is live; RecentWorkers gives the live ones and
// the recently ended ones, each name once.
func testWorkersEnded(t *testing.T, s jobstore.Store) {
	h, ok := s.(jobstore.WorkerHistory)
	if !ok {
		t.Skip("the store is not a jobstore.WorkerHistory")
	}
	ctx := t.Context()
	ended := func(since time.Time) []jobstore.WorkerInfo {
		t.Helper()
		ws, err := h.EndedWorkers(ctx, since)
		require.NoError(t, err)
		return ws
	}
	require.Empty(t, ended(time.Time{}), "a new store remembers no worker")
	before := time.Now().Add(-time.Second) // room for a server's clock
	unregA := register(t, h, jobstore.WorkerInfo{ID: "a", Kinds: []string{"mail"}, Concurrency: 1})
	unregB := register(t, h, jobstore.WorkerInfo{ID: "b", Kinds: []string{"report"}, Concurrency: 2})
	require.Empty(t, ended(time.Time{}), "live workers have not ended")
	require.NoError(t, unregA())
	got := ended(before)
	require.Equal(t, []string{"a"}, workerIDs(got))
	require.Equal(t, []string{"mail"}, got[0].Kinds)
	require.False(t, got[0].EndedAt.IsZero())
	require.WithinDuration(t, time.Now(), got[0].EndedAt, time.Minute)
	require.Empty(t, ended(got[0].EndedAt.Add(time.Millisecond)), "since is a lower bound")
	require.Equal(t, []string{"b"}, workerIDs(workers(t, h)), "an ended worker is not live")

	recent, err := jobstore.RecentWorkers(ctx, h, time.Now())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, workerIDs(recent))
	require.True(t, jobstore.AnyServes(recent, "mail"), "a worker that ended lately serves its kinds for a submit's check")

	// Live again under its name: live, and listed once by RecentWorkers.
	unregA2 := register(t, h, jobstore.WorkerInfo{ID: "a", Kinds: []string{"mail"}, Concurrency: 1})
	recent, err = jobstore.RecentWorkers(ctx, h, time.Now())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, workerIDs(recent))
	for _, w := range recent {
		require.True(t, w.EndedAt.IsZero(), "worker %s is live", w.ID)
	}
	require.NoError(t, unregA2())
	require.NoError(t, unregB())
	require.Equal(t, []string{"a", "b"}, workerIDs(ended(before)), "each name once, with its latest end")
}
