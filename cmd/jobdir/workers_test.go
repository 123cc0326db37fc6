package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
)

// noWorkerNote is what submit says when no live or recent worker runs exec
// jobs.
const noWorkerNote = "jobdir: no worker runs exec jobs on this store, or did in the last 15 minutes; the job waits until one starts (\"jobdir work\")\n"

// TestWorkersListsTheLiveWorkers: "jobdir workers" lists a running "jobdir
// work" with its kinds, concurrency, process and version, and nothing once
// it stopped, but among the ended ones, which "submit" counts as serving
// their kinds: no note, and "submit --require-worker" submits. On a store
// no worker ever served, "workers", "stats" and "submit" name the kind no
// live worker runs, and "submit --require-worker" refuses to submit; on a
// file store and in PostgreSQL.
func TestWorkersListsTheLiveWorkers(t *testing.T) {
	t.Run("file", func(t *testing.T) { testWorkersListsTheLiveWorkers(t, newStoreDir(t), newStoreDir(t)) })
	t.Run("postgres", func(t *testing.T) { testWorkersListsTheLiveWorkers(t, pgStore(t), pgStore(t)) })
}

func testWorkersListsTheLiveWorkers(t *testing.T, dir, never string) {
	t.Chdir(t.TempDir())
	r := jdOK(t, dir, "workers")
	require.Equal(t, "No live workers. Start one with \"jobdir work\".\n", r.stdout)

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan int)
	var werr bytes.Buffer
	go func() {
		done <- run(ctx, append(storeArgs(dir), "work", "--concurrency", "3"), strings.NewReader(""), &bytes.Buffer{}, &werr)
	}()
	var v httpapi.WorkersResponse
	require.Eventually(t, func() bool {
		v = httpapi.WorkersResponse{}
		require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "workers", "--json").stdout), &v))
		return len(v.Workers) == 1
	}, 10*time.Second, 20*time.Millisecond, "the running worker is not listed")
	w := v.Workers[0]
	require.Equal(t, []string{"exec"}, w.Kinds)
	require.Equal(t, 3, w.Concurrency)
	require.Equal(t, version(), w.Version)
	require.NotZero(t, w.PID)
	require.NotNil(t, w.Running)
	require.Empty(t, v.UnservedKinds)

	r = jdOK(t, dir, "workers")
	require.Regexp(t, `(?m)^WORKER\s+HOST\s+PID\s+KINDS\s+QUEUES\s+RUNNING\s+STARTED\s+VERSION$`, r.stdout)
	require.Regexp(t, `(?m)^`+w.ID+`\s+\S+\s+\d+\s+exec\s+any\s+0/3\s+`, r.stdout)
	r = jdOK(t, dir, "submit", "--require-worker", "--", "sleep", "5")
	require.Empty(t, r.stderr, "a note although a worker runs exec jobs")
	id := strings.TrimSpace(r.stdout)
	require.Eventually(t, func() bool {
		v = httpapi.WorkersResponse{}
		require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "workers", "--json").stdout), &v))
		return len(v.Workers) == 1 && len(v.Workers[0].Running) == 1
	}, 10*time.Second, 20*time.Millisecond, "the worker's running job is not listed")
	require.Equal(t, []string{id}, v.Workers[0].Running)
	jdOK(t, dir, "cancel", id)

	stop()
	require.Equal(t, 0, <-done, "jobdir work: %s", werr.String())
	v = httpapi.WorkersResponse{}
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "workers", "--json").stdout), &v))
	require.Empty(t, v.Workers)
	require.Len(t, v.Ended, 1, "the stopped worker is among the ended")
	require.Equal(t, w.ID, v.Ended[0].ID)
	require.WithinDuration(t, time.Now(), v.Ended[0].EndedAt, time.Minute)
	r = jdOK(t, dir, "workers")
	require.Contains(t, r.stdout, "No live workers.")
	require.Contains(t, r.stdout, "\nEnded in the last 15 minutes:\n")
	require.Regexp(t, `(?m)^WORKER\s+HOST\s+PID\s+KINDS\s+QUEUES\s+STARTED\s+ENDED\s+VERSION$`, r.stdout)
	require.Regexp(t, `(?m)^`+w.ID+`\s+\S+\s+\d+\s+exec\s+any\s`, r.stdout)
	r = jdOK(t, dir, "submit", "--require-worker", "--", "true")
	require.Empty(t, r.stderr, "a note, although the worker of exec jobs only restarts")

	// A store no worker ever served.
	dir = never
	r = jdOK(t, dir, "submit", "--", "true")
	require.Equal(t, noWorkerNote, r.stderr)
	r = jdOK(t, dir, "workers")
	require.Contains(t, r.stdout, "\nNo live worker runs these kinds, whose queued jobs wait: exec\n")
	r = jdOK(t, dir, "stats")
	require.Contains(t, r.stdout, "\nNo live worker runs these kinds, whose queued jobs wait: exec\n")
	var st struct {
		UnservedKinds []string `json:"unserved_kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "stats", "--json").stdout), &st))
	require.Equal(t, []string{"exec"}, st.UnservedKinds)

	r = jd(t, dir, "submit", "--require-worker", "--", "true")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "no worker runs exec jobs on this store, or did in the last 15 minutes, so the job was not submitted")
	require.Empty(t, r.stdout)
	r = jdOK(t, dir, "list", "--json")
	require.Len(t, wireJobs(t, r.stdout), 1, "--require-worker submitted the job")
}
