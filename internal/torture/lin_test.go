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
func seq(ops ...Op) []Op {
	for i := range ops {
		ops[i].Call, ops[i].Return = int64(10*i), int64(10*i+5)
	}
	return ops
}

func submitOp(key, id string, created bool) Op {
	return Op{Kind: OpSubmit, Key: key, MaxAttempts: 2, Created: created, JobID: id, State: jobstore.StateQueued}
}

func claimOp(client int, id string, attempt int) Op {
	return Op{Client: client, Kind: OpClaim, JobID: id, State: jobstore.StateRunning, JobAttempt: attempt}
}

func TestModelAcceptsLinearizableHistories(t *testing.T) {
	tests := map[string][]Op{
		"submit, claim, fail, claim, succeed": seq(
			submitOp("k", idA, true),
			claimOp(1, idA, 1),
			Op{Kind: OpComplete, ID: idA, Attempt: 1, Outcome: "fail", JobID: idA, State: jobstore.StateQueued, JobAttempt: 1},
			claimOp(2, idA, 2),
			Op{Kind: OpComplete, ID: idA, Attempt: 2, Outcome: "ok", JobID: idA, State: jobstore.StateSucceeded, JobAttempt: 2},
			Op{Kind: OpGet, ID: idA, JobID: idA, State: jobstore.StateSucceeded, JobAttempt: 2},
			Op{Kind: OpCancel, ID: idA, Err: ErrClassTransition},
		),
		"stale lease is fenced off": seq(
			submitOp("", idA, true),
			claimOp(1, idA, 1),
			Op{Kind: OpCancel, ID: idA, JobID: idA, State: jobstore.StateRunning, JobAttempt: 1, CancelRequested: true},
			Op{Kind: OpComplete, ID: idA, Attempt: 1, Outcome: "fail", JobID: idA, State: jobstore.StateCanceled, JobAttempt: 1, CancelRequested: true},
			Op{Kind: OpComplete, ID: idA, Attempt: 1, Outcome: "ok", Err: ErrClassNotHeld},
			Op{Kind: OpRetry, ID: idA, JobID: idA, State: jobstore.StateQueued, JobAttempt: 1},
		),
		// Two concurrent submits of one key: either may be the creator.
		"concurrent submits of one key": {
			{Client: 1, Kind: OpSubmit, Key: "k", MaxAttempts: 2, JobID: idA, State: jobstore.StateQueued, Call: 0, Return: 10},
			{Client: 2, Kind: OpSubmit, Key: "k", MaxAttempts: 2, Created: true, JobID: idA, State: jobstore.StateQueued, Call: 1, Return: 9},
		},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := CheckHistory(h, 0, "")
			require.NoError(t, err)
			require.Equal(t, porcupine.Ok, res)
		})
	}
}

func TestModelCatchesViolations(t *testing.T) {
	tests := map[string][]Op{
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
			Op{Kind: OpComplete, ID: idA, Attempt: 1, Outcome: "fail", JobID: idA, State: jobstore.StateQueued, JobAttempt: 1},
			claimOp(2, idA, 2),
			Op{Kind: OpComplete, ID: idA, Attempt: 1, Outcome: "ok", JobID: idA, State: jobstore.StateSucceeded, JobAttempt: 2},
		),
		"a canceled job is claimed": seq(
			submitOp("", idA, true),
			Op{Kind: OpCancel, ID: idA, JobID: idA, State: jobstore.StateCanceled},
			claimOp(1, idA, 1),
		),
		// The read returns, strictly after the cancel returned, a state
		// the job no longer has: a stale read.
		"stale read after cancel": seq(
			submitOp("", idA, true),
			Op{Kind: OpCancel, ID: idA, JobID: idA, State: jobstore.StateCanceled},
			Op{Kind: OpGet, ID: idA, JobID: idA, State: jobstore.StateQueued},
		),
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			viz := t.TempDir() + "/viz.html"
			res, err := CheckHistory(h, 0, viz)
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
	require.NoError(t, RecordHistory(t.Context(), st, LinConfig{Clients: 6, Ops: 200, Keys: 5, Seed: 1}, 0, &buf))
	ops, err := ReadHistory(&buf)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ops), 6*200)
	requireVariety(t, ops)
	res, err := CheckHistory(ops, 0, t.TempDir()+"/viz.html")
	require.NoError(t, err)
	require.Equal(t, porcupine.Ok, res)
}

// requireVariety checks that a history exercised every operation, so that
// a pass means something.
func requireVariety(t *testing.T, ops []Op) {
	t.Helper()
	seen := map[string]int{}
	for _, op := range ops {
		seen[op.Kind+"/"+op.Err]++
	}
	for _, k := range []string{OpSubmit + "/", OpClaim + "/", OpComplete + "/", OpCancel + "/", OpGet + "/", OpRetry + "/"} {
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
	require.NoError(t, RecordHistory(t.Context(), keyLosingStore{st}, LinConfig{Clients: 1, Ops: 100, Keys: 2, Seed: 1}, 0, &buf))
	ops, err := ReadHistory(&buf)
	require.NoError(t, err)
	res, err := CheckHistory(ops, 0, "")
	require.NoError(t, err)
	require.Equal(t, porcupine.Illegal, res)
}
