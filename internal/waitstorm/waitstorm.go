// Package waitstorm holds what the wait-storm benchmarks of filestore and
// httpapi share: the worker that holds the job thousands of Waits watch (in
// another process, or in the benchmark's own), and the figures they report.
// The worker process is a child of the test binary (internal/testproc),
// which runs WorkerChild: this package registers it with testproc, and the
// TestMain of a package whose benchmark imports this one calls
// testproc.Main.
package waitstorm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// childName is the name of WorkerChild among the child functions of a
// test binary.
const childName = "storm-worker"

func init() { testproc.Register(childName, WorkerChild) }

// WorkerChild is the worker process of a benchmark's wait storm, which
// StartWorker starts through internal/testproc: on the store in args[0],
// it submits and claims a job, says "claimed ID", and on a line on stdin
// completes the job and says "completed NS", how long its Complete took.
func WorkerChild(args []string) int {
	if err := workerChild(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "storm worker:", err)
		return 1
	}
	return 0
}

func workerChild(dir string) error {
	ctx := context.Background()
	s, err := filestore.Open(ctx, dir, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: []byte(`{"n":1}`)}); err != nil {
		return err
	}
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "storm-worker"})
	if err != nil {
		return err
	}
	fmt.Println("claimed", c.ID)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	t0 := time.Now()
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	d := time.Since(t0)
	if err != nil {
		return err
	}
	fmt.Println("completed", d.Nanoseconds())
	return nil
}

// Worker holds the job of a wait storm: another process, or with
// inProcess a Store of its own in this process (as `jobdir serve --work`
// runs one).
type Worker struct {
	// ID is the job the worker holds.
	ID   string
	proc *testproc.Proc
	// store and lease are the in-process worker's.
	store *filestore.Store
	lease jobstore.Lease
}

// StartWorker starts the worker on the store in dir and returns once it
// holds its job.
func StartWorker(b *testing.B, dir string, inProcess bool) *Worker {
	b.Helper()
	if inProcess {
		s, err := filestore.Open(b.Context(), dir, nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		_, _, err = s.Submit(b.Context(), jobstore.Spec{Kind: "k", Payload: []byte(`{"n":1}`)})
		require.NoError(b, err)
		c, err := s.Claim(b.Context(), jobstore.ClaimRequest{Worker: "storm-worker"})
		require.NoError(b, err)
		return &Worker{ID: c.ID, store: s, lease: c.Lease()}
	}
	w := &Worker{proc: testproc.Start(b, childName, &testproc.Options{Args: []string{dir}})}
	w.ID = w.expect(b, "claimed")
	return w
}

// expect returns the rest of the worker's next line that begins with word.
func (w *Worker) expect(b *testing.B, word string) string {
	b.Helper()
	for {
		if rest, ok := strings.CutPrefix(w.proc.Next(b), word+" "); ok {
			return rest
		}
	}
}

// Complete tells the worker to complete its job and returns how long its
// Complete took.
func (w *Worker) Complete(b *testing.B) time.Duration {
	b.Helper()
	if w.store != nil {
		t0 := time.Now()
		_, err := w.store.Complete(b.Context(), w.lease, jobstore.Succeeded(nil))
		require.NoError(b, err)
		return time.Since(t0)
	}
	_, err := fmt.Fprintln(w.proc.Stdin(), "complete")
	require.NoError(b, err)
	ns, err := strconv.ParseInt(w.expect(b, "completed"), 10, 64)
	require.NoError(b, err)
	return time.Duration(ns)
}

// Report reports a storm's figures in milliseconds: how long the worker's
// Complete took, the slowest and the median of the Gets made during the
// storm, and the time from the Complete to the return of every Wait.
func Report(b *testing.B, completed time.Duration, gets []time.Duration, woke time.Duration) {
	b.ReportMetric(ms(completed), "complete-ms")
	b.ReportMetric(ms(slices.Max(gets)), "get-max-ms")
	sorted := slices.Sorted(slices.Values(gets))
	b.ReportMetric(ms(sorted[len(sorted)/2]), "get-p50-ms")
	b.ReportMetric(ms(woke), "wake-all-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
