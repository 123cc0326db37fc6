package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/storeurl"
)

// The multi-process tests of dependencies and batches: real `jobdir work`
// processes, on a file store and on PostgreSQL.

// TestE2EDependencyGraphAcrossProcesses: a random graph of 200 jobs,
// submitted in one SubmitBatch, worked by three processes of which one is
// SIGKILLed every 0.4 s. Each job writes a line when it starts and when it
// ends. Every job ends; no attempt of a job started before each of its
// dependencies had ended; no job ran whose dependency (without after_any)
// failed or was canceled.
func TestE2EDependencyGraphAcrossProcesses(t *testing.T) {
	onFileAndPostgres(t, testDependencyGraph)
}

// jobLine is a line a test job wrote: its ID, "start" or "end", and when.
type jobLine struct {
	id, what string
	at       time.Time
}

// readJobLines reads the lines the test jobs appended to path.
func readJobLines(t *testing.T, path string) []jobLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []jobLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		require.Len(t, fs, 3, "line %q", sc.Text())
		ns, err := strconv.ParseInt(fs[2], 10, 64)
		require.NoError(t, err)
		out = append(out, jobLine{id: fs[0], what: fs[1], at: time.Unix(0, ns)})
	}
	require.NoError(t, sc.Err())
	return out
}

// loggingSpec is an exec job that appends "<id> start <ns>" to log, sleeps,
// appends "<id> end <ns>" and exits with code.
func loggingSpec(t *testing.T, wd, log string, sleep time.Duration, code int) jobstore.Spec {
	t.Helper()
	script := fmt.Sprintf(`echo "$JOBDIR_JOB_ID start $(date +%%s%%N)" >> %[1]s; sleep %.3[2]f; echo "$JOBDIR_JOB_ID end $(date +%%s%%N)" >> %[1]s; exit %[3]d`,
		log, sleep.Seconds(), code)
	spec, err := execjob.NewSpec(execjob.Payload{Argv: []string{"sh", "-c", script}, Dir: wd})
	require.NoError(t, err)
	return spec
}

