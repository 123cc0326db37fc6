package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// probeKind is the kind of the jobs whose listing checkListing checks.
const probeKind = "probe"

// checkListing lists the jobs of kind probeKind and takes Stats on s (in
// that order, or Stats first when statsFirst is set), and returns "ok" if
// the listing held probes jobs, id among them, and Stats counted jobs
// jobs, probes of them of kind probeKind; else what was wrong.
func checkListing(ctx context.Context, s *Store, jobs, probes int, id string, statsFirst bool) string {
	var wrong []string
	list := func() error {
		p, err := s.List(ctx, jobstore.ListOptions{Kind: probeKind, Limit: jobstore.MaxListLimit})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(p.Jobs, func(j jobstore.Job) bool { return j.ID == id }) || len(p.Jobs) != probes {
			wrong = append(wrong, fmt.Sprintf("list %d of %d", len(p.Jobs), probes))
		}
		return nil
	}
	stats := func() error {
		st, err := s.Stats(ctx)
		if err != nil {
			return err
		}
		all, probed := 0, 0
		for _, c := range st.Counts {
			all += c
		}
		for _, c := range st.Kinds[probeKind] {
			probed += c
		}
		if all != jobs || probed != probes {
			wrong = append(wrong, fmt.Sprintf("stats %d of %d (%s %d of %d)", all, jobs, probeKind, probed, probes))
		}
		return nil
	}
	steps := []func() error{list, stats}
	if statsFirst {
		steps[0], steps[1] = stats, list
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err.Error()
		}
	}
	if wrong == nil {
		return "ok"
	}
	return strings.Join(wrong, ", ")
}

// pidnsRounds is the environment variable that sets how many rounds
// TestListingsExactAcrossPIDNamespaces plays (default 25), to measure.
const pidnsRounds = "FILESTORE_TEST_PIDNS_ROUNDS"

// TestListingsExactAcrossPIDNamespaces: two listing processes on one
// store, one of which lags behind its events (stopped while jobs arrive
// and the other lists), each list every job acknowledged before the
// request and count it in Stats, in plain processes and when each is PID
// 1 of its own PID namespace, as pods are. The lagging process's watcher
// handles the other's barriers after its own listing has begun: with
// barriers named by PID, the other's would end its wait before the
// events of the jobs just acknowledged.
func TestListingsExactAcrossPIDNamespaces(t *testing.T) {
	rounds := 25
	if n, err := strconv.Atoi(os.Getenv(pidnsRounds)); err == nil && n > 0 {
		rounds = min(n, jobstore.MaxListLimit/2)
	}
	// Writes each round to two dot-files in claimed/, which every scanner
	// ignores but whose events (one a write: the two files take turns, or
	// the kernel would merge them) the lagging process's watcher goes
	// through before the other's barriers.
	const noise = 2000
	for _, pidns := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "pidns"}[pidns], func(t *testing.T) {
			if pidns {
				testproc.RequirePIDNamespaces(t)
			}
			dir := t.TempDir()
			s := openAt(t, dir, &Options{NoSync: true})
			ctx := t.Context()
			o := &testproc.Options{PIDNamespace: pidns, Env: []string{childDir + "=" + dir, childNoSync + "=1"}}
			var noisy [2]*os.File
			for i := range noisy {
				f, err := os.Create(filepath.Join(dir, dirClaimed, ".noise."+strconv.Itoa(i)))
				require.NoError(t, err)
				t.Cleanup(func() {
					_ = f.Close()
					_ = os.Remove(f.Name())
				})
				noisy[i] = f
			}
			lagging, other := testproc.Start(t, "list-exact", o), testproc.Start(t, "list-exact", o)
			probes, wrongLists, wrongStats := 0, 0, 0
			submit := func() jobstore.Job { // the store's only jobs are probes
				j, _, err := s.Submit(ctx, jobstore.Spec{Kind: probeKind})
				require.NoError(t, err)
				probes++
				return j
			}
			for round := 1; round <= rounds; round++ {
				require.NoError(t, lagging.Stop(ctx))
				for i := range noise {
					_, err := noisy[i%2].Write([]byte{0})
					require.NoError(t, err)
				}
				// The other lists while the lagging one is stopped: its
				// barriers are among the events the lagging one has yet
				// to handle.
				j := submit()
				fmt.Fprintf(other.Stdin(), "%d %d %s\n", probes, probes, j.ID)
				require.Equal(t, "ok", other.Next(t), "the listing process that does not lag, round %d", round)
				// Asked while stopped, so that it lists as soon as it runs,
				// while its watcher has the round's events to go through.
				j = submit()
				fmt.Fprintf(lagging.Stdin(), "%d %d %s\n", probes, probes, j.ID)
				require.NoError(t, lagging.Signal(syscall.SIGCONT))
				got := lagging.Next(t)
				if strings.Contains(got, "list") {
					wrongLists++
				}
				if strings.Contains(got, "stats") {
					wrongStats++
				}
				if got != "ok" {
					t.Logf("round %d: %s", round, got)
				}
			}
			t.Logf("pidns=%v: %d of %d listings and %d of %d stats wrong", pidns, wrongLists, rounds, wrongStats, rounds)
			require.Zero(t, wrongLists+wrongStats, "%d of %d listings and %d of %d stats missed acknowledged jobs", wrongLists, rounds, wrongStats, rounds)
		})
	}
}

// TestTempNamesApartAcrossPIDNamespaces: processes that are each PID 1 of
// their own PID namespace name their temp files apart
// (.<base>.<nonce>.<seq>), so that neither's write fails on the other's
// file where they stage in one directory (the FORMAT file, in the store's
// root).
func TestTempNamesApartAcrossPIDNamespaces(t *testing.T) {
	testproc.RequirePIDNamespaces(t)
	dir := t.TempDir()
	openAt(t, dir, nil)
	stage := t.TempDir()
	o := &testproc.Options{PIDNamespace: true, Env: []string{childDir + "=" + dir, childKey + "=" + stage}}
	var names [][]string
	for range 2 {
		p := testproc.Start(t, "temp-name", o)
		name := p.Lines(t)
		require.Len(t, name, 1)
		f := strings.Split(name[0], ".")
		require.Len(t, f, 4, "%s: want .<base>.<nonce>.<seq>", name[0])
		names = append(names, f)
	}
	require.NotEqual(t, names[0][2], names[1][2], "the process part of two processes' temp names")
}
