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
