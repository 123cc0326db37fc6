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
	newer := `{"queues": {"a": {"paused": true}, "b": {"rate": "10/1s"}}}`
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
	require.JSONEq(t, `{"rate": "10/1s"}`, string(doc["queues"]["b"]), "the unknown setting is kept")
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
	var workers []*testproc.Proc
	for range 4 {
		c := startChild(t, dir, "limit-worker", childNoSync+"=1")
		require.Equal(t, "ready", c.Next(t))
		workers = append(workers, c)
	}
	// Kill the first worker once it has started a job.
	for {
		if strings.HasPrefix(workers[0].Next(t), "start ") {
			break
		}
	}
	killedAt := time.Now()
	require.NoError(t, workers[0].Signal(syscall.SIGKILL))
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		j, err := s.Wait(wctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State)
	}
	type event struct {
		at    time.Time
		delta int
		// killed marks the end of a job of the killed process, at the
		// kill.
		killed bool
	}
	var events []event
	for i, c := range workers {
		if i > 0 {
			require.NoError(t, c.Signal(syscall.SIGTERM))
		}
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
				events = append(events, event{at, 1, false})
				open[f[1]] = at
			} else {
				events = append(events, event{at, -1, false})
				delete(open, f[1])
			}
		}
		// The killed process's jobs ended with it; it was killed after
		// killedAt, and no job of another process could start before.
		for _, started := range open {
			require.Zero(t, i, "a job of a live worker did not end")
			events = append(events, event{maxTime(started, killedAt), -1, true})
		}
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

// TestQueueLimitSlotOutlivesClaimant: the slot of a job of a limited
// queue stays taken while a process of its attempt (here, as execjob's
// supervisor is, a process that holds a copy of the lease) outlives the
// process that claimed it, and is free once that process is gone too.
func TestQueueLimitSlotOutlivesClaimant(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	ctx := t.Context()
	require.NoError(t, s.SetQueueLimit(ctx, "q", 1))
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "work", Queue: "q"})
	require.NoError(t, err)
	next, _, err := s.Submit(ctx, jobstore.Spec{Kind: "work", Queue: "q"})
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
