package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// Generous bounds for liveness: how long the suite waits for something that
// should happen promptly before it calls the store broken.
const (
	// eventually bounds how long a blocked call may take to return after
	// the event that should wake it.
	eventually = 10 * time.Second
	// settle is how long the suite waits to make sure that something does
	// not happen.
	settle = 50 * time.Millisecond
)

// test is one rule of the Store contract.
type test struct {
	name string
	fn   func(t *testing.T, s jobstore.Store)
}

// group is the set of rules about one method or concern.
type group struct {
	name  string
	tests []test
}

// groups lists every subtest of Run, in the order they run.
var groups = []group{
	{"Submit", submitTests},
	{"SubmitBatch", batchTests},
	{"Validation", validationTests},
	{"Get", getTests},
	{"List", listTests},
	{"Claim", claimTests},
	{"Complete", completeTests},
	{"Release", releaseTests},
	{"Cancel", cancelTests},
	{"Retry", retryTests},
	{"Wait", waitTests},
	{"WatchCancel", watchCancelTests},
	{"AwaitWork", awaitWorkTests},
	{"Prune", pruneTests},
	{"Delete", deleteTests},
	{"Stats", statsTests},
	{"Close", closeTests},
	{"Copies", copyTests},
	{"Concurrent", concurrentTests},
	{"Import", importTests},
	{"ClaimBatch", claimBatchTests},
	{"Errors", errorTests},
	{"Workers", workerTests},
	{"Queue", queueTests},
	{"Queues", queueControlTests},
	{"Meta", metaTests},
	{"Schedules", scheduleTests},
	{"Retention", retentionTests},
	{"Deps", depsTests},
	{"Batches", batchesTests},
}

// Run runs the conformance suite: one subtest per rule of the
// jobstore.Store contract, each with a fresh store from newStore. Run closes
// every store when its subtest ends, in addition to any cleanup newStore
// registers.
func Run(t *testing.T, newStore func(t *testing.T) jobstore.Store) {
	t.Helper()
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					s := newStore(t)
					require.NotNil(t, s, "newStore returned nil")
					t.Cleanup(func() { _ = s.Close() })
					tc.fn(t, s)
				})
			}
		})
	}
}

// submit submits spec and fails the test unless a new job was created.
func submit(t *testing.T, s jobstore.Store, spec jobstore.Spec) jobstore.Job {
	t.Helper()
	j, created, err := s.Submit(t.Context(), spec)
	require.NoError(t, err)
	require.True(t, created, "Submit of a new job reported created=false")
	return j
}

// submitKind submits a job of the given kind with no other fields set.
func submitKind(t *testing.T, s jobstore.Store, kind string) jobstore.Job {
	t.Helper()
	return submit(t, s, jobstore.Spec{Kind: kind})
}

// claim claims a job for worker and fails the test if there is none.
func claim(t *testing.T, s jobstore.Store, worker string, kinds ...string) jobstore.Job {
	t.Helper()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: worker, Kinds: kinds})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, j.State)
	require.Equal(t, worker, j.Worker)
	return j
}

// claimID claims the only queued job and checks that it is id.
func claimID(t *testing.T, s jobstore.Store, worker, id string) jobstore.Job {
	t.Helper()
	j := claim(t, s, worker)
	require.Equal(t, id, j.ID, "claimed the wrong job")
	return j
}

// claimWhenDue claims a job of one of kinds (any kind if none) for worker,
// retrying until one is due or the deadline passes.
func claimWhenDue(t *testing.T, s jobstore.Store, worker string, kinds ...string) jobstore.Job {
	t.Helper()
	deadline := time.Now().Add(eventually)
	for {
		j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: worker, Kinds: kinds})
		if err == nil {
			return j
		}
		require.ErrorIs(t, err, jobstore.ErrNoJob)
		require.True(t, time.Now().Before(deadline), "no job became claimable within %s", eventually)
		time.Sleep(5 * time.Millisecond)
	}
}

// requireNoJob checks that Claim finds nothing for worker.
func requireNoJob(t *testing.T, s jobstore.Store, kinds ...string) *jobstore.NoJobError {
	t.Helper()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "checker", Kinds: kinds})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "Claim handed out job %s (%s) when none should be claimable", j.ID, j.State)
	var nj *jobstore.NoJobError
	if errors.As(err, &nj) {
		return nj
	}
	return nil
}

// complete completes the attempt of j with o and returns the result.
func complete(t *testing.T, s jobstore.Store, j jobstore.Job, o jobstore.Outcome) jobstore.Job {
	t.Helper()
	done, err := s.Complete(t.Context(), j.Lease(), o)
	require.NoError(t, err)
	require.Equal(t, j.ID, done.ID)
	return done
}

