package filestore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// waitStormWaiters is how many Waits BenchmarkWaitStorm runs on one job
// (issue: "5,000 concurrent Waits on a running job").
const waitStormWaiters = 5000

// enteredStore counts the Waits that have begun.
type enteredStore struct {
	*filestore.Store
	entered atomic.Int64
}

func (e *enteredStore) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	e.entered.Add(1)
	return e.Store.Wait(ctx, id)
}

// BenchmarkWaitStorm runs 5,000 concurrent Waits on one running job of a
// durable store, lets them settle for two poll intervals, then measures
// what readers must not delay: a Get of that job through the waiters'
// Store (get-max-ms over 20 Gets across a poll interval), the Complete of
// the worker, another process or a Store of its own in this process
// (complete-ms), and the time until every
// Wait has returned (wake-all-ms). Run it with
// -benchtime=1x: one iteration is a whole storm. With no waiters
// (waiters=0) it measures the same calls on a quiet store: the baseline
// that the storm's figures are compared with.
func BenchmarkWaitStorm(b *testing.B) {
	for _, worker := range []string{"process", "inproc"} {
		b.Run("worker="+worker, func(b *testing.B) {
			for _, n := range []int{0, waitStormWaiters} {
				b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
					for b.Loop() {
						waitStorm(b, n, worker == "inproc")
					}
				})
			}
		})
	}
}

func waitStorm(b *testing.B, n int, inProcess bool) {
	ctx := b.Context()
	dir := b.TempDir()
	readers, err := filestore.Open(ctx, dir, nil)
	require.NoError(b, err)
	defer readers.Close()
	es := &enteredStore{Store: readers}
	worker := startStormWorker(b, dir, inProcess)
	j := jobstore.Job{ID: worker.id}

	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range n {
		wg.Go(func() {
			got, err := es.Wait(wctx, j.ID)
			if err != nil || got.State != jobstore.StateSucceeded {
				failed.Add(1)
			}
		})
	}
	for es.entered.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	// The load of waiters that poll is periodic: let every waiter go
	// through a poll or two before measuring.
	time.Sleep(2 * filestore.DefaultPollInterval)

	var gets []time.Duration
	for range 20 {
		t0 := time.Now()
		_, err := readers.Get(ctx, j.ID)
		gets = append(gets, time.Since(t0))
		require.NoError(b, err)
		time.Sleep(filestore.DefaultPollInterval / 20)
	}
	t0 := time.Now()
	completed := worker.complete(b)
	wg.Wait()
	woke := time.Since(t0)
	require.Zero(b, failed.Load(), "waits that did not see the job succeed")

	b.ReportMetric(ms(completed), "complete-ms")
	b.ReportMetric(ms(slices.Max(gets)), "get-max-ms")
	slices.Sort(gets)
	b.ReportMetric(ms(gets[len(gets)/2]), "get-p50-ms")
	b.ReportMetric(ms(woke), "wake-all-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// stormDirEnv names the store of the worker process of BenchmarkWaitStorm.
const stormDirEnv = "JOBDIR_STORM_WORKER_DIR"

// TestStormWorkerChild is not a test on its own: BenchmarkWaitStorm runs
// the test binary again with only this test selected and stormDirEnv set,
// making it the worker process. It submits and claims a job, says
// "claimed ID", and on a line on stdin completes the job and says
// "completed NS", how long its Complete took.
func TestStormWorkerChild(t *testing.T) {
	dir := os.Getenv(stormDirEnv)
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

// stormWorker is the worker of BenchmarkWaitStorm: another process, or
// with inProcess a Store of its own in this process (as `jobdir serve
// --work` runs one).
type stormWorker struct {
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	// store and lease are the in-process worker's.
	store *filestore.Store
	lease jobstore.Lease
}

// startStormWorker starts the worker on the store in dir and returns once
// it holds its job.
func startStormWorker(b *testing.B, dir string, inProcess bool) *stormWorker {
	b.Helper()
	if inProcess {
		s, err := filestore.Open(b.Context(), dir, nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		_, _, err = s.Submit(b.Context(), jobstore.Spec{Kind: "k", Payload: []byte(`{"n":1}`)})
		require.NoError(b, err)
		c, err := s.Claim(b.Context(), jobstore.ClaimRequest{Worker: "storm-worker"})
		require.NoError(b, err)
		return &stormWorker{id: c.ID, store: s, lease: c.Lease()}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStormWorkerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), stormDirEnv+"="+dir)
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
	w := &stormWorker{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	w.id = w.expect(b, "claimed")
	return w
}

// expect returns the rest of the worker's next line that begins with word.
func (w *stormWorker) expect(b *testing.B, word string) string {
	b.Helper()
	for w.out.Scan() {
		if rest, ok := strings.CutPrefix(w.out.Text(), word+" "); ok {
			return rest
		}
	}
	b.Fatalf("the worker process ended before saying %q: %v", word, w.out.Err())
	return ""
}

// complete tells the worker to complete its job and returns how long its
// Complete took.
func (w *stormWorker) complete(b *testing.B) time.Duration {
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
