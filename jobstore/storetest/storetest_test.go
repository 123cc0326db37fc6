package storetest_test

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
	"github.com/jobdir/jobdir/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// brokenStores are memstores with one rule broken each, by name.
var brokenStores = map[string]func() jobstore.Store{
	// "none" is the control: the unbroken memstore must pass.
	"none": func() jobstore.Store { return memstore.New(nil) },
	"double-claim": func() jobstore.Store {
		return &doubleClaim{Store: memstore.New(nil)}
	},
	"ignore-keys": func() jobstore.Store {
		return &ignoreKeys{Store: memstore.New(nil)}
	},
	"cancel-leaves-claimable": func() jobstore.Store {
		return &lazyCancel{Store: memstore.New(nil)}
	},
	"no-fencing": func() jobstore.Store {
		return &noFencing{Store: memstore.New(nil)}
	},
	"counts-interrupted": func() jobstore.Store {
		return &countsInterrupted{Store: memstore.New(nil)}
	},
	"import-counts-all": func() jobstore.Store {
		return &importCountsAll{Store: memstore.New(nil)}
	},
	"import-drops-keys": func() jobstore.Store {
		return &importDropsKeys{Store: memstore.New(nil)}
	},
}

// importCountsAll reports every job of an Import added, as a store that
// writes without looking for the ID first would.
type importCountsAll struct{ *memstore.Store }

func (s *importCountsAll) Import(ctx context.Context, jobs []jobstore.Job) (int, error) {
	_, err := s.Store.Import(ctx, jobs)
	return len(jobs), err
}

// importDropsKeys imports jobs without their keys, as a store that does
// not index imported keys would.
type importDropsKeys struct{ *memstore.Store }

func (s *importDropsKeys) Import(ctx context.Context, jobs []jobstore.Job) (int, error) {
	keyless := slices.Clone(jobs)
	for i := range keyless {
		keyless[i].Key = ""
	}
	return s.Store.Import(ctx, keyless)
}

// doubleClaim hands each claimed job to the next claimer as well, as a
// store whose claim is not atomic would.
type doubleClaim struct {
	jobstore.Store
	mu   sync.Mutex
	last *jobstore.Job
}

func (s *doubleClaim) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && req.Accepts(s.last.Queue, s.last.Kind) {
		j := *s.last
		s.last = nil
		if cur, err := s.Get(ctx, j.ID); err == nil && cur.State == jobstore.StateRunning {
			return j, nil
		}
	}
	j, err := s.Store.Claim(ctx, req)
	if err == nil {
		s.last = &j
	}
	return j, err
}

// ignoreKeys creates a new job on every Submit, as a store whose key index
// is missing would.
type ignoreKeys struct{ jobstore.Store }

func (s *ignoreKeys) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	key := spec.Key
	spec.Key = ""
	j, created, err := s.Store.Submit(ctx, spec)
	j.Key = key
	return j, created, err
}

// lazyCancel reports a queued job canceled without recording it, so the job
// stays claimable.
type lazyCancel struct{ jobstore.Store }

func (s *lazyCancel) Cancel(ctx context.Context, id string) (jobstore.Job, error) {
	j, err := s.Get(ctx, id)
	if err == nil && j.State == jobstore.StateQueued {
		j.State = jobstore.StateCanceled
		j.FinishedAt = time.Now().UTC()
		return j, nil
	}
	return s.Store.Cancel(ctx, id)
}

// noFencing completes a running job with whatever lease it is given, as a
// store that checks only the job ID would.
type noFencing struct{ jobstore.Store }

func (s *noFencing) Complete(ctx context.Context, lease jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	if j, err := s.Get(ctx, lease.ID); err == nil && j.State == jobstore.StateRunning {
		lease = j.Lease()
	}
	return s.Store.Complete(ctx, lease, o)
}

// countsInterrupted records an attempt its worker's shutdown interrupted as
// an ordinary failure, as a store that ignores Outcome.Interrupted would.
type countsInterrupted struct{ jobstore.Store }

func (s *countsInterrupted) Complete(ctx context.Context, lease jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	o.Interrupted = false
	return s.Store.Complete(ctx, lease, o)
}

// TestBrokenChild runs the suite against the store named by its child's
// name (internal/testproc). It runs only as the child process of
// TestSuiteCatchesBrokenStores.
func TestBrokenChild(t *testing.T) {
	name := testproc.Name()
	if name == "" {
		t.Skip("runs only as a child of TestSuiteCatchesBrokenStores")
	}
	newStore, ok := brokenStores[name]
	require.True(t, ok, "unknown broken store %q", name)
	storetest.Run(t, func(t *testing.T) jobstore.Store { return newStore() })
}

// TestSuiteCatchesBrokenStores shows that the suite bites: each broken store
// fails it, in the subtests that check the rule it breaks, while the
// unbroken control passes. Each suite runs in a child process, so that its
// failures do not fail this test.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	cases := []struct {
		store string
		// caughtBy are subtests that must fail.
		caughtBy []string
	}{
		{"none", nil},
		{"double-claim", []string{"Claim/RunningNotClaimedAgain", "Concurrent/ClaimersNeverShare"}},
		{"ignore-keys", []string{"Submit/KeyReturnsExistingInEveryState", "Concurrent/SubmitSameKey"}},
		// Concurrent/CancelRacingClaim catches this store too in most runs,
		// but a race can always fall one way only, so it is not required.
		{"cancel-leaves-claimable", []string{"Cancel/QueuedNeverClaimed", "Cancel/DelayedNeverClaimed"}},
		{"no-fencing", []string{"Complete/StaleLeaseNotHeld"}},
		{"counts-interrupted", []string{"Complete/InterruptedNotCounted", "Complete/HistoryKept"}},
		{"import-counts-all", []string{"Import/AgainAddsNothing"}},
		{"import-drops-keys", []string{"Import/KeepsEveryField", "Import/KeyBelongsToTheJob"}},
	}
	for _, tc := range cases {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			output, err := testproc.Run(ctx, t, tc.store, &testproc.Options{Test: "TestBrokenChild", Args: []string{"-test.timeout=90s"}})
			require.NotContains(t, output, "panic:", "the suite must fail by assertion, not crash")
			require.NotContains(t, output, "test timed out", "the suite must not hang")

			if tc.caughtBy == nil {
				require.NoError(t, err, "the unbroken store failed the suite:\n%s", output)
				return
			}
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the suite passed a store that breaks a rule (err=%v):\n%s", err, output)
			require.Equal(t, 1, exit.ExitCode())
			for _, sub := range tc.caughtBy {
				require.Contains(t, output, "--- FAIL: TestBrokenChild/"+sub+" ",
					"subtest %s did not catch the broken store; failures:\n%s", sub, failLines(output))
			}
			t.Logf("%s caught by:\n%s", tc.store, failLines(output))
		})
	}
}

// failLines returns the "--- FAIL" lines of the leaf subtests in go test
// output.
func failLines(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--- FAIL: TestBrokenChild/") && strings.Count(trimmed, "/") >= 2 {
			b.WriteString("  " + trimmed + "\n")
		}
	}
	return b.String()
}
