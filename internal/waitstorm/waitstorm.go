// Package waitstorm holds what the wait-storm benchmarks of filestore and
// httpapi share: the worker that holds the job thousands of Waits watch (in
// another process, or in the benchmark's own), and the figures they report.
package waitstorm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// dirEnv names the store of the worker process.
const dirEnv = "JOBDIR_STORM_WORKER_DIR"

// childTest is the test that each benchmark's package declares to call
// RunWorkerChild.
const childTest = "TestStormWorkerChild"

// RunWorkerChild is the body of the package's TestStormWorkerChild, which
// is not a test on its own: StartWorker runs the test binary again with
// only that test selected, making it the worker process. It submits and
// claims a job, says "claimed ID", and on a line on stdin completes the job
// and says "completed NS", how long its Complete took.
func RunWorkerChild(t *testing.T) {
	dir := os.Getenv(dirEnv)
	if dir == "" {
		t.Skip("runs only as the worker process of BenchmarkWaitStorm")
	}
	ctx := t.Context()
	s, err := filestore.Open(ctx, dir, nil)
	require.NoError(t, err)
	defer s.Close()
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "k", Payload: []byte(`{"n":1}`)})
	require.NoError(t, err)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "storm-worker"})
	require.NoError(t, err)
	fmt.Println("claimed", c.ID)
	_, err = bufio.NewReader(os.Stdin).ReadString('\n')
	require.NoError(t, err)
	t0 := time.Now()
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	d := time.Since(t0)
	require.NoError(t, err)
	fmt.Println("completed", d.Nanoseconds())
}

// Worker holds the job of a wait storm: another process, or with
// inProcess a Store of its own in this process (as `jobdir serve --work`
// runs one).
type Worker struct {
	// ID is the job the worker holds.
	ID    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
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
	cmd := exec.Command(os.Args[0], "-test.run=^"+childTest+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), dirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	w := &Worker{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	w.ID = w.expect(b, "claimed")
	return w
}

// expect returns the rest of the worker's next line that begins with word.
func (w *Worker) expect(b *testing.B, word string) string {
	b.Helper()
	for w.out.Scan() {
		if rest, ok := strings.CutPrefix(w.out.Text(), word+" "); ok {
			return rest
		}
	}
	b.Fatalf("the worker process ended before saying %q: %v", word, w.out.Err())
	return ""
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
	_, err := fmt.Fprintln(w.stdin, "complete")
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
