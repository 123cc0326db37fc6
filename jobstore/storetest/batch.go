package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var batchTests = []test{
	{"CreatesInOrder", testBatchCreatesInOrder},
	{"Keys", testBatchKeys},
	{"InvalidSubmitsNothing", testBatchInvalid},
	{"Empty", testBatchEmpty},
	{"ConcurrentSameKeys", testBatchConcurrentSameKeys},
}

// submitBatch submits specs and fails the test on error.
func submitBatch(t *testing.T, s jobstore.Store, specs []jobstore.Spec) []jobstore.Submitted {
	t.Helper()
	out, err := s.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	require.Len(t, out, len(specs))
	return out
}

func testBatchCreatesInOrder(t *testing.T, s jobstore.Store) {
	specs := make([]jobstore.Spec, 50)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "batch", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Priority: i % 2}
	}
	out := submitBatch(t, s, specs)
	ids := map[string]bool{}
	for i, r := range out {
		require.True(t, r.Created, "spec %d", i)
		require.Equal(t, jobstore.StateQueued, r.Job.State)
		require.JSONEq(t, fmt.Sprintf(`{"i":%d}`, i), string(r.Job.Payload))
		require.Equal(t, i%2, r.Job.Priority)
		require.False(t, ids[r.Job.ID], "ID %s handed out twice", r.Job.ID)
		ids[r.Job.ID] = true
		requireSameJob(t, r.Job, get(t, s, r.Job.ID))
	}
	// Other things equal, a batch is claimed in the order of its specs:
	// first the priority-1 specs, then the others, each in spec order.
	for _, prio := range []int{1, 0} {
		for i := range specs {
			if i%2 == prio {
				claimID(t, s, "w", out[i].Job.ID)
			}
		}
	}
	requireNoJob(t, s)
}

func testBatchKeys(t *testing.T, s jobstore.Store) {
	old := submit(t, s, jobstore.Spec{Kind: "k", Key: "old"})
	out := submitBatch(t, s, []jobstore.Spec{
		{Kind: "k", Key: "new"},
		{Kind: "k", Key: "old"},
		{Kind: "k"},
		{Kind: "other", Key: "new"},
		{Kind: "k"},
	})
	require.True(t, out[0].Created)
	require.Equal(t, "new", out[0].Job.Key)
	require.False(t, out[1].Created, "a key that had a job")
	requireSameJob(t, old, out[1].Job)
	require.True(t, out[2].Created)
	require.False(t, out[3].Created, "a key an earlier spec of the batch took")
	requireSameJob(t, out[0].Job, out[3].Job)
	require.True(t, out[4].Created)
	require.NotEqual(t, out[2].Job.ID, out[4].Job.ID)
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 4, total(st), "stats: %+v", st)
	// And Submit sees the batch's keys.
	again, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "new"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, out[0].Job.ID, again.ID)
}

func testBatchInvalid(t *testing.T, s jobstore.Store) {
	for name, specs := range map[string][]jobstore.Spec{
		"bad kind":   {{Kind: "k"}, {Kind: ""}, {Kind: "k"}},
		"bad key":    {{Kind: "k", Key: "ok"}, {Kind: "k", Key: strings.Repeat("x", 100000)}},
		"bad fields": {{Kind: "k"}, {Kind: "k", MaxAttempts: -1}},
		"too many":   make([]jobstore.Spec, jobstore.MaxBatch+1),
	} {
		if name == "too many" {
			for i := range specs {
				specs[i] = jobstore.Spec{Kind: "k"}
			}
		}
		out, err := s.SubmitBatch(t.Context(), specs)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
		require.Nil(t, out, name)
		if name != "too many" {
			require.Contains(t, err.Error(), "spec 1", name)
		}
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, total(st), "an invalid batch submitted jobs: %+v", st)
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "ok"})
	require.NoError(t, err)
}

func testBatchEmpty(t *testing.T, s jobstore.Store) {
	out, err := s.SubmitBatch(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, out)
	requireNoJob(t, s)
}

func testBatchConcurrentSameKeys(t *testing.T, s jobstore.Store) {
	// Eight goroutines submit batches over one set of keys, in different
	// orders, with Submit mixed in: every key ends with exactly one job, and
	// every result for a key names it.
	const keys, clients = 20, 8
	results := make([][]jobstore.Submitted, clients)
	errs := parallel(clients, func(c int) error {
		specs := make([]jobstore.Spec, keys)
		for i := range specs {
			specs[i] = jobstore.Spec{Kind: "k", Key: fmt.Sprintf("key-%d", (i*(c+1))%keys)}
		}
		if c%4 == 3 {
			out := make([]jobstore.Submitted, keys)
			for i, spec := range specs {
				j, created, err := s.Submit(t.Context(), spec)
				if err != nil {
					return err
				}
				out[i] = jobstore.Submitted{Job: j, Created: created}
			}
			results[c] = out
			return nil
		}
		out, err := s.SubmitBatch(t.Context(), specs)
		results[c] = out
		return err
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	owner := map[string]string{}
	created := map[string]int{}
	for _, out := range results {
		require.Len(t, out, keys)
		for _, r := range out {
			if id, ok := owner[r.Job.Key]; ok {
				require.Equal(t, id, r.Job.ID, "key %q has two jobs", r.Job.Key)
			}
			owner[r.Job.Key] = r.Job.ID
			if r.Created {
				created[r.Job.Key]++
			}
		}
	}
	require.Len(t, owner, keys)
	for k := range owner {
		require.Equal(t, 1, created[k], "key %q created %d times", k, created[k])
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, keys, total(st))
}

// total is the number of jobs st counts.
func total(st jobstore.Stats) int {
	n := 0
	for _, c := range st.Counts {
		n += c
	}
	return n
}
