package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// importTests check jobstore.Importer, for the stores that implement it;
// the others skip them.
var importTests = []test{
	{"KeepsEveryField", importer(testImportKeepsEveryField)},
	{"AgainAddsNothing", importer(testImportAgainAddsNothing)},
	{"QueuedIsClaimable", importer(testImportQueuedIsClaimable)},
	{"KeyBelongsToTheJob", importer(testImportKeyBelongsToTheJob)},
	{"RefusesRunningAndInvalid", importer(testImportRefusesRunningAndInvalid)},
	{"FinishedIsPrunedAndWaited", importer(testImportFinishedIsPrunedAndWaited)},
}

// importer adapts a test of an Importer, skipping stores that are not.
func importer(fn func(t *testing.T, s jobstore.Store, im jobstore.Importer)) func(t *testing.T, s jobstore.Store) {
	return func(t *testing.T, s jobstore.Store) {
		im, ok := s.(jobstore.Importer)
		if !ok {
			t.Skip("the store does not implement jobstore.Importer")
		}
		fn(t, s, im)
	}
}

// made returns jobs in every state but running as another store would hold
// them: with keys, payloads, results, errors and a history, and times cut
// to the microsecond (the precision every store keeps) in the past.
func made() []jobstore.Job {
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Microsecond).UTC()
	at := func(d time.Duration) time.Time { return base.Add(d) }
	job := func(d time.Duration, key string) jobstore.Job {
		j := jobstore.NewJob(jobstore.Spec{Kind: "imported", Key: key, Payload: json.RawMessage(`{"n":1}`), Priority: 5, Timeout: time.Minute}, at(d))
		j.CreatedAt, j.UpdatedAt, j.RunAt = at(d), at(d), at(d)
		return j
	}
	hist := func(n int, end jobstore.AttemptEnd, errText string) jobstore.AttemptRecord {
		return jobstore.AttemptRecord{Attempt: n, Worker: "old-worker", StartedAt: at(time.Duration(n) * time.Minute),
			FinishedAt: at(time.Duration(n)*time.Minute + time.Second), End: end, Error: errText}
	}

	queued := job(0, "imported-queued")
	queued.Attempt, queued.LastError, queued.Worker = 1, "boom", "old-worker"
	queued.StartedAt = at(time.Minute)
	queued.UpdatedAt, queued.RunAt = at(2*time.Minute), at(3*time.Minute)
	queued.History = []jobstore.AttemptRecord{hist(1, jobstore.EndFailed, "boom")}
	queued.Tags, queued.Meta = []string{"imported", "team=ops"}, map[string]string{"request": "r-1"}

	succeeded := job(time.Second, "")
	succeeded.State, succeeded.Attempt, succeeded.Worker = jobstore.StateSucceeded, 2, "old-worker"
	succeeded.Result = json.RawMessage(`{"ok":true}`)
	succeeded.StartedAt, succeeded.UpdatedAt, succeeded.FinishedAt = at(2*time.Minute), at(2*time.Minute+time.Second), at(2*time.Minute+time.Second)
	succeeded.History = []jobstore.AttemptRecord{hist(1, jobstore.EndWorkerLost, "worker lost"), hist(2, jobstore.EndSucceeded, "")}

	failed := job(2*time.Second, "imported-failed")
	failed.State, failed.Attempt, failed.MaxAttempts, failed.Worker = jobstore.StateFailed, 1, 1, "old-worker"
	failed.LastError = "exit status 9"
	failed.StartedAt, failed.UpdatedAt, failed.FinishedAt = at(time.Minute), at(time.Minute+time.Second), at(time.Minute+time.Second)
	failed.History = []jobstore.AttemptRecord{hist(1, jobstore.EndFailed, "exit status 9")}

	canceled := job(3*time.Second, "")
	canceled.State, canceled.CancelRequested = jobstore.StateCanceled, true
	canceled.UpdatedAt, canceled.FinishedAt = at(4*time.Second), at(4*time.Second)
	return []jobstore.Job{queued, succeeded, failed, canceled}
}

func testImportKeepsEveryField(t *testing.T, s jobstore.Store, im jobstore.Importer) {
	jobs := made()
	n, err := im.Import(t.Context(), jobs)
	require.NoError(t, err)
	require.Equal(t, len(jobs), n)
	for _, want := range jobs {
		requireSameJob(t, want, get(t, s, want.ID))
	}
	p, err := s.List(t.Context(), jobstore.ListOptions{Order: jobstore.OldestFirst})
	require.NoError(t, err)
	require.Equal(t, ids(jobs), ids(p.Jobs), "listed in ID order")
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	for _, state := range []jobstore.State{jobstore.StateQueued, jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled} {
		require.Equal(t, 1, st.Counts[state], "%s jobs", state)
	}
}

