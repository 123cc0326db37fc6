package queuetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// Limiter is what the checks of limits need of a store.
type Limiter interface {
	Store
	jobstore.QueueLimiter
}

// StartWorkers starts the four child processes of a check of limits, each
// running LimitWorker on the store under test, and returns them once each
// has said "ready".
type StartWorkers func() []*testproc.Proc

// LimitWorker is the role of a child process of the checks of limits: it
// prints "ready", then runs up to eight jobs at once, each for jobRun,
// printing "start ID NANOS" and "end ID NANOS" (unix nanoseconds) around
// each, until it is killed.
func LimitWorker(ctx context.Context, s Claimer, worker string) error {
	slots := make(chan struct{}, 8)
	fmt.Println("ready")
	for {
		slots <- struct{}{}
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		var nj *jobstore.NoJobError
		if errors.As(err, &nj) {
			<-slots
			if err := s.AwaitWorkSince(ctx, nj); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		go func() {
			defer func() { <-slots }()
			fmt.Printf("start %s %d\n", j.ID, time.Now().UnixNano())
			time.Sleep(jobRun)
			fmt.Printf("end %s %d\n", j.ID, time.Now().UnixNano())
			if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
				fmt.Fprintln(os.Stderr, "complete:", err)
			}
		}()
	}
}

// jobRun is how long a LimitWorker's job runs: long beside the time a
// freed place takes to be taken on a loaded machine (tens of
// milliseconds), so that a limit is reached in the workers' own records,
// which lie within the time the store counts a job.
const jobRun = 100 * time.Millisecond

// QueueLimit checks a queue's concurrency limit across processes: four
// workers of eight slots each work off the jobs of a queue limited to 3,
// and the first is SIGKILLed while it runs jobs. At no instant do more
// than 3 jobs of the queue run (by the workers' own records of when each
// started and ended), 3 run at some instant, and every job succeeds (the
// killed process's on another worker). It logs how soon a freed place was
// taken.
func QueueLimit(t *testing.T, s Limiter, start StartWorkers) {
	t.Helper()
	ctx := t.Context()
	const limit, jobs = 3, 60
	require.NoError(t, s.SetQueueLimit(ctx, "deploys", limit))
	var ids []string
	for range jobs {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "deploys"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	workers := start()
	// Kill the first worker once it has started a job.
	awaitStart(t, workers[0])
	killedAt := time.Now()
	require.NoError(t, workers[0].Signal(syscall.SIGKILL))
	waitSucceeded(t, s, ids)
	var events []event
	for _, r := range workerRuns(t, workers, killedAt) {
		events = append(events, event{r.start, 1, false}, event{r.end, -1, r.killed})
	}
	sortEvents(events)
	// The gaps from an end that freed a place of the full queue to the
	// next start, in another process or the same: how soon a waiting
	// worker took it.
	running, peak := 0, 0
	var freed time.Time
	var gaps []time.Duration
	for _, e := range events {
		if e.delta < 0 && running == limit && !e.killed {
			freed = e.at
		}
		if e.delta > 0 && !freed.IsZero() {
			gaps = append(gaps, e.at.Sub(freed))
			freed = time.Time{}
		}
		running += e.delta
		peak = max(peak, running)
	}
	slices.Sort(gaps)
	if len(gaps) > 0 {
		t.Logf("a freed place taken after %s (median of %d), %s at most", gaps[len(gaps)/2], len(gaps), gaps[len(gaps)-1])
	}
	t.Logf("%d starts; peak concurrency %d with a limit of %d", len(events)/2, peak, limit)
	require.Equal(t, limit, peak, "at most the limit ran at once, and the limit was reached")
}

// PartitionLimit checks a per-partition limit across processes: four
// workers of eight slots each work off 5 jobs of each of 20 partitions of
// a queue whose per-partition limit is 1, and the first is SIGKILLed while
// it runs jobs. No two jobs of a partition ran at once, each partition's
// jobs started in the order they were submitted (claim order; but for
// those the kill ended, which ran again after their recovery), and
// partitions ran in parallel.
func PartitionLimit(t *testing.T, s Limiter, start StartWorkers) {
	t.Helper()
	ctx := t.Context()
	const partitions, each = 20, 5
	require.NoError(t, s.SetPartitionLimit(ctx, "customers", 1))
	partOf := map[string]string{}
	var ids []string
	for range each {
		for p := range partitions {
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "customers", Partition: "customer-" + strconv.Itoa(p)})
			require.NoError(t, err)
			partOf[j.ID] = j.Partition
			ids = append(ids, j.ID)
		}
	}
	workers := start()
	awaitStart(t, workers[0])
	killedAt := time.Now()
	require.NoError(t, workers[0].Signal(syscall.SIGKILL))
	retried := map[string]bool{}
	for _, j := range waitSucceeded(t, s, ids) {
		// A job whose first attempt the kill ended ran again after its
		// recovery; the killed process may have died before it said so.
		retried[j.ID] = j.Attempt > 1
	}
	runs := workerRuns(t, workers, killedAt)
	slices.SortFunc(runs, func(a, b run) int { return a.start.Compare(b.start) })
	lastEnd := map[string]time.Time{}
	firstStarts := map[string][]string{}
	started := map[string]bool{}
	var events []event
	for _, r := range runs {
		p := partOf[r.id]
		require.NotEmpty(t, p, "a job not submitted here ran: %s", r.id)
		require.False(t, r.start.Before(lastEnd[p]), "job %s of %s started at %s, before the one before it ended (%s)", r.id, p, r.start, lastEnd[p])
		lastEnd[p] = later(lastEnd[p], r.end)
		if !started[r.id] && !retried[r.id] {
			started[r.id] = true
			firstStarts[p] = append(firstStarts[p], r.id)
		}
		events = append(events, event{r.start, 1, false}, event{r.end, -1, r.killed})
	}
	for p, order := range firstStarts {
		require.True(t, slices.IsSorted(order), "the jobs of %s started out of claim order: %v", p, order)
	}
	sortEvents(events)
	running, peak := 0, 0
	for _, e := range events {
		running += e.delta
		peak = max(peak, running)
	}
	t.Logf("%d attempts of %d jobs in %d partitions; peak concurrency %d", len(runs), len(ids), partitions, peak)
	require.GreaterOrEqual(t, peak, 5, "partitions ran in parallel")
	require.LessOrEqual(t, peak, partitions)
}

