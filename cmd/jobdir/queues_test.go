package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestQueueCommands: "submit --queue" puts a job in a queue, "list --queue"
// finds it, "queue pause" keeps every worker from starting it (a draining
// "work --exit-when-idle" leaves it queued and exits), "queue list" and
// "stats" show the pause, and after "queue resume" a worker runs it; a worker that
// takes other queues leaves it alone; bad names are refused; on a file
// store and in PostgreSQL.
func TestQueueCommands(t *testing.T) {
	t.Run("file", func(t *testing.T) { testQueueCommands(t, newStoreDir(t)) })
	t.Run("postgres", func(t *testing.T) { testQueueCommands(t, pgStore(t)) })
}

func testQueueCommands(t *testing.T, dir string) {
	t.Chdir(t.TempDir())
	r := jdOK(t, dir, "queue", "list")
	require.Contains(t, r.stdout, "No queues yet")

	r = jdOK(t, dir, "submit", "--queue", "emails", "--", "true")
	id := strings.TrimSpace(r.stdout)
	require.Equal(t, "jobdir: no worker runs exec jobs of queue emails on this store, or did in the last 15 minutes; the job waits until one starts (\"jobdir work --queue emails\")\n", r.stderr)
	plain := strings.TrimSpace(jdOK(t, dir, "submit", "--", "true").stdout)
	require.Contains(t, jdOK(t, dir, "workers").stdout, "No live worker takes these queues, whose queued jobs wait: default, emails")
	r = jdOK(t, dir, "list", "--queue", "emails")
	require.Contains(t, r.stdout, id)
	require.NotContains(t, r.stdout, plain)
	require.Regexp(t, `(?m)^ID\s+STATE\s+KIND\s+QUEUE\s+PRI`, r.stdout, "a queue column when a job is in a queue other than default")
	require.Regexp(t, `(?m)^`+id+`\s+queued\s+exec\s+emails\s`, r.stdout)

	r = jdOK(t, dir, "queue", "pause", "emails")
	require.Equal(t, "queue emails paused\n", r.stdout)
	r = jdOK(t, dir, "queue", "list")
	require.Regexp(t, `(?m)^QUEUE\s+STATE\s+LIMIT\s+PER PARTITION\s+RATE\s+QUEUED\s+RUNNING\s+OLDEST WAIT$`, r.stdout)
	require.Regexp(t, `(?m)^default\s+running\s+-\s+-\s+-\s+1\s+0\s+\S+`, r.stdout)
	require.Regexp(t, `(?m)^emails\s+paused\s+-\s+-\s+-\s+1\s+0\s+\S+`, r.stdout)
	r = jdOK(t, dir, "stats")
	require.Regexp(t, `(?m)^QUEUE\s+WAITING\s+QUEUED\s+RUNNING`, r.stdout)
	require.Regexp(t, `(?m)^emails\s+0\s+1\s+0`, r.stdout)
	require.Contains(t, r.stdout, "Paused queues, whose jobs no worker starts until \"jobdir queue resume\": emails\n")
	var stats struct {
		Queues       map[string]map[jobstore.State]int `json:"queues"`
		PausedQueues []string                          `json:"paused_queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "stats", "--json").stdout), &stats))
	require.Equal(t, []string{"emails"}, stats.PausedQueues)
	require.Equal(t, 1, stats.Queues["emails"][jobstore.StateQueued])
	var qs []jobstore.QueueInfo
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "queue", "list", "--json").stdout), &qs))
	require.Len(t, qs, 2)
	require.Equal(t, "emails", qs[1].Queue)
	require.True(t, qs[1].Paused)
	require.Equal(t, 1, qs[1].Queued)

	// A draining worker runs the default queue's job, leaves the paused
	// queue's job queued, and exits: it has nothing it may start.
	jdOK(t, dir, "work", "--exit-when-idle", "--quiet")
	requireJobState(t, dir, plain, jobstore.StateSucceeded)
	requireJobState(t, dir, id, jobstore.StateQueued)

	r = jdOK(t, dir, "queue", "resume", "emails")
	require.Equal(t, "queue emails resumed\n", r.stdout)
	jdOK(t, dir, "work", "--exit-when-idle", "--quiet", "--queue", "reports")
	requireJobState(t, dir, id, jobstore.StateQueued) // a worker of other queues leaves it
	jdOK(t, dir, "work", "--exit-when-idle", "--quiet", "--queue", "reports,emails")
	requireJobState(t, dir, id, jobstore.StateSucceeded)

	{ // Limits, on every store.
		r = jdOK(t, dir, "queue", "limit", "emails", "2")
		require.Equal(t, "queue emails runs at most 2 at once\n", r.stdout)
		require.Regexp(t, `(?m)^emails\s+running\s+2\s+`, jdOK(t, dir, "queue", "list").stdout)
		require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "queue", "list", "--json").stdout), &qs))
		require.Equal(t, 2, qs[1].Limit)
		r = jdOK(t, dir, "queue", "limit", "emails", "--per-partition", "1")
		require.Equal(t, "queue emails runs the jobs of each partition one at a time\n", r.stdout)
		require.Regexp(t, `(?m)^emails\s+running\s+2\s+1\s+-\s+`, jdOK(t, dir, "queue", "list").stdout, "the limit is left as it was")
		require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "queue", "list", "--json").stdout), &qs))
		require.Equal(t, 1, qs[1].PerPartition)
		r = jdOK(t, dir, "queue", "limit", "--unlimited", "emails")
		require.Equal(t, "queue emails has no limit\n", r.stdout)
		require.Regexp(t, `(?m)^emails\s+running\s+-\s+1\s+`, jdOK(t, dir, "queue", "list").stdout, "the per-partition limit is left as it was")
		r = jdOK(t, dir, "queue", "limit", "emails", "3", "--per-partition", "0")
		require.Equal(t, "queue emails runs at most 3 at once\nqueue emails has no per-partition limit\n", r.stdout)
		require.Regexp(t, `(?m)^emails\s+running\s+3\s+-\s+`, jdOK(t, dir, "queue", "list").stdout)
		jdOK(t, dir, "queue", "limit", "--unlimited", "emails")

		r = jdOK(t, dir, "queue", "limit", "emails", "--rate", "20/s")
		require.Equal(t, "queue emails starts at most 20 jobs in any window of 1s\n", r.stdout)
		require.Regexp(t, `(?m)^emails\s+running\s+-\s+-\s+20/1s\s+`, jdOK(t, dir, "queue", "list").stdout)
		r = jdOK(t, dir, "queue", "list", "--json")
		require.Contains(t, r.stdout, `"rate": "20/1s"`)
		r = jdOK(t, dir, "queue", "limit", "emails", "--rate", "off")
		require.Equal(t, "queue emails has no rate limit\n", r.stdout)
		require.Regexp(t, `(?m)^emails\s+running\s+-\s+-\s+-\s+`, jdOK(t, dir, "queue", "list").stdout)

		// A job's partition is kept and shown.
		pid := strings.TrimSpace(jdOK(t, dir, "submit", "--queue", "emails", "--partition", "customer 42", "--", "true").stdout)
		r = jdOK(t, dir, "get", pid)
		require.Regexp(t, `(?m)^Queue:\s+emails$`, r.stdout)
		require.Regexp(t, `(?m)^Partition:\s+customer 42$`, r.stdout)
		require.Contains(t, jdOK(t, dir, "get", "--json", pid).stdout, `"partition": "customer 42"`)
	}
	for _, args := range [][]string{
		{"queue", "limit", "emails", "x"},
		{"queue", "limit", "emails", "--", "-1"},
		{"queue", "limit", "emails", "10001"},
		{"queue", "limit", "emails"},
		{"queue", "limit", "--unlimited", "emails", "3"},
		{"queue", "limit", "bad name", "3"},
		{"queue", "limit", "emails", "--per-partition", "-1"},
		{"queue", "limit", "emails", "--per-partition", "x"},
		{"queue", "limit", "emails", "--per-partition", "10001"},
		{"queue", "limit", "emails", "-1", "--per-partition", "1"},
		{"queue", "limit", "emails", "--rate", "fast"},
		{"queue", "limit", "emails", "--rate", "0/1s"},
		{"queue", "limit", "emails", "--rate", "10/0s"},
		{"queue", "limit", "emails", "2", "--rate", "10"},
		{"submit", "--partition", "a\tb", "--", "true"},
		{"queue", "pause", "bad name"},
		{"queue", "resume", ""},
		{"queue", "pause"},
		{"submit", "--queue", "bad name", "--", "true"},
		{"list", "--queue", "a;b"},
		{"work", "--queue", "a b"},
	} {
		r := jd(t, dir, args...)
		require.Equal(t, 2, r.code, "jobdir %s: %s", strings.Join(args, " "), r)
		require.NotContains(t, r.stderr, "filestore:", "a plain message")
	}
	r = jdOK(t, dir, "queue", "list", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &qs))
	require.Len(t, qs, 2, "a refused command made no queue")
}

// requireJobState checks the state of job id through "jobdir get --json".
func requireJobState(t *testing.T, dir, id string, want jobstore.State) {
	t.Helper()
	var j struct {
		State jobstore.State `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "get", "--json", id).stdout), &j))
	require.Equal(t, want, j.State, "job %s", id)
}