func testImportAgainAddsNothing(t *testing.T, s jobstore.Store, im jobstore.Importer) {
	ctx := t.Context()
	jobs := made()
	n, err := im.Import(ctx, jobs[:2])
	require.NoError(t, err)
	require.Equal(t, 2, n)
	// The queued job changes here; a second import leaves it as it is.
	canceled, err := s.Cancel(ctx, jobs[0].ID)
	require.NoError(t, err)
	n, err = im.Import(ctx, jobs)
	require.NoError(t, err)
	require.Equal(t, 2, n, "only the jobs that were missing")
	n, err = im.Import(ctx, jobs)
	require.NoError(t, err)
	require.Zero(t, n)
	requireSameJob(t, canceled, get(t, s, jobs[0].ID))
	p, err := s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, len(jobs), "no job twice")
}

func testImportQueuedIsClaimable(t *testing.T, s jobstore.Store, im jobstore.Importer) {
	ctx := t.Context()
	q := made()[0]
	q.MaxAttempts = 2
	woke := make(chan error, 1)
	requireNoJob(t, s)
	go func() { woke <- s.AwaitWork(ctx) }()
	_, err := im.Import(ctx, []jobstore.Job{q})
	require.NoError(t, err)
	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-time.After(eventually):
		t.Fatal("AwaitWork did not wake on an imported queued job")
	}
	j := claimID(t, s, "new-worker", q.ID)
	require.Equal(t, 2, j.Attempt, "the attempts go on counting")
	done := complete(t, s, j, jobstore.Failed(nil))
	require.Equal(t, jobstore.StateFailed, done.State, "its last attempt")
	require.Len(t, done.History, 2)
}

func testImportKeyBelongsToTheJob(t *testing.T, s jobstore.Store, im jobstore.Importer) {
	ctx := t.Context()
	jobs := made()
	_, err := im.Import(ctx, jobs)
	require.NoError(t, err)
	j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "imported", Key: jobs[0].Key})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, jobs[0].ID, j.ID)

	// A job of another ID with a key taken here, by an imported or a
	// submitted job, is refused.
	other := made()[0]
	n, err := im.Import(ctx, []jobstore.Job{other})
	require.ErrorIs(t, err, jobstore.ErrKeyTaken)
	require.Zero(t, n)
	sub := submit(t, s, jobstore.Spec{Kind: "k", Key: "submitted-here"})
	other.Key = "submitted-here"
	_, err = im.Import(ctx, []jobstore.Job{other})
	require.ErrorIs(t, err, jobstore.ErrKeyTaken)
	require.ErrorContains(t, err, sub.ID, "names the job that holds the key")
	_, err = s.Get(ctx, other.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testImportRefusesRunningAndInvalid(t *testing.T, s jobstore.Store, im jobstore.Importer) {
	ctx := t.Context()
	good := made()[1]
	running := made()[0]
	running.State, running.Attempt, running.FinishedAt = jobstore.StateRunning, 2, time.Time{}
	noID := made()[2]
	noID.ID = "not-an-id"
	unfinished := made()[3]
	unfinished.FinishedAt = time.Time{}
	for name, bad := range map[string]jobstore.Job{"running": running, "bad id": noID, "terminal without finished_at": unfinished} {
		n, err := im.Import(ctx, []jobstore.Job{good, bad})
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
		require.Zero(t, n, name)
	}
	_, err := s.Get(ctx, good.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound, "an invalid job refuses the whole import")
	too := make([]jobstore.Job, jobstore.MaxImport+1)
	for i := range too {
		too[i] = good
	}
	_, err = im.Import(ctx, too)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	n, err := im.Import(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

func testImportFinishedIsPrunedAndWaited(t *testing.T, s jobstore.Store, im jobstore.Importer) {
	ctx := t.Context()
	jobs := made()
	_, err := im.Import(ctx, jobs)
	require.NoError(t, err)
	done, err := s.Wait(ctx, jobs[2].ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, done.State)
	n, err := s.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the finished jobs, which finished hours ago")
	_, err = s.Get(ctx, jobs[2].ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	get(t, s, jobs[0].ID)
	// The failed job's key is free again.
	submit(t, s, jobstore.Spec{Kind: "k", Key: jobs[2].Key})
}
