package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

func TestParseStoreURL(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want location
		err  string
	}{
		{"relative path", "jobs", location{Kind: fileStore, Dir: "jobs"}, ""},
		{"absolute path", "/var/lib/jobs", location{Kind: fileStore, Dir: "/var/lib/jobs"}, ""},
		{"file URL", "file:///var/lib/jobs", location{Kind: fileStore, Dir: "/var/lib/jobs"}, ""},
		{"file URL on localhost", "file://localhost/var/lib/jobs", location{Kind: fileStore, Dir: "/var/lib/jobs"}, ""},
		{"file URL on another host", "file://db/var/lib/jobs", location{}, "three slashes"},
		{"postgres", "postgres://app@db.internal:5433/app?sslmode=disable",
			location{Kind: postgresStore, DSN: "postgres://app@db.internal:5433/app?sslmode=disable"}, ""},
		{"postgresql with schema", "postgresql://app:secret@db/app?schema=jobs&sslmode=require",
			location{Kind: postgresStore, DSN: "postgresql://app:secret@db/app?sslmode=require", Schema: "jobs"}, ""},
		{"schema twice", "postgres://db/app?schema=a&schema=b", location{}, "give the schema once"},
		{"bad postgres URL, password not shown", "postgres://app:se%zzcret@db/app", location{}, "cannot be read"},
		{"unknown scheme", "mysql://db/app", location{}, `unknown kind of store "mysql"`},
		{"unknown scheme, password not shown", "mysql://root:se%zzcret@db/app", location{}, `store "mysql://...": unknown kind`},
		{"empty", "", location{}, "the store is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStoreURL(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.NotContains(t, err.Error(), "se%zzcret", "never prints a password")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestStoreSelection: --store takes a path or a file:// URL, $JOBDIR_STORE
// does the same, --dir and $JOBDIR_DIR keep working, and a flag wins over
// the environment.
func TestStoreSelection(t *testing.T) {
	t.Setenv("JOBDIR_DIR", "")
	t.Setenv(envStore, "")
	base := t.TempDir()

	run := func(args ...string) result {
		t.Helper()
		return jd(t, "", args...)
	}
	submitted := func(dir string, r result) {
		t.Helper()
		require.Equal(t, 0, r.code, "%s", r)
		require.FileExists(t, filepath.Join(dir, "queued", strings.TrimSpace(r.stdout)+".json"))
	}

	byPath := filepath.Join(base, "by-path")
	submitted(byPath, run("--store", byPath, "submit", "true"))
	byURL := filepath.Join(base, "by-url")
	submitted(byURL, run("--store", "file://"+byURL, "submit", "true"))

	fromEnv := filepath.Join(base, "from-env")
	t.Setenv(envStore, "file://"+fromEnv)
	submitted(fromEnv, run("submit", "true"))
	t.Setenv("JOBDIR_DIR", filepath.Join(base, "ignored"))
	submitted(fromEnv, run("submit", "true"))
	submitted(byPath, run("--dir", byPath, "submit", "true"))
	submitted(byURL, run("--store", byURL, "submit", "true"))
	require.NoDirExists(t, filepath.Join(base, "ignored"), "$JOBDIR_STORE wins over $JOBDIR_DIR")

	r := run("--store", byPath, "--dir", byURL, "list")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "--store and --dir both name the store")

	r = run("--store", "redis://localhost", "list")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, `unknown kind of store "redis"`)

	t.Setenv(envStore, "sqlite://x")
	r = run("list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "$JOBDIR_STORE: store \"sqlite://x\": unknown kind of store")
}

// pgStore returns a postgres:// store URL in a schema of the test's own,
// dropped when the test ends; it skips the test (fails it under CI=true)
// without a PostgreSQL server.
func pgStore(t *testing.T) string {
	t.Helper()
	return pgtest.StoreURL(t, pgtest.Schema(t))
}

