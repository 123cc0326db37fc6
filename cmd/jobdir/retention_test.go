package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// TestRetentionCommands: retention shows the policy (none at first), set
// changes the states given only, and refuses a duration under a minute or
// no state at all, changing nothing; on a file store and in PostgreSQL.
func TestRetentionCommands(t *testing.T) {
	t.Run("file", func(t *testing.T) { testRetentionCommands(t, newStoreDir(t)) })
	t.Run("postgres", func(t *testing.T) { testRetentionCommands(t, pgStore(t)) })
}

func testRetentionCommands(t *testing.T, dir string) {
	require.Equal(t, "succeeded jobs are kept forever\nfailed    jobs are kept forever\ncanceled  jobs are kept forever\n",
		jdOK(t, dir, "retention").stdout)
	r := jdOK(t, dir, "retention", "set", "--succeeded", "7d", "--failed", "30d")
	require.Contains(t, r.stdout, "succeeded jobs are kept 7d after they finished\n")
	jdOK(t, dir, "retention", "set", "--canceled", "12h")
	var v map[string]*string
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "retention", "--json").stdout), &v))
	require.Equal(t, "168h0m0s", *v["succeeded"], "set changes only the states given")
	require.Equal(t, "720h0m0s", *v["failed"])
	require.Equal(t, "12h0m0s", *v["canceled"])
	for _, bad := range [][]string{{"retention", "set", "--succeeded", "30s"}, {"retention", "set"}, {"retention", "set", "--failed", "-1h"}} {
		r := jd(t, dir, bad...)
		require.Equal(t, exitUsage, r.code, "%v: %s", bad, r)
	}
	jdOK(t, dir, "retention", "set", "--failed", "0")
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "retention", "--json").stdout), &v))
	require.Nil(t, v["failed"], "0 keeps them forever")
	require.Equal(t, "168h0m0s", *v["succeeded"], "a refused set changed nothing")
}

// TestE2EWorkAppliesRetention: a jobdir work process prunes the finished
// jobs the store's retention policy no longer keeps, with their logs, and
// keeps the others.
func TestE2EWorkAppliesRetention(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	st, err := filestore.Open(t.Context(), dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	old := func(state jobstore.State, age time.Duration) jobstore.Job {
		at := time.Now().Add(-age).UTC().Truncate(time.Microsecond)
		j := jobstore.NewJob(jobstore.Spec{Kind: "exec", Payload: json.RawMessage(`{"argv":["true"],"dir":"/"}`)}, at)
		j.State, j.Attempt, j.Worker, j.StartedAt, j.FinishedAt = state, 1, "gone", at, at
		if state == jobstore.StateFailed {
			j.LastError = "exit status 1"
		}
		return j
	}
	stale, fresh, failed := old(jobstore.StateSucceeded, 3*time.Hour), old(jobstore.StateSucceeded, 10*time.Minute), old(jobstore.StateFailed, 3*time.Hour)
	n, err := st.Import(t.Context(), []jobstore.Job{stale, fresh, failed})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, st.Close())
	logs := filepath.Join(dir, logsDirName)
	require.NoError(t, os.MkdirAll(logs, 0o700))
	for _, j := range []jobstore.Job{stale, fresh, failed} {
		require.NoError(t, os.WriteFile(filepath.Join(logs, j.ID+".log"), []byte("output\n"), 0o600))
	}
	jdOK(t, dir, "retention", "set", "--succeeded", "1h")

	w := start(t, jobdirCmd(dir, wd, "work"))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(logs, stale.ID+".log"))
		return os.IsNotExist(err)
	}, liveness, 20*time.Millisecond, "the stale job's log is still there")
	w.stop(t)
	require.Contains(t, w.errb.String(), "pruned 1 finished job, as the store's retention policy says")
	r := jd(t, dir, "get", stale.ID)
	require.NotEqual(t, 0, r.code, "the stale job is still there")
	getJob(t, dir, fresh.ID)
	getJob(t, dir, failed.ID)
	require.FileExists(t, filepath.Join(logs, fresh.ID+".log"))
	require.FileExists(t, filepath.Join(logs, failed.ID+".log"))
}