// QueueRate checks a rate across processes: four workers of eight slots
// each take the jobs of a queue whose rate is 20 a second for five
// seconds. In no window of a second, anywhere in that time, did more than
// 20 of them start (by the starts the jobs hold), and the rate was
// reached. It logs how soon after the window had room a start came.
func QueueRate(t *testing.T, s Limiter, start StartWorkers) {
	t.Helper()
	ctx := t.Context()
	rate := jobstore.Rate{N: 20, Per: time.Second}
	require.NoError(t, s.SetQueueRate(ctx, "mail", rate))
	for range 200 {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "mail"})
		require.NoError(t, err)
	}
	workers := start()
	const span = 5 * time.Second
	awaitStart(t, workers[0])
	time.Sleep(span)
	for _, c := range workers {
		require.NoError(t, c.Signal(syscall.SIGKILL))
		_ = c.Wait(ctx)
	}
	page, err := s.List(ctx, jobstore.ListOptions{Limit: jobstore.MaxListLimit})
	require.NoError(t, err)
	var starts []time.Time
	for _, j := range page.Jobs {
		if j.Attempt > 0 {
			require.Equal(t, 1, j.Attempt, "no job ran twice")
			starts = append(starts, j.StartedAt)
		}
	}
	slices.SortFunc(starts, time.Time.Compare)
	require.NotEmpty(t, starts)
	busiest := 0
	for i, at := range starts {
		n := 0
		for _, b := range starts[i:] {
			if b.Sub(at) >= rate.Per {
				break
			}
			n++
		}
		busiest = max(busiest, n)
	}
	took := starts[len(starts)-1].Sub(starts[0])
	// How late each start came after the window had room for it: the
	// start rate.N before it, plus the window.
	var late []time.Duration
	for i := rate.N; i < len(starts); i++ {
		late = append(late, starts[i].Sub(starts[i-rate.N].Add(rate.Per)))
	}
	slices.Sort(late)
	if len(late) > 0 {
		t.Logf("a start came %s after the window had room (median of %d), %s at most", late[len(late)/2], len(late), late[len(late)-1])
	}
	t.Logf("%d starts in %s; at most %d in a window of %s", len(starts), took.Round(time.Millisecond), busiest, rate.Per)
	require.LessOrEqual(t, busiest, rate.N, "no window of %s holds more than %d starts", rate.Per, rate.N)
	require.Equal(t, rate.N, busiest, "the rate was reached")
	require.GreaterOrEqual(t, len(starts), 80, "about 20 a second for %s", span)
}

// event is a job's start (delta 1) or end (-1); killed marks the end of a
// job of a killed process, at the kill.
type event struct {
	at     time.Time
	delta  int
	killed bool
}

// sortEvents sorts events by time, an end before a start at the same
// instant.
func sortEvents(events []event) {
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
}

// run is one attempt that a LimitWorker child reported.
type run struct {
	id         string
	start, end time.Time
	// killed marks an attempt of workers[0], killed at killedAt while it
	// ran: its end is the kill.
	killed bool
}

// waitSucceeded waits for each job of ids to end, requires that it
// succeeded, and returns the jobs.
func waitSucceeded(t *testing.T, s Limiter, ids []string) []jobstore.Job {
	t.Helper()
	var jobs []jobstore.Job
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		j, err := s.Wait(wctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		jobs = append(jobs, j)
	}
	return jobs
}

// awaitStart waits until the LimitWorker c has started a job.
func awaitStart(t *testing.T, c *testproc.Proc) {
	t.Helper()
	for {
		if strings.HasPrefix(c.Next(t), "start ") {
			return
		}
	}
}

// workerRuns stops the LimitWorker children but the first, which was
// SIGKILLed at killedAt, and returns the attempts they all reported.
func workerRuns(t *testing.T, workers []*testproc.Proc, killedAt time.Time) []run {
	t.Helper()
	var runs []run
	for i, c := range workers {
		if i > 0 {
			require.NoError(t, c.Signal(syscall.SIGTERM))
		}
		// Its exit, and the end of its output: a line the child wrote may
		// not have been read yet.
		_ = c.Wait(t.Context())
		open := map[string]time.Time{}
		for _, l := range strings.Split(c.Output(), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 || (f[0] != "start" && f[0] != "end") {
				continue
			}
			ns, err := strconv.ParseInt(f[2], 10, 64)
			require.NoError(t, err)
			at := time.Unix(0, ns)
			if f[0] == "start" {
				open[f[1]] = at
				continue
			}
			started, ok := open[f[1]]
			require.True(t, ok, "an end of a job that did not start: %s", l)
			runs = append(runs, run{id: f[1], start: started, end: at})
			delete(open, f[1])
		}
		// The killed process's jobs ended with it; it was killed after
		// killedAt, and no job of another process could start before.
		for id, started := range open {
			require.Zero(t, i, "a job of a live worker did not end")
			runs = append(runs, run{id: id, start: started, end: later(started, killedAt), killed: true})
		}
	}
	return runs
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
