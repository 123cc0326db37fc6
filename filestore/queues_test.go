package filestore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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
// off the jobs of a queue limited to 3, and one is SIGKILLed while it runs
// jobs: at no instant do more than 3 run, and 3 do (queuetest.QueueLimit).
func TestProcessesQueueLimit(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})
	queuetest.QueueLimit(t, s, func() []*testproc.Proc { return startLimitWorkers(t, dir) })
}

// startLimitWorkers starts four limit-worker children on the store in dir
// (queuetest.LimitWorker) and waits until they are ready.
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

// TestProcessesPartitionLimit: four worker processes of eight slots each
// work off 5 jobs of each of 20 partitions of a queue whose per-partition
// limit is 1, and one is SIGKILLed while it runs jobs: no two jobs of a
// partition ran at once, each partition's jobs started in claim order,
// and partitions ran in parallel (queuetest.PartitionLimit).
func TestProcessesPartitionLimit(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})
	queuetest.PartitionLimit(t, s, func() []*testproc.Proc { return startLimitWorkers(t, dir) })
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
// the jobs of a queue whose rate is 20 a second for five seconds: no
// window of a second holds more than 20 starts, and one holds 20
// (queuetest.QueueRate).
func TestProcessesQueueRate(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	queuetest.QueueRate(t, s, func() []*testproc.Proc { return startLimitWorkers(t, dir) })
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
