package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestDeleteFinishedJobs: delete removes a finished job with its log and
// frees its key; a queued job is refused in words and stays; with a filter
// it deletes only the finished jobs it selects, after asking; on a file
// store and in PostgreSQL.
func TestDeleteFinishedJobs(t *testing.T) {
	t.Run("file", func(t *testing.T) { testDeleteFinishedJobs(t, newStoreDir(t)) })
	t.Run("postgres", func(t *testing.T) { testDeleteFinishedJobs(t, pgStore(t)) })
}

func testDeleteFinishedJobs(t *testing.T, dir string) {
	file := !strings.Contains(dir, "://")
	t.Chdir(t.TempDir())
	done := submit(t, dir, "--key", "report-7", "--", "sh", "-c", "echo secret output")
	failed := submit(t, dir, "--max-attempts", "1", "--", "false")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	later := submit(t, dir, "--delay", "1h", "--", "true")
	logFile := filepath.Join(dir, logsDirName, done+".log")
	if file {
		require.FileExists(t, logFile)
	}
	require.Contains(t, jdOK(t, dir, "logs", done).stdout, "secret output")

	r := jd(t, dir, "delete", later)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, "jobdir: job "+later+" is queued: only a finished job can be deleted (cancel it first)\n", r.stderr)
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, later).State)

	r = jdOK(t, dir, "delete", "--key", "report-7")
	require.Equal(t, done+" deleted\n", r.stdout)
	if file {
		require.NoFileExists(t, logFile, "the deleted job's log")
	}
	r = jd(t, dir, "logs", done)
	require.Equal(t, exitError, r.code, "the deleted job's log is still served: %s", r)
	r = jd(t, dir, "get", done)
	require.Equal(t, exitError, r.code)
	again := submit(t, dir, "--key", "report-7", "--", "true")
	require.NotEqual(t, done, again, "the deleted job's key is not free")

	r = jd(t, dir, "delete", "--state", "queued")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--state queued: only succeeded, failed or canceled jobs can be deleted")

	r = jdOK(t, dir, "delete", "--state", "failed,succeeded", "--yes")
	require.Equal(t, "deleted 1 job\n", r.stdout, "only the failed one is finished")
	r = jd(t, dir, "get", failed)
	require.Equal(t, exitError, r.code)
	r = jdOK(t, dir, "list", "--json")
	require.Len(t, wireJobs(t, r.stdout), 2, "the queued jobs stay")
	require.False(t, strings.Contains(r.stdout, failed))
	if file {
		_, err := os.Stat(filepath.Join(dir, logsDirName, failed+".log"))
		require.ErrorIs(t, err, os.ErrNotExist)
	}
}
