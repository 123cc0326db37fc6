package filestore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	ctx := t.Context()
	var children []*testproc.Proc
	for range 2 {
		c := startChild(t, dir, "claim-starts", childNoSync+"=1")
		require.Equal(t, "ready", c.Next(t))
		children = append(children, c)
	}
	submitFor := func(queue string, d time.Duration) (last jobstore.Job) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: queue})
			require.NoError(t, err)
			last = j
			time.Sleep(time.Millisecond)
		}
		return last
	}
	submitFor("p", 200*time.Millisecond)
	require.NoError(t, s.PauseQueue(ctx, "p"))
	paused := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { submitFor("other", 300*time.Millisecond) })
	submitFor("p", 300*time.Millisecond)
	wg.Wait()
	resuming := time.Now()
	require.NoError(t, s.ResumeQueue(ctx, "p"))
	resumed := time.Now()
	last := submitFor("p", 50*time.Millisecond)
	_, err := s.Wait(ctx, last.ID)
	require.NoError(t, err)
	for range children {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "stop", Queue: "control"})
		require.NoError(t, err)
	}

	var before, during, after int
	first := time.Duration(-1)
	for _, c := range children {
		for _, l := range c.Lines(t) {
			f := strings.Fields(l)
			require.Len(t, f, 4, "line %q", l)
			ns, err := strconv.ParseInt(f[3], 10, 64)
			require.NoError(t, err)
			at := time.Unix(0, ns)
			switch {
			case f[2] == "other" && at.After(paused) && at.Before(resuming):
				during++
			case f[2] != "p":
			case !at.After(paused):
				before++
			default:
				require.False(t, at.Before(resuming), "job %s of the paused queue started %s after the pause returned", f[1], at.Sub(paused))
				after++
				if d := at.Sub(resumed); first < 0 || d < first {
					first = d
				}
			}
		}
	}
	t.Logf("queue p: %d jobs started before the pause, %d after the resume; the other queue: %d started during the pause; the first start %s after the resume returned",
		before, after, during, first)
	require.Positive(t, before)
	require.Positive(t, during, "the other queue ran while p was paused")
	require.Positive(t, after)
	require.Less(t, first, time.Second, "the workers started the queue's jobs again soon after the resume")
}

// TestQueueSettingsFile: a pause is written to QUEUES durably and read
// by a Store opened later; a setting this program does not know (of a
// newer one) keeps its queue's jobs from being claimed and is kept as it
// is by a change of another setting; a damaged file stops claims with an
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
	newer := `{"queues": {"a": {"paused": true}, "b": {"limit": 2}}}`
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
	require.JSONEq(t, `{"limit": 2}`, string(doc["queues"]["b"]), "the unknown setting is kept")
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