// waitAllEnded polls the store until every job has ended, and returns them.
func waitAllEnded(t *testing.T, st jobstore.Store, want int, timeout time.Duration) map[string]jobstore.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		jobs := map[string]jobstore.Job{}
		ended := 0
		cursor := ""
		for {
			p, err := st.List(t.Context(), jobstore.ListOptions{Limit: jobstore.MaxListLimit, Cursor: cursor, Order: jobstore.OldestFirst})
			require.NoError(t, err)
			for _, j := range p.Jobs {
				jobs[j.ID] = j
				if j.State.Terminal() {
					ended++
				}
			}
			if p.Next == "" {
				break
			}
			cursor = p.Next
		}
		if len(jobs) == want && ended == want {
			return jobs
		}
		if time.Now().After(deadline) {
			var open []string
			for id, j := range jobs {
				if !j.State.Terminal() {
					open = append(open, fmt.Sprintf("%s %s after %v", id, j.State, j.After))
				}
			}
			slices.Sort(open)
			t.Fatalf("after %s, %d of %d jobs ended; not ended: %v", timeout, ended, want, open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func testDependencyGraph(t *testing.T, store string) {
	const n = 200
	wd := t.TempDir()
	log := filepath.Join(wd, "jobs.log")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	specs := make([]jobstore.Spec, n)
	fails := map[int]bool{}
	for i := range specs {
		code := 0
		if rng.IntN(100) < 4 {
			code, fails[i] = 1, true
		}
		sp := loggingSpec(t, wd, log, time.Duration(30+rng.IntN(120))*time.Millisecond, code)
		sp.MaxAttempts = 8 // the SIGKILLs count attempts; the failures are permanent below
		if code != 0 {
			sp.MaxAttempts = 1
		}
		for range rng.IntN(4) {
			if i > 0 {
				sp.AfterSpecs = append(sp.AfterSpecs, max(0, i-1-rng.IntN(min(i, 30))))
			}
		}
		sp.AfterAny = len(sp.AfterSpecs) > 0 && rng.IntN(4) == 0
		specs[i] = sp
	}
	st, err := storeurl.Open(t.Context(), store, nil)
	require.NoError(t, err)
	defer st.Close()
	out, err := st.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, r := range out {
		ids[i] = r.Job.ID
	}

	startWorker := func() *proc { return start(t, jobdirCmd(store, wd, "work", "-q", "--concurrency", "4")) }
	workers := []*proc{startWorker(), startWorker(), startWorker()}
	stop := make(chan struct{})
	killed := make(chan int)
	go func() {
		kills := 0
		defer func() { killed <- kills }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
			}
			_ = workers[kills%3].cmd.Process.Signal(syscall.SIGKILL)
			<-workers[kills%3].done
			workers[kills%3] = startWorker()
			kills++
		}
	}()
	jobs := waitAllEnded(t, st, n, 3*time.Minute)
	close(stop)
	kills := <-killed
	// A worker started by the last kill may still be starting up, before
	// it handles SIGTERM: give it the time to.
	time.Sleep(time.Second)
	for _, w := range workers {
		w.stop(t)
	}

	lines := readJobLines(t, log)
	starts := map[string][]time.Time{}
	for _, l := range lines {
		if l.what == "start" {
			starts[l.id] = append(starts[l.id], l.at)
		}
	}
	ran, canceled, attempts := 0, 0, 0
	for i, sp := range specs {
		j := jobs[ids[i]]
		if len(starts[j.ID]) > 0 {
			ran++
			attempts += len(starts[j.ID])
		}
		for _, d := range j.After {
			dep := jobs[d]
			require.True(t, dep.State.Terminal())
			for _, at := range starts[j.ID] {
				require.False(t, at.Before(dep.FinishedAt), "job %d started at %s, before its dependency %s ended at %s", i, at, d, dep.FinishedAt)
			}
			if !sp.AfterAny && dep.State != jobstore.StateSucceeded {
				require.Empty(t, starts[j.ID], "job %d ran though its dependency %s is %s", i, d, dep.State)
				require.Equal(t, jobstore.StateCanceled, j.State, "job %d", i)
			}
		}
		if j.State == jobstore.StateCanceled {
			canceled++
			require.Contains(t, j.LastError, "dependency ")
		}
		if fails[i] && len(starts[j.ID]) > 0 {
			require.Equal(t, jobstore.StateFailed, j.State, "job %d", i)
		}
	}
	t.Logf("%d jobs through %d SIGKILLs: %d ran (%d starts), %d canceled by a dependency", n, kills, ran, attempts, canceled)
}

// TestE2EPromotionLatency measures, across processes, the time from a
// dependency's end to its dependent's start: a chain of jobs whose links
// alternate between two queues, each served by its own `jobdir work`.
func TestE2EPromotionLatency(t *testing.T) {
	onFileAndPostgres(t, testPromotionLatency)
}

