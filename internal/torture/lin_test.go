package torture

import (
	"bytes"
	"context"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/stretchr/testify/require"
)

// seq builds a history of ops that run one after the other.
func seq(ops ...linOp) []linOp {
	for i := range ops {
		ops[i].Call, ops[i].Return = int64(10*i), int64(10*i+5)
	}
	return ops
}

func submitOp(key, id string, created bool) linOp {
	return linOp{Kind: linSubmit, Key: key, MaxAttempts: 2, Created: created, JobID: id, State: jobstore.StateQueued}
}

func claimOp(client int, id string, attempt int) linOp {
	return linOp{Client: client, Kind: linClaim, JobID: id, State: jobstore.StateRunning, JobAttempt: attempt}
}

func TestModelAcceptsLinearizableHistories(t *testing.T) {
	tests := map[string][]linOp{
		"submit, claim, fail, claim, succeed": seq(
			submitOp("k", idA, true),
			claimOp(1, idA, 1),
			linOp{Kind: linComplete, ID: idA, Attempt: 1, Outcome: "fail", JobID: idA, State: jobstore.StateQueued, JobAttempt: 1},
			claimOp(2, idA, 2),
			linOp{Kind: linComplete, ID: idA, Attempt: 2, Outcome: "ok", JobID: idA, State: jobstore.StateSucceeded, JobAttempt: 2},
			linOp{Kind: linGet, ID: idA, JobID: idA, State: jobstore.StateSucceeded, JobAttempt: 2},
			linOp{Kind: linCancel, ID: idA, Err: errClassTransition},
		),
		"stale lease is fenced off": seq(
			submitOp("", idA, true),
			claimOp(1, idA, 1),
			linOp{Kind: linCancel, ID: idA, JobID: idA, State: jobstore.StateRunning, JobAttempt: 1, CancelRequested: true},
			linOp{Kind: linComplete, ID: idA, Attempt: 1, Outcome: "fail", JobID: idA, State: jobstore.StateCanceled, JobAttempt: 1, CancelRequested: true},
			linOp{Kind: linComplete, ID: idA, Attempt: 1, Outcome: "ok", Err: errClassNotHeld},
			linOp{Kind: linRetry, ID: idA, JobID: idA, State: jobstore.StateQueued, JobAttempt: 1},
		),
		// Two concurrent submits of one key: either may be the creator.
		"concurrent submits of one key": {
			{Client: 1, Kind: linSubmit, Key: "k", MaxAttempts: 2, JobID: idA, State: jobstore.StateQueued, Call: 0, Return: 10},
			{Client: 2, Kind: linSubmit, Key: "k", MaxAttempts: 2, Created: true, JobID: idA, State: jobstore.StateQueued, Call: 1, Return: 9},
		},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := checkHistory(h, 0, "")
			require.NoError(t, err)
			require.Equal(t, porcupine.Ok, res)
		})
	}
}

func TestModelCatchesViolations(t *testing.T) {
	tests := map[string][]linOp{
		"one key, two jobs": seq(
			submitOp("k", idA, true),
			submitOp("k", idB, true),
		),
		"one attempt claimed twice": seq(
			submitOp("k", idA, true),
			claimOp(1, idA, 1),
			claimOp(2, idA, 1),
		),
		"a stale lease completes": seq(
			submitOp("", idA, true),
			claimOp(1, idA, 1),
			linOp{Kind: linComplete, ID: idA, Attempt: 1, Outcome: "fail", JobID: idA, State: jobstore.StateQueued, JobAttempt: 1},
			claimOp(2, idA, 2),
			linOp{Kind: linComplete, ID: idA, Attempt: 1, Outcome: "ok", JobID: idA, State: jobstore.StateSucceeded, JobAttempt: 2},
		),
		"a canceled job is claimed": seq(
			submitOp("", idA, true),
			linOp{Kind: linCancel, ID: idA, JobID: idA, State: jobstore.StateCanceled},
			claimOp(1, idA, 1),
		),
		// The read returns, strictly after the cancel returned, a state
		// the job no longer has: a stale read.
		"stale read after cancel": seq(
			submitOp("", idA, true),
			linOp{Kind: linCancel, ID: idA, JobID: idA, State: jobstore.StateCanceled},
			linOp{Kind: linGet, ID: idA, JobID: idA, State: jobstore.StateQueued},
		),
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			viz := t.TempDir() + "/viz.html"
			res, err := checkHistory(h, 0, viz)
			require.NoError(t, err)
			require.Equal(t, porcupine.Illegal, res)
			require.FileExists(t, viz)
		})
	}
}

// TestLinearizableMemstore runs the recorder and the checker on the
// in-process store, where goroutines are the only clients there can be.
func TestLinearizableMemstore(t *testing.T) {
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	var buf bytes.Buffer
	require.NoError(t, recordHistory(t.Context(), st, LinConfig{Clients: 6, Ops: 200, Keys: 5, Seed: 1}, 0, &buf))
	ops, err := readHistory(&buf)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ops), 6*200)
	requireVariety(t, ops)
	res, err := checkHistory(ops, 0, t.TempDir()+"/viz.html")
	require.NoError(t, err)
	require.Equal(t, porcupine.Ok, res)
}

// requireVariety checks that a history exercised every operation, so that
// a pass means something.
func requireVariety(t *testing.T, ops []linOp) {
	t.Helper()
	seen := map[string]int{}
	for _, op := range ops {
		seen[op.Kind+"/"+op.Err]++
	}
	for _, k := range []string{linSubmit + "/", linClaim + "/", linComplete + "/", linCancel + "/", linGet + "/", linRetry + "/"} {
		require.Positive(t, seen[k], "no successful %s in %v", k, seen)
	}
	t.Logf("operations: %v", seen)
}

// keyLosingStore is a broken store: it forgets idempotency keys.
type keyLosingStore struct{ jobstore.Store }

func (s keyLosingStore) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	spec.Key = ""
	return s.Store.Submit(ctx, spec)
}

// TestLinearizabilityCatchesBrokenStore feeds the checker the history of
// a store that breaks idempotency, recorded the same way as a real one.
func TestLinearizabilityCatchesBrokenStore(t *testing.T) {
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	var buf bytes.Buffer
	require.NoError(t, recordHistory(t.Context(), keyLosingStore{st}, LinConfig{Clients: 1, Ops: 100, Keys: 2, Seed: 1}, 0, &buf))
	ops, err := readHistory(&buf)
	require.NoError(t, err)
	res, err := checkHistory(ops, 0, "")
	require.NoError(t, err)
	require.Equal(t, porcupine.Illegal, res)
}

// TestCheckHistoryTwoCreatesOfOneKey: two submits of one key, one after
// the other, cannot both have created a job.
func TestCheckHistoryTwoCreatesOfOneKey(t *testing.T) {
	const a, b = "01JAAAAAAAAAAAAAAAAAAAAAAA", "01JBBBBBBBBBBBBBBBBBBBBBBB"
	history := []linOp{
		{Client: 0, Kind: linSubmit, Key: "k", MaxAttempts: 3, Created: true,
			JobID: a, State: jobstore.StateQueued, Call: 0, Return: 10},
		{Client: 1, Kind: linSubmit, Key: "k", MaxAttempts: 3, Created: true,
			JobID: b, State: jobstore.StateQueued, Call: 20, Return: 30},
	}
	res, err := checkHistory(history, 0, "")
	require.NoError(t, err)
	require.Equal(t, porcupine.Illegal, res)
}