// TestPostgresStoreThroughTheCommand: every command works on a store in
// PostgreSQL selected by --store, and the same store is reached through
// $JOBDIR_STORE.
func TestPostgresStoreThroughTheCommand(t *testing.T) {
	store := pgStore(t)
	work := t.TempDir()
	t.Chdir(work)

	ok := submit(t, store, "--", "sh", "-c", `echo "hello from $JOBDIR_JOB_ID"`)
	bad := submit(t, store, "--max-attempts", "1", "--", "sh", "-c", "echo something broke >&2; exit 9")
	later := submit(t, store, "--delay", "1h", "--key", "nightly", "--", "true")
	r := jdOK(t, store, "submit", "--key", "nightly", "--", "false")
	require.Equal(t, later+"\n", r.stdout, "one job per key")

	jobs := wireJobs(t, jdOK(t, store, "list", "--json").stdout)
	require.Len(t, jobs, 3)
	require.Contains(t, jdOK(t, store, "list").stdout, later)

	r = jdOK(t, store, "work", "--exit-when-idle", "--concurrency", "2")
	require.Contains(t, r.stderr, "from postgres://")
	require.Contains(t, r.stderr, ok+"  succeeded after")
	require.Regexp(t, bad+`  failed after \S+: exit status 9`, r.stderr)

	require.Equal(t, "succeeded\n", jdOK(t, store, "wait", ok).stdout)
	require.Contains(t, jdOK(t, store, "logs", ok).stdout, "hello from "+ok+"\n")
	require.Equal(t, "hello from "+ok+"\n", jdOK(t, store, "logs", "--raw", ok).stdout)
	require.Contains(t, jdOK(t, store, "get", ok).stdout, "in the database (jobdir logs "+ok+")")
	r = jd(t, store, "wait", bad)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.stderr, "something broke")
	require.Regexp(t, `State:\s+failed`, jdOK(t, store, "get", bad).stdout)
	require.Equal(t, bad+" queued (attempt 2 of 2 next)\n", jdOK(t, store, "retry", bad).stdout)
	require.Equal(t, later+" canceled\n", jdOK(t, store, "cancel", later).stdout)
	r = jd(t, store, "cancel", ok)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "already succeeded: only a waiting, queued or running job can be canceled")

	var s struct {
		Counts map[string]int `json:"counts"`
	}
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, store, "stats", "--json").stdout), &s))
	require.Equal(t, map[string]int{"waiting": 0, "queued": 1, "running": 0, "succeeded": 1, "failed": 0, "canceled": 1}, s.Counts)

	// The environment selects the same store.
	t.Setenv(envStore, store)
	require.Equal(t, jobstore.StateCanceled, getJob(t, "", later).State)

	r = jd(t, "", "fsck")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "is a PostgreSQL store")
	require.NotContains(t, r.stderr, "Usage:")

	require.Equal(t, "pruned 2 jobs\n", jdOK(t, "", "prune", "--older-than", "0s").stdout)
	require.Equal(t, exitError, jd(t, "", "get", ok).code)
	_, err := os.Stat(filepath.Join(work, ".jobdir"))
	require.True(t, os.IsNotExist(err), "no file store was made")
}