func testPromotionLatency(t *testing.T, store string) {
	const n = 60
	wd := t.TempDir()
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		sp, err := execjob.NewSpec(execjob.Payload{Argv: []string{"true"}, Dir: wd})
		require.NoError(t, err)
		sp.Queue = "q" + strconv.Itoa(i%2)
		if i > 0 {
			sp.AfterSpecs = []int{i - 1}
		}
		specs[i] = sp
	}
	w0 := start(t, jobdirCmd(store, wd, "work", "-q", "--queue", "q0"))
	w1 := start(t, jobdirCmd(store, wd, "work", "-q", "--queue", "q1"))
	time.Sleep(500 * time.Millisecond) // both registered and waiting
	st, err := storeurl.Open(t.Context(), store, nil)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	jobs := waitAllEnded(t, st, n, time.Minute)
	w0.stop(t)
	w1.stop(t)
	byIdx := make([]jobstore.Job, 0, n)
	for _, j := range jobs {
		byIdx = append(byIdx, j)
	}
	slices.SortFunc(byIdx, func(a, b jobstore.Job) int { return strings.Compare(a.ID, b.ID) })
	var lat []time.Duration
	for i := 1; i < n; i++ {
		require.Equal(t, jobstore.StateSucceeded, byIdx[i].State)
		require.Equal(t, []string{byIdx[i-1].ID}, byIdx[i].After)
		d := byIdx[i].StartedAt.Sub(byIdx[i-1].FinishedAt)
		require.GreaterOrEqual(t, d, time.Duration(0), "job %d started before its dependency ended", i)
		lat = append(lat, d)
	}
	slices.Sort(lat)
	p99 := lat[(len(lat)*99)/100]
	t.Logf("a dependency's end in one process to its dependent's start in another: p50 %s, p99 %s, max %s (%d links)",
		lat[len(lat)/2], p99, lat[len(lat)-1], len(lat))
	require.Less(t, lat[len(lat)/2], 50*time.Millisecond, "the median promotion took longer than 50 ms")
}

// TestE2EBatchCallbackOnce: a batch of 500 jobs and its callback, the
// jobs finished by four processes at once: the callback runs exactly
// once, after every job of the batch ended.
func TestE2EBatchCallbackOnce(t *testing.T) {
	onFileAndPostgres(t, testBatchCallbackOnce)
}

func testBatchCallbackOnce(t *testing.T, store string) {
	const n = 500
	wd := t.TempDir()
	log := filepath.Join(wd, "jobs.log")
	st, err := storeurl.Open(t.Context(), store, nil)
	require.NoError(t, err)
	defer st.Close()
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		sp, err := execjob.NewSpec(execjob.Payload{Argv: []string{"true"}, Dir: wd})
		require.NoError(t, err)
		sp.Batch = "exports"
		if i%50 == 7 {
			sp.Payload = nil
			sp, err = execjob.NewSpec(execjob.Payload{Argv: []string{"false"}, Dir: wd})
			require.NoError(t, err)
			sp.Batch, sp.MaxAttempts = "exports", 1
		}
		specs[i] = sp
	}
	_, err = st.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	cb := loggingSpec(t, wd, log, 0, 0)
	cb.AfterBatch = "exports"
	cbJob, _, err := st.Submit(t.Context(), cb)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, cbJob.State)
	require.Len(t, cbJob.After, n)

	var workers []*proc
	for range 4 {
		workers = append(workers, start(t, jobdirCmd(store, wd, "work", "-q", "--concurrency", "8")))
	}
	jobs := waitAllEnded(t, st, n+1, 3*time.Minute)
	time.Sleep(500 * time.Millisecond) // a second run of the callback would show by now
	for _, w := range workers {
		w.stop(t)
	}
	cbDone := jobs[cbJob.ID]
	require.Equal(t, jobstore.StateSucceeded, cbDone.State)
	require.Equal(t, 1, cbDone.Attempt, "the callback was claimed more than once")
	var lastEnd time.Time
	for id, j := range jobs {
		if id != cbJob.ID && j.FinishedAt.After(lastEnd) {
			lastEnd = j.FinishedAt
		}
	}
	lines := readJobLines(t, log)
	require.Len(t, lines, 2, "the callback ran more than once: %v", lines)
	require.False(t, lines[0].at.Before(lastEnd), "the callback started before the last job of its batch ended")
	if dr, ok := st.(jobstore.DependencyReader); ok {
		b, err := dr.Batch(t.Context(), "exports")
		require.NoError(t, err)
		require.Equal(t, n, b.Total)
		require.Equal(t, n/50, b.States[jobstore.StateFailed])
		require.True(t, b.Closed)
		require.Equal(t, []string{cbJob.ID}, b.Callbacks)
	}
	t.Logf("callback started %s after the batch's last job ended", lines[0].at.Sub(lastEnd))
}