// get returns the job id and fails the test if it cannot.
func get(t *testing.T, s jobstore.Store, id string) jobstore.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, id, j.ID)
	return j
}

// requireTransitionError checks that err is a *jobstore.TransitionError for
// id from one state to another.
func requireTransitionError(t *testing.T, err error, id string, from, to jobstore.State) {
	t.Helper()
	require.ErrorIs(t, err, jobstore.ErrInvalidTransition)
	var te *jobstore.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, id, te.ID)
	require.Equal(t, from, te.From)
	require.Equal(t, to, te.To)
}

// requireSameJob checks that two copies of a job agree in every field,
// comparing times as instants and JSON values by meaning.
func requireSameJob(t *testing.T, want, got jobstore.Job) {
	t.Helper()
	requireJSONEqual(t, want.Payload, got.Payload, "payload")
	requireJSONEqual(t, want.Result, got.Result, "result")
	require.Equal(t, normalize(want), normalize(got))
}

func requireJSONEqual(t *testing.T, want, got json.RawMessage, what string) {
	t.Helper()
	if len(want) == 0 || len(got) == 0 {
		require.Equal(t, len(want) == 0, len(got) == 0, "%s: want %s, got %s", what, want, got)
		return
	}
	require.JSONEq(t, string(want), string(got), what)
}

func normalize(j jobstore.Job) jobstore.Job {
	j.Payload, j.Result = nil, nil
	for _, tm := range []*time.Time{&j.RunAt, &j.CreatedAt, &j.UpdatedAt, &j.StartedAt, &j.FinishedAt} {
		*tm = tm.Round(0).UTC()
	}
	if j.History != nil {
		h := make([]jobstore.AttemptRecord, len(j.History))
		for i, r := range j.History {
			r.StartedAt, r.FinishedAt = r.StartedAt.Round(0).UTC(), r.FinishedAt.Round(0).UTC()
			h[i] = r
		}
		j.History = h
	}
	return j
}

// jobsInEveryState builds a job in each state and returns them by state. The running
// job is held by worker "holder".
func jobsInEveryState(t *testing.T, s jobstore.Store, key func(jobstore.State) string) map[jobstore.State]jobstore.Job {
	t.Helper()
	ctx := t.Context()
	out := make(map[jobstore.State]jobstore.Job)
	spec := func(st jobstore.State) jobstore.Spec {
		return jobstore.Spec{Kind: "state." + string(st), Key: key(st), MaxAttempts: 1}
	}
	mk := func(st jobstore.State) jobstore.Job {
		if st == jobstore.StateWaiting {
			// Waiting for the job that will be running, which no test
			// ends with success.
			sp := spec(st)
			sp.After = []string{out[jobstore.StateRunning].ID}
			return submit(t, s, sp)
		}
		j := submit(t, s, spec(st))
		if st == jobstore.StateQueued {
			return j
		}
		c := claim(t, s, "holder", j.Kind)
		switch st {
		case jobstore.StateSucceeded:
			return complete(t, s, c, jobstore.Succeeded(json.RawMessage(`{"ok":true}`)))
		case jobstore.StateFailed:
			return complete(t, s, c, jobstore.Outcome{Error: "boom"})
		case jobstore.StateCanceled:
			_, err := s.Cancel(ctx, c.ID)
			require.NoError(t, err)
			return complete(t, s, c, jobstore.Outcome{Error: "stopped"})
		}
		return c
	}
	// The waiting job waits for the running one, made before it.
	order := append(jobstore.States()[1:], jobstore.StateWaiting)
	for _, st := range order {
		j := mk(st)
		require.Equal(t, st, j.State)
		out[st] = j
	}
	return out
}

// async is a call running in its own goroutine.
type async struct{ ch chan error }

// start runs f in a new goroutine.
func start(f func() error) *async {
	a := &async{ch: make(chan error, 1)}
	go func() { a.ch <- f() }()
	return a
}

// result waits for f's error, failing the test if f does not return within
// eventually.
func (a *async) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-a.ch:
		return err
	case <-time.After(eventually):
		t.Fatalf("blocked call did not return within %s", eventually)
		return nil
	}
}

// requireBlocked fails the test if f returns within settle.
func (a *async) requireBlocked(t *testing.T) {
	t.Helper()
	select {
	case err := <-a.ch:
		t.Fatalf("call returned (err=%v) when it should still block", err)
	case <-time.After(settle):
	}
}