// TestPostgresStoreThatCannotOpen: a server that does not answer, and a
// bad schema name, are explained without the password.
func TestPostgresStoreThatCannotOpen(t *testing.T) {
	r := jd(t, "postgres://app:hunter2@127.0.0.1:1/app?connect_timeout=5", "list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "cannot connect to PostgreSQL for the store at postgres://app:xxxxx@127.0.0.1:1/app?connect_timeout=5 (schema jobdir): ")
	require.Contains(t, r.stderr, "connection refused")
	require.Contains(t, r.stderr, "Check that the server runs")
	require.NotContains(t, r.stderr, "pgstore:", "plain words, not the chain of calls")
	require.NotContains(t, r.stderr, "hunter2")

	r = jd(t, "postgres://app:hunter2@127.0.0.1:1/app?schema=Bad-Name", "list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "schema name")
	require.NotContains(t, r.stderr, "hunter2")
}

func TestE2EPostgresWorkersDrainEachJobOnce(t *testing.T) { e2eWorkersDrainEachJobOnce(t, pgStore(t)) }

func TestE2EPostgresWaitReturnsWhenAnotherProcessFinishes(t *testing.T) {
	e2eWaitReturnsWhenAnotherProcessFinishes(t, pgStore(t))
}

func TestE2EPostgresCancelStopsARunningProgram(t *testing.T) {
	e2eCancelStopsARunningProgram(t, pgStore(t))
}

func TestE2EPostgresKilledWorkersJobRunsElsewhere(t *testing.T) {
	e2eKilledWorkersJobRunsElsewhere(t, pgStore(t))
}

func TestE2EPostgresTwoServersOneStore(t *testing.T) { e2eTwoServersOneStore(t, pgStore(t)) }

// TestE2EPostgresLogsOnAnyNode: with a store in PostgreSQL, a job's output
// is in the database while it runs, so "jobdir logs --follow" and the
// HTTP log route of a server that runs no jobs, in other processes than
// the worker (as on other machines), print it as it comes and end with
// the job.
func TestE2EPostgresLogsOnAnyNode(t *testing.T) {
	store, wd := pgStore(t), t.TempDir()
	const token = "e2e-token-0123456789"
	id := submitBin(t, store, wd, "--", "sh", "-c", `echo one; while [ ! -e go ]; do sleep 0.05; done; echo two`)
	follower := start(t, jobdirCmd(store, wd, "logs", "--follow", "--raw", id))
	srv := startServer(t, store, wd, token)
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.url+"/v1/jobs/"+id+"/log?follow=1&raw=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	worker := start(t, jobdirCmd(store, wd, "work", "-q"))

	// "one" arrives while the job still waits for "go".
	body := bufio.NewReader(resp.Body)
	line, err := body.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "one\n", line)
	deadline := time.Now().Add(liveness)
	for follower.out.String() != "one\n" {
		require.True(t, time.Now().Before(deadline) && !follower.exited(), "logs --follow printed %q", follower.out.String())
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, os.WriteFile(filepath.Join(wd, "go"), nil, 0o600))

	require.Equal(t, 0, follower.wait(t), "stderr:\n%s", follower.errb.String())
	require.Equal(t, "one\ntwo\n", follower.out.String())
	rest, err := io.ReadAll(body)
	require.NoError(t, err)
	require.Equal(t, "two\n", string(rest))
	require.Equal(t, "succeeded", resp.Trailer.Get("Jobdir-State"))
	worker.stop(t)
	srv.stop(t)
}

// TestPostgresLogsAreBounded: output kept in the database is bounded as a
// log file is: each attempt keeps its beginning and its end, with a note of
// what was dropped, and the log stays near --max-log-bytes.
func TestPostgresLogsAreBounded(t *testing.T) {
	store := pgStore(t)
	t.Chdir(t.TempDir())
	id := submit(t, store, "--max-attempts", "1", "--", "sh", "-c",
		`echo "first line $JOBDIR_ATTEMPT"; head -c 1048576 /dev/zero | tr '\0' x; echo; echo "the error at the end $JOBDIR_ATTEMPT"; exit 1`)
	for range 2 {
		r := jd(t, store, "work", "--exit-when-idle", "-q", "--max-log-bytes", "8192")
		require.Equal(t, 0, r.code, "%s", r)
		jdOK(t, store, "retry", id)
	}
	log := jdOK(t, store, "logs", id).stdout
	has := func(s string) bool { return strings.Contains(log, s) }
	// The bound, and the end (2 KiB) that a later attempt on a full log
	// keeps, with the notes.
	require.LessOrEqual(t, len(log), 8192+2048+2048, "the log is bounded")
	require.True(t, has("first line 1\n"), "the beginning is kept")
	require.True(t, has("the error at the end 1\n--- jobdir: attempt 1 exited with status 1"), "the end is kept")
	require.True(t, has("the error at the end 2\n--- jobdir: attempt 2 exited with status 1"), "a later attempt on a full log keeps its end")
	require.Equal(t, 2, strings.Count(log, "log limit of 8192 bytes reached"))
}
