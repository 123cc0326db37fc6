package filestore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/queuetest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// TestProcessesPauseAndResume: with jobs of a queue submitted all along,
// and two other processes claiming them, no job of the queue starts (its
// started_at, the claim's time) after PauseQueue returned in this process,
// while another queue's jobs go on starting; after ResumeQueue, the
// workers, which wait for work, start the queue's jobs again at once. It
// logs how soon after the resume returned the first one started.
func TestProcessesPauseAndResume(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	var children []*testproc.Proc
	for range 2 {
		c := startChild(t, dir, "claim-starts", childNoSync+"=1")
		require.Equal(t, "ready", c.Next(t))
		children = append(children, c)
	}
	queuetest.PauseAndResume(t, s, children)
}

// TestQueueSettingsFile: a pause is written to QUEUES durably and read
// by a Store opened later; a setting this program does not know (of a
// newer one) keeps its queue's jobs from being claimed and is kept as it
// is by a change of another queue's setting; a damaged file stops claims with an
// error that names it, rather than let a pause go unseen.
func TestQueueSettingsFile(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	require.NoError(t, s.PauseQueue(ctx, "a"))
	data, err := os.ReadFile(filepath.Join(dir, queuesFile))
	require.NoError(t, err)
	require.JSONEq(t, `{"queues": {"a": {"paused": true}}}`, string(data))
	require.NoError(t, s.Close())

	s = openAt(t, dir, &Options{NoSync: true})
	a, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "a"})
	require.NoError(t, err)
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "the pause outlives the Store that made it")

	// A newer program's setting on queue b.
	b, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "b"})
	require.NoError(t, err)
	newer := `{"queues": {"a": {"paused": true}, "b": {"weight": 3}}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, queuesFile), []byte(newer), 0o600))
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob, "a queue with a setting this program does not know is not claimed")
	qs, err := s.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	require.True(t, qs[1].Paused, "it is shown paused")
	require.NoError(t, s.ResumeQueue(ctx, "a"))
	data, err = os.ReadFile(filepath.Join(dir, queuesFile))
	require.NoError(t, err)
	var doc map[string]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &doc))
	require.JSONEq(t, `{"weight": 3}`, string(doc["queues"]["b"]), "the unknown setting is kept")
	require.NotContains(t, doc["queues"], "a", "a queue without settings has no entry")
	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, a.ID, j.ID)

	// Damage.
	require.NoError(t, os.WriteFile(filepath.Join(dir, queuesFile), []byte(`{"queues": `), 0o600))
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrCorrupt)
	require.Contains(t, err.Error(), queuesFile)
	require.ErrorIs(t, s.PauseQueue(ctx, "c"), jobstore.ErrCorrupt, "a change does not overwrite a file it cannot read")
	require.NoError(t, os.Remove(filepath.Join(dir, queuesFile)))
	j, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, b.ID, j.ID)
}

// TestQueueSettingsConcurrentChanges: processes that pause different
// queues at once leave every pause in place (the changes are made under
// one lock, each on the file as the last one left it).
func TestQueueSettingsConcurrentChanges(t *testing.T) {
	dir := t.TempDir()
	openAt(t, dir, &Options{NoSync: true}).Close()
	const n = 4
	var children []*testproc.Proc
	start := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixNano(), 10)
	for i := range n {
		children = append(children, startChild(t, dir, "pause-queues", childNoSync+"=1", childKey+"="+strconv.Itoa(i), childStart+"="+start))
	}
	for _, c := range children {
		c.Lines(t)
	}
	s := openAt(t, dir, &Options{NoSync: true})
	qs, err := s.Queues(context.Background())
	require.NoError(t, err)
	require.Len(t, qs, n*10)
	for _, q := range qs {
		require.True(t, q.Paused, "queue %s", q.Queue)
	}
}

// TestProcessesQueueLimit: four worker processes of eight slots each work
// off the jobs of a queue limited to 3, each job recording when it started
// and ended; one process is SIGKILLed while it runs jobs. At no instant do
// more than 3 jobs of the queue run, 3 run at some instant, and every job
// succeeds (the killed process's jobs on another worker).
func TestProcessesQueueLimit(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})
	ctx := t.Context()
	const limit, jobs = 3, 60
	require.NoError(t, s.SetQueueLimit(ctx, "deploys", limit))
	var ids []string
	for range jobs {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "deploys"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	workers := startLimitWorkers(t, dir)
	// Kill the first worker once it has started a job.
	awaitStart(t, workers[0])
	killedAt := time.Now()
	require.NoError(t, workers[0].Signal(syscall.SIGKILL))
	waitSucceeded(t, s, ids)
	var events []event
	for _, r := range workerRuns(t, workers, killedAt) {
		events = append(events, event{r.start, 1, false}, event{r.end, -1, r.killed})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	// The gaps from an end that freed a slot of the full queue to the
	// next start, in another process or the same: how soon a waiting
	// worker took the slot.
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
		t.Logf("a freed slot taken after %s (median of %d), %s at most", gaps[len(gaps)/2], len(gaps), gaps[len(gaps)-1])
	}
	t.Logf("%d starts; peak concurrency %d with a limit of %d", len(events)/2, peak, limit)
	require.Equal(t, limit, peak, "at most the limit ran at once, and the limit was reached")
}

// event is a job's start (delta 1) or end (-1); killed marks the end of a
// job of a killed process, at the kill.
type event struct {
	at     time.Time
	delta  int
	killed bool
}

// run is one attempt that a limit-worker child reported.
type run struct {
	id         string
	start, end time.Time
	// killed marks an attempt of workers[0], killed at killedAt while it
	// ran: its end is the kill.
	killed bool
}

// startLimitWorkers starts four limit-worker children on the store in dir,
// each running up to eight jobs at once, and waits until they are ready.
func startLimitWorkers(t *testing.T, dir string) []*testproc.Proc {
	t.Helper()
	var workers []*testproc.Proc
	for range 4 {
		c := startChild(t, dir, "limit-worker", childNoSync+"=1")
		require.Equal(t, "ready", c.Next(t))
		workers = append(workers, c)
	}
	return workers
}

// waitSucceeded waits for each job of ids to end, requires that it
// succeeded, and returns the jobs.
func waitSucceeded(t *testing.T, s *Store, ids []string) []jobstore.Job {
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

// awaitStart waits until the limit-worker c has started a job.
func awaitStart(t *testing.T, c *testproc.Proc) {
	t.Helper()
	for {
		if strings.HasPrefix(c.Next(t), "start ") {
			return
		}
	}
}

// workerRuns stops the limit-worker children but the first, which was
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
			runs = append(runs, run{id: id, start: started, end: maxTime(started, killedAt), killed: true})
		}
	}
	return runs
}

// TestProcessesPartitionLimit: four worker processes of eight slots each
// work off 5 jobs of each of 20 partitions of a queue whose per-partition
// limit is 1, and one of them is SIGKILLed while it runs jobs: no two jobs
// of a partition ran at once, each partition's jobs started in the order
// they were submitted (claim order; but for those the kill ended, which
// ran again after their recovery), and partitions ran in parallel.
func TestProcessesPartitionLimit(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})
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
	workers := startLimitWorkers(t, dir)
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
		lastEnd[p] = maxTime(lastEnd[p], r.end)
		if !started[r.id] && !retried[r.id] {
			started[r.id] = true
			firstStarts[p] = append(firstStarts[p], r.id)
		}
		events = append(events, event{r.start, 1, false}, event{r.end, -1, r.killed})
	}
	for p, order := range firstStarts {
		require.True(t, slices.IsSorted(order), "the jobs of %s started out of claim order: %v", p, order)
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	running, peak := 0, 0
	for _, e := range events {
		running += e.delta
		peak = max(peak, running)
	}
	t.Logf("%d attempts of %d jobs in %d partitions; peak concurrency %d", len(runs), len(ids), partitions, peak)
	require.GreaterOrEqual(t, peak, 5, "partitions ran in parallel")
	require.LessOrEqual(t, peak, partitions)
}

// TestPartitionSlotsDoNotPileUp: the slot files of a queue's partitions
// are removed when their jobs end, with their directories, so that a queue
// that has seen many partitions keeps no file for them.
func TestPartitionSlotsDoNotPileUp(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	require.NoError(t, s.SetPartitionLimit(ctx, "q", 2))
	for p := range 50 {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "q", Partition: "p" + strconv.Itoa(p)})
		require.NoError(t, err)
	}
	partsDir := filepath.Join(dir, dirSlots, keyName("q"), dirPartitions)
	var running []jobstore.Job
	for range 50 {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		running = append(running, j)
	}
	ents, err := os.ReadDir(partsDir)
	require.NoError(t, err)
	require.Len(t, ents, 50, "a slot directory for each partition that runs a job")
	for i, j := range running {
		if i%2 == 0 {
			_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		} else {
			err = s.Release(ctx, j.Lease())
		}
		require.NoError(t, err)
	}
	ents, err = os.ReadDir(partsDir)
	require.NoError(t, err)
	require.Empty(t, ents, "the slots of ended attempts are removed")
}

// TestProcessesQueueRate: four worker processes of eight slots each take
// the jobs of a queue whose rate is 20 a second for five seconds: in no
// window of a second, anywhere in that time, did more than 20 of them
// start (by the starts the records hold), and the rate was reached.
func TestProcessesQueueRate(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	ctx := t.Context()
	rate := jobstore.Rate{N: 20, Per: time.Second}
	require.NoError(t, s.SetQueueRate(ctx, "mail", rate))
	for range 200 {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: "mail"})
		require.NoError(t, err)
	}
	workers := startLimitWorkers(t, dir)
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

// TestStoppedWorkerKeepsItsSlots: a worker that is stopped (SIGSTOP) while
// it runs a job of a limited queue and partition is alive, and keeps the
// job's slots, as it keeps its lease: no other process starts the next
// job meanwhile. Once it is killed, its slots are free and the jobs run.
func TestStoppedWorkerKeepsItsSlots(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, s.SetQueueLimit(ctx, "q", 1))
	require.NoError(t, s.SetPartitionLimit(ctx, "q", 1))
	spec := jobstore.Spec{Kind: "work", Queue: "q", Partition: "customer-1"}
	first, _, err := s.Submit(ctx, spec)
	require.NoError(t, err)
	_, _, err = s.Submit(ctx, spec)
	require.NoError(t, err)
	c := startChild(t, dir, "hold")
	require.Equal(t, "claimed "+first.ID+" 1", c.Next(t))
	require.NoError(t, c.Stop(ctx))
	for range 10 { // ten recovery passes
		_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Queues: []string{"q"}})
		require.ErrorIs(t, err, jobstore.ErrNoJob, "a slot of a stopped worker was taken from it")
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, c.Signal(syscall.SIGKILL))
	_ = c.Wait(ctx)
	require.Eventually(t, func() bool {
		_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Queues: []string{"q"}})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the slots are free once the stopped worker is killed")
}

// TestQueueLimitSlotOutlivesClaimant: the slot of a job of a limited
// queue, or of a limited partition, stays taken while a process of its
// attempt (here, as execjob's supervisor is, a process that holds a copy
// of the lease) outlives the process that claimed it, and is free once
// that process is gone too.
func TestQueueLimitSlotOutlivesClaimant(t *testing.T) {
	for _, partition := range []string{"", "customer-1"} {
		name := "queue"
		if partition != "" {
			name = "partition"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
			ctx := t.Context()
			if partition == "" {
				require.NoError(t, s.SetQueueLimit(ctx, "q", 1))
			} else {
				require.NoError(t, s.SetPartitionLimit(ctx, "q", 1))
			}
			spec := jobstore.Spec{Kind: "work", Queue: "q", Partition: partition}
			j, _, err := s.Submit(ctx, spec)
			require.NoError(t, err)
			next, _, err := s.Submit(ctx, spec)
			require.NoError(t, err)
			c := startChild(t, dir, "hold-lease-file")
			require.Equal(t, "claimed "+j.ID+" 1", c.Next(t))
			holder := holderPid(t, c.Next(t))
			t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL) })

			require.NoError(t, c.Signal(syscall.SIGKILL))
			_ = c.Wait(ctx)
			_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Queues: []string{"q"}})
			require.ErrorIs(t, err, jobstore.ErrNoJob, "the slot was freed while a process of the attempt still ran")

			require.NoError(t, syscall.Kill(holder, syscall.SIGKILL))
			require.Eventually(t, func() bool {
				got, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Queues: []string{"q"}})
				if err != nil {
					require.ErrorIs(t, err, jobstore.ErrNoJob)
					return false
				}
				require.Equal(t, next.ID, got.ID)
				return true
			}, 10*time.Second, 5*time.Millisecond, "the slot is free once the attempt's last process is gone")
		})
	}
}

// TestQueueSettingsPlantedLink: a link planted for QUEUES, to a file
// outside the store, is never followed: claims and changes fail with an
// error that names it and says what to do, and the file it points to is
// neither read nor written; once it is removed, the store works again.
func TestQueueSettingsPlantedLink(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	ctx := t.Context()
	outside := filepath.Join(t.TempDir(), "settings")
	const theirs = `{"queues": {"x": {"paused": true}}}`
	require.NoError(t, os.WriteFile(outside, []byte(theirs), 0o600))
	link := filepath.Join(dir, queuesFile)
	require.NoError(t, os.Symlink(outside, link))
	_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrCorrupt)
	require.Contains(t, err.Error(), "the queue settings "+link+" cannot be read: is not a regular file")
	require.ErrorIs(t, s.PauseQueue(ctx, "p"), jobstore.ErrCorrupt)
	data, err := os.ReadFile(outside)
	require.NoError(t, err)
	require.Equal(t, theirs, string(data), "nothing was written through the link")

	require.NoError(t, os.Remove(link))
	require.NoError(t, s.PauseQueue(ctx, "p"))
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
}
