package jobstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

func TestWorkerInfoNormalized(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.FixedZone("x", 3600))
	n := jobstore.WorkerInfo{ID: "w", StartedAt: at, Kinds: []string{"b", "a", "b"}, Running: []string{"x"}}.Normalized()
	require.Equal(t, []string{"a", "b"}, n.Kinds)
	require.Equal(t, time.UTC, n.StartedAt.Location())
	require.True(t, n.StartedAt.Equal(at.Round(time.Microsecond)))
	require.Nil(t, n.Running)
	require.NotNil(t, jobstore.WorkerInfo{ID: "w"}.Normalized().Kinds, "no kinds is an empty list, not null")
	require.False(t, jobstore.WorkerInfo{ID: "w"}.Normalized().StartedAt.IsZero())
}

func TestWorkerInfoValidate(t *testing.T) {
	ok := jobstore.WorkerInfo{ID: "w", Concurrency: 1}
	require.NoError(t, ok.Validate())
	many := ok
	many.Kinds = make([]string, jobstore.MaxWorkerKinds+1)
	for i := range many.Kinds {
		many.Kinds[i] = "k"
	}
	long := ok
	long.Host = string(make([]byte, 257))
	for name, info := range map[string]jobstore.WorkerInfo{"too many kinds": many, "long host": long} {
		require.ErrorIs(t, info.Validate(), jobstore.ErrInvalidInput, name)
	}
}

func TestUnservedKinds(t *testing.T) {
	st := jobstore.Stats{}
	st.AddKind("mail", jobstore.StateQueued, 2)
	st.AddKind("resize", jobstore.StateQueued, 1)
	st.AddKind("old", jobstore.StateSucceeded, 5)
	mailer := jobstore.WorkerInfo{ID: "m", Kinds: []string{"mail"}}
	require.Equal(t, []string{"mail", "resize"}, jobstore.UnservedKinds(st, nil), "no workers: every queued kind")
	require.Equal(t, []string{"resize"}, jobstore.UnservedKinds(st, []jobstore.WorkerInfo{mailer}), "only kinds with queued jobs")
	require.Empty(t, jobstore.UnservedKinds(st, []jobstore.WorkerInfo{mailer, {ID: "any"}}), "a worker of no kinds serves every kind")
}

// TestUnservedQueues: the queues with queued jobs that no worker takes are
// named; a worker of no queues takes every queue; a job is served only by
// a worker of its queue and its kind.
func TestUnservedQueues(t *testing.T) {
	st := jobstore.Stats{}
	st.AddQueue("emails", jobstore.StateQueued, 2)
	st.AddQueue("", jobstore.StateQueued, 1) // the default queue
	st.AddQueue("old", jobstore.StateSucceeded, 5)
	mailer := jobstore.WorkerInfo{ID: "m", Kinds: []string{"mail"}, Queues: []string{"emails"}}
	require.Equal(t, []string{"default", "emails"}, jobstore.UnservedQueues(st, nil))
	require.Equal(t, []string{"default"}, jobstore.UnservedQueues(st, []jobstore.WorkerInfo{mailer}))
	require.Empty(t, jobstore.UnservedQueues(st, []jobstore.WorkerInfo{mailer, {ID: "any"}}))
	require.True(t, jobstore.AnyServesJob([]jobstore.WorkerInfo{mailer}, "emails", "mail"))
	require.False(t, jobstore.AnyServesJob([]jobstore.WorkerInfo{mailer}, "", "mail"), "the default queue is not one it takes")
	require.False(t, jobstore.AnyServesJob([]jobstore.WorkerInfo{mailer}, "emails", "resize"))
}

// notRegistry is a Client that keeps no list of workers.
type notRegistry struct{ jobstore.Client }

func TestListWorkersNeedsARegistry(t *testing.T) {
	_, err := jobstore.ListWorkers(t.Context(), notRegistry{memstore.New(nil)})
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// TestRequireWorker: submits of a kind no live or recent worker runs are
// refused, before anything is submitted, batches too; those of a served
// kind go through, also while its only worker restarts.
func TestRequireWorker(t *testing.T) {
	s := memstore.New(nil)
	t.Cleanup(func() { _ = s.Close() })
	c, err := jobstore.WithSubmitMiddleware(s, jobstore.RequireWorker(s))
	require.NoError(t, err)
	_, _, err = c.Submit(t.Context(), jobstore.Spec{Kind: "mail"})
	require.ErrorIs(t, err, jobstore.ErrNoWorker)
	require.Contains(t, err.Error(), `kind "mail"`)

	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Kinds: []string{"mail"}, Queues: []string{"default"}, Concurrency: 1})
	require.NoError(t, err)
	defer u()
	_, created, err := c.Submit(t.Context(), jobstore.Spec{Kind: "mail"})
	require.NoError(t, err)
	require.True(t, created)
	_, err = c.SubmitBatch(t.Context(), []jobstore.Spec{{Kind: "mail"}, {Kind: "resize"}})
	require.ErrorIs(t, err, jobstore.ErrNoWorker)
	require.Contains(t, err.Error(), `spec 1: kind "resize"`)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, st.Counts[jobstore.StateQueued], "a refused batch submitted some of its jobs")
	// The worker takes the default queue only.
	_, _, err = c.Submit(t.Context(), jobstore.Spec{Kind: "mail", Queue: "bulk"})
	require.ErrorIs(t, err, jobstore.ErrNoWorker)
	require.Contains(t, err.Error(), `kind "mail" in queue "bulk"`)

	// The worker stops (a restart): it ended just now, so its kind is
	// still served.
	require.NoError(t, u())
	_, created, err = c.Submit(t.Context(), jobstore.Spec{Kind: "mail"})
	require.NoError(t, err)
	require.True(t, created)
	_, _, err = c.Submit(t.Context(), jobstore.Spec{Kind: "resize"})
	require.ErrorIs(t, err, jobstore.ErrNoWorker)
}
