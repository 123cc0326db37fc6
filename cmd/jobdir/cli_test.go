package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

func TestHelpReadsWell(t *testing.T) {
	r := jdOK(t, "")
	for _, name := range []string{"submit", "work", "get", "list", "logs", "cancel", "retry", "wait", "stats", "prune", "fsck", "serve", "completion", "workers", "delete", "queue", "schedule"} {
		require.Contains(t, r.stdout, "\n  "+name+" ", "root help lists %s", name)
	}
	require.Equal(t, r, jdOK(t, "", "help"))

	a := &app{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "completion" || c.Name() == "help" || c.Hidden {
			return
		}
		require.NotEmpty(t, c.Short, c.CommandPath())
		require.NotEmpty(t, c.Long, c.CommandPath())
		require.NotEmpty(t, c.Example, c.CommandPath())
		require.False(t, strings.HasSuffix(c.Short, "."), "%s: a Short is a phrase", c.CommandPath())
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.rootCommand())

	r = jdOK(t, "", "help", "wait")
	require.Contains(t, r.stdout, "3  the job failed")
	require.Contains(t, r.stdout, "Usage:\n  jobdir wait ID | --key KEY [flags]")
}

func TestVersion(t *testing.T) {
	r := jdOK(t, "", "version")
	require.Regexp(t, `^jobdir \S+.* go1\.\d+`, r.stdout)
	require.Equal(t, r.stdout, jdOK(t, "", "--version").stdout)

	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "5858f55a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"},
		{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	require.Equal(t, "devel 5858f55a0b1c (modified) 2026-11-30T10:00:00Z go1.26.0", versionOf(info, ""))
	info.Main.Version = "v1.2.3"
	require.Equal(t, "v1.2.3 go1.26.0", versionOf(info, ""))
	// A version set at link time (make image) wins over what the go
	// command recorded.
	require.Equal(t, "v1.2.4-3-g5858f55 go1.26.0", versionOf(info, "v1.2.4-3-g5858f55"))
}

func TestCompletion(t *testing.T) {
	r := jdOK(t, "", "completion", "bash")
	require.Contains(t, r.stdout, "bash completion")
}

func TestUsageErrors(t *testing.T) {
	dir := newStoreDir(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"list", "--bogus"}, "unknown flag: --bogus"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"` + "\n"},
		{"typo", []string{"sumbit", "true"}, `unknown command "sumbit"; did you mean submit?`},
		{"bad flag value", []string{"list", "--limit", "many"}, `--limit "many": want a whole number`},
		{"submit without program", []string{"submit"}, "submit needs a PROGRAM"},
		{"delay and at", []string{"submit", "--delay", "1m", "--at", "2030-01-01T00:00:00Z", "true"}, "--delay and --at"},
		{"bad at", []string{"submit", "--at", "tomorrow", "true"}, "--at \"tomorrow\""},
		{"bad priority", []string{"submit", "--priority", "5000", "true"}, "priority 5000 out of range"},
		{"bad env", []string{"submit", "--env", "NOEQUALS", "true"}, "is not KEY=VALUE"},
		{"get without id", []string{"get"}, "get needs exactly one job ID"},
		{"cancel with two ids", []string{"cancel", "a", "b"}, "cancel needs exactly one job ID"},
		{"list bad state", []string{"list", "--state", "done"}, `unknown state "done"`},
		{"prune without age", []string{"prune"}, "prune needs --older-than"},
		{"work without slots", []string{"work", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{"serve without token", []string{"serve"}, "serve needs a bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("JOBDIR_TOKEN", "")
			r := jd(t, dir, tt.args...)
			require.Equal(t, exitUsage, r.code, "%s", r)
			require.Contains(t, r.stderr, tt.want)
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			require.Len(t, lines, 2, "the mistake, and where to read more")
			require.Regexp(t, `^Run 'jobdir( [a-z]+)? --help' for usage\.$`, lines[1])
			require.NotContains(t, r.stderr, "strconv")
			require.NotContains(t, r.stderr, "invalid input")
			require.Empty(t, r.stdout)
		})
	}
}

func TestSubmitRecordsTheJob(t *testing.T) {
	dir := newStoreDir(t)
	wd, err := os.Getwd()
	require.NoError(t, err)

	id := submit(t, dir, "--max-attempts", "5", "--priority", "7", "--timeout", "90s", "--env", "A=1",
		"--", "sh", "-c", "echo 'quoted arg'", "--not-a-flag")
	j := getJob(t, dir, id)
	require.Equal(t, execjob.Kind, j.Kind)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, 5, j.MaxAttempts)
	require.Equal(t, 7, j.Priority)
	require.Equal(t, 90*time.Second, j.Timeout)
	p, err := execjob.ParsePayload(j.Payload)
	require.NoError(t, err)
	require.Equal(t, execjob.Payload{Argv: []string{"sh", "-c", "echo 'quoted arg'", "--not-a-flag"}, Dir: wd, Env: []string{"A=1"}}, p)

	// Without --, flags stop at the program: its own flags stay its own.
	id = submit(t, dir, "--priority", "1", "ls", "-l", "--all")
	p, err = execjob.ParsePayload(getJob(t, dir, id).Payload)
	require.NoError(t, err)
	require.Equal(t, []string{"ls", "-l", "--all"}, p.Argv)
}

func TestSubmitJSONAndDelay(t *testing.T) {
	dir := newStoreDir(t)
	before := time.Now()
	r := jdOK(t, dir, "submit", "--json", "--delay", "1h", "--key", "k", "--", "true")
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	for _, field := range []string{"id", "key", "kind", "payload", "state", "attempt", "max_attempts", "priority", "run_at", "created_at", "updated_at"} {
		require.Contains(t, raw, field)
	}
	j := wireJob(t, r.stdout)
	require.Equal(t, "k", j.Key)
	require.WithinDuration(t, before.Add(time.Hour), j.RunAt, time.Minute)

	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	r = jdOK(t, dir, "submit", "--json", "--at", at.Format(time.RFC3339), "--", "true")
	j = wireJob(t, r.stdout)
	require.True(t, at.Equal(j.RunAt), "run_at %s, want %s", j.RunAt, at)
}

func TestSubmitExistingKey(t *testing.T) {
	dir := newStoreDir(t)
	first := jdOK(t, dir, "submit", "--key", "nightly", "--", "true")
	require.Equal(t, noWorkerNote, first.stderr, "no worker runs: only that note")
	second := jdOK(t, dir, "submit", "--key", "nightly", "--", "false")
	require.Equal(t, first.stdout, second.stdout, "the existing job's ID")
	require.Contains(t, second.stderr, "already exists for key \"nightly\"")
	require.Contains(t, second.stderr, strings.TrimSpace(first.stdout))

	r := jdOK(t, dir, "list", "--json")
	jobs := wireJobs(t, r.stdout)
	require.Len(t, jobs, 1)
}

func TestMissingAndInvalidJob(t *testing.T) {
	dir := newStoreDir(t)
	missing := jobstore.NewID(time.Now())
	for _, cmd := range []string{"get", "cancel", "retry", "wait", "logs"} {
		r := jd(t, dir, cmd, missing)
		require.Equal(t, exitError, r.code, "%s: %s", cmd, r)
		require.Contains(t, r.stderr, "no job "+missing+" in the store "+dir, cmd)
		require.NotContains(t, r.stderr, "Usage:", cmd)

		r = jd(t, dir, cmd, "../../etc/passwd")
		require.Equal(t, exitError, r.code, "%s: %s", cmd, r)
		require.Contains(t, r.stderr, `"../../etc/passwd" is not a job ID`, cmd)
	}
}

func TestListTableAndJSON(t *testing.T) {
	dir := newStoreDir(t)
	r := jdOK(t, dir, "list", "--json")
	require.Equal(t, "[]\n", r.stdout, "an empty list is an empty array, not null")

	var ids []string
	for i := range 3 {
		ids = append(ids, submit(t, dir, "--", "echo", "job", string(rune('a'+i))))
	}
	_, err := jdOK(t, dir, "cancel", ids[0]), error(nil)
	require.NoError(t, err)

	r = jdOK(t, dir, "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4)
	require.Regexp(t, `^ID\s+STATE\s+KIND\s+PRI\s+KEY\s+ATTEMPT\s+CREATED\s+COMMAND$`, lines[0])
	require.Contains(t, lines[1], ids[2], "newest first")
	require.Contains(t, lines[1], "echo job c")
	require.Contains(t, lines[3], "canceled")

	jobs := wireJobs(t, jdOK(t, dir, "list", "--json", "--oldest-first").stdout)
	require.Len(t, jobs, 3)
	require.Equal(t, ids[0], jobs[0].ID)

	jobs = wireJobs(t, jdOK(t, dir, "list", "--json", "--state", "queued").stdout)
	require.Len(t, jobs, 2)
	jobs = wireJobs(t, jdOK(t, dir, "list", "--json", "--state", "canceled,succeeded").stdout)
	require.Len(t, jobs, 1)
	jobs = wireJobs(t, jdOK(t, dir, "list", "--json", "--limit", "2").stdout)
	require.Len(t, jobs, 2)
	jobs = wireJobs(t, jdOK(t, dir, "list", "--json", "--limit", "0").stdout)
	require.Len(t, jobs, 3)
	jobs = wireJobs(t, jdOK(t, dir, "list", "--json", "--kind", "other").stdout)
	require.Empty(t, jobs)
}

func TestWorkRunsJobsAndWaitReportsHow(t *testing.T) {
	dir := newStoreDir(t)
	work := t.TempDir()
	t.Chdir(work)
	ok := submit(t, dir, "--", "sh", "-c", `echo "hello from $JOBDIR_JOB_ID attempt $JOBDIR_ATTEMPT in $(pwd)"`)
	bad := submit(t, dir, "--max-attempts", "1", "--", "sh", "-c", "echo something broke >&2; exit 9")

	r := jdOK(t, dir, "work", "--exit-when-idle", "--concurrency", "2")
	require.Contains(t, r.stderr, ok+"  started attempt 1 of 3")
	require.Contains(t, r.stderr, ok+"  succeeded after")
	require.Regexp(t, regexp.QuoteMeta(bad)+`  failed after \S+: exit status 9`, r.stderr)
	require.Contains(t, r.stderr, "worker stopped")

	r = jdOK(t, dir, "wait", ok)
	require.Equal(t, "succeeded\n", r.stdout)
	r = jdOK(t, dir, "logs", ok)
	require.Contains(t, r.stdout, "hello from "+ok+" attempt 1 in "+work+"\n")
	require.Contains(t, r.stdout, "attempt 1 exited with status 0")

	r = jd(t, dir, "wait", bad)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Equal(t, "failed\n", r.stdout)
	require.Contains(t, r.stderr, "exit status 9")
	require.Contains(t, r.stderr, "something broke")

	r = jdOK(t, dir, "get", bad)
	require.Regexp(t, `State:\s+failed`, r.stdout)
	require.Regexp(t, `Command:\s+sh -c 'echo something broke >&2; exit 9'`, r.stdout)
	require.Contains(t, r.stdout, "Last error:\n  exit status 9")
	require.Regexp(t, `Attempts:\n  1  failed +\S+ +after \S+ +exit status 9; output ends with: something broke\n`, r.stdout)
	require.Contains(t, r.stdout, filepath.Join(dir, "logs", bad+".log"))

	r = jdOK(t, dir, "retry", bad)
	require.Equal(t, bad+" queued (attempt 2 of 2 next)\n", r.stdout)
	r = jd(t, dir, "retry", ok)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "job "+ok+" already succeeded: only a failed or canceled job can be retried")
}

func TestWaitCanceledAndTimeout(t *testing.T) {
	dir := newStoreDir(t)
	id := submit(t, dir, "--delay", "1h", "--", "true")

	start := time.Now()
	r := jd(t, dir, "wait", "--timeout", "300ms", id)
	require.Equal(t, exitTimeout, r.code, "%s", r)
	require.Contains(t, r.stderr, "still queued after 300ms")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	r = jdOK(t, dir, "cancel", id)
	require.Equal(t, id+" canceled\n", r.stdout)
	jdOK(t, dir, "cancel", id) // again: nothing to do, not an error

	r = jd(t, dir, "wait", id)
	require.Equal(t, exitCanceled, r.code, "%s", r)
	require.Equal(t, "canceled\n", r.stdout)

	r = jd(t, dir, "wait", "--json", id)
	require.Equal(t, exitCanceled, r.code)
	j := wireJob(t, r.stdout)
	require.Equal(t, jobstore.StateCanceled, j.State)
}

// TestWaitSaysWhyTheJobIsNotTaken: wait on a store that no worker serves
// says so once the due job has stayed queued (point 10 of the second
// first-hour pass), and says when a job waits for its time; a job that a
// worker holds gets no such hint.
func TestWaitSaysWhyTheJobIsNotTaken(t *testing.T) {
	waitHintOverride.Store(int64(200 * time.Millisecond))
	t.Cleanup(func() { waitHintOverride.Store(0) })
	dir := newStoreDir(t)

	due := submit(t, dir, "--", "true")
	r := jd(t, dir, "wait", "--timeout", "1s", due)
	require.Equal(t, exitTimeout, r.code, "%s", r)
	require.Contains(t, r.stderr, "jobdir: job "+due+" has been due for ")
	require.Contains(t, r.stderr, `no worker has taken it yet. Is a worker running on `+dir+` (start one with jobdir work, with the same --dir or --store), does it take kind "exec"`)
	require.Equal(t, 1, strings.Count(r.stderr, "no worker has taken it"), "said once: %s", r.stderr)

	later := submit(t, dir, "--delay", "1h", "--", "true")
	r = jd(t, dir, "wait", "--timeout", "600ms", later)
	require.Equal(t, exitTimeout, r.code, "%s", r)
	require.Contains(t, r.stderr, "jobdir: job "+later+" is scheduled (in 59m")
	require.NotContains(t, r.stderr, "no worker has taken it")

	// A job a worker holds: no hint, however long the wait.
	s, err := filestore.Open(t.Context(), dir, nil)
	require.NoError(t, err)
	defer s.Close()
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "test"})
	require.NoError(t, err)
	require.Equal(t, due, j.ID)
	r = jd(t, dir, "wait", "--timeout", "600ms", due)
	require.Equal(t, exitTimeout, r.code, "%s", r)
	require.Contains(t, r.stderr, "still running after 600ms")
	require.NotContains(t, r.stderr, "no worker has taken it")
}

func TestCancelFinishedJob(t *testing.T) {
	dir := newStoreDir(t)
	id := submit(t, dir, "--", "true")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	r := jd(t, dir, "cancel", id)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "job "+id+" already succeeded: only a waiting, queued or running job can be canceled\n")
}

func TestLogsFollow(t *testing.T) {
	dir := newStoreDir(t)
	id := submit(t, dir, "--", "sh", "-c", "echo one; sleep 0.5; echo two")
	r := jd(t, dir, "logs", id)
	require.Equal(t, 0, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "has no output yet (queued)")

	followed := make(chan result, 1)
	go func() { followed <- jd(t, dir, "logs", "--follow", id) }()
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	select {
	case r = <-followed:
	case <-time.After(30 * time.Second):
		t.Fatal("logs --follow did not return after the job finished")
	}
	require.Equal(t, 0, r.code, "%s", r)
	require.Regexp(t, `(?s)attempt 1 of 3.*\none\ntwo\n.*exited with status 0`, r.stdout)

	r = jdOK(t, dir, "logs", "--raw", id)
	require.Equal(t, "one\ntwo\n", r.stdout, "only the program's bytes")
	r = jdOK(t, dir, "logs", "--raw", "--tail", "1", id)
	require.Equal(t, "two\n", r.stdout)
	r = jdOK(t, dir, "logs", "-n", "1", id)
	require.Regexp(t, `^--- jobdir: attempt 1 exited with status 0 after .* ---\n$`, r.stdout)
	r = jd(t, dir, "logs", "--tail", "-1", id)
	require.Equal(t, exitUsage, r.code)
}

// TestLogsFollowExitsWithTheJobsResult: logs --follow exits as wait does.
func TestLogsFollowExitsWithTheJobsResult(t *testing.T) {
	dir := newStoreDir(t)
	failing := submit(t, dir, "--max-attempts", "1", "--", "sh", "-c", "echo doomed; exit 4")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	r := jd(t, dir, "logs", "--follow", "--raw", failing)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Equal(t, "doomed\n", r.stdout)
	require.Contains(t, r.stderr, "failed after 1 attempt: exit status 4")

	canceled := submit(t, dir, "--delay", "1h", "--", "true")
	jdOK(t, dir, "cancel", canceled)
	r = jd(t, dir, "logs", "--follow", canceled)
	require.Equal(t, exitCanceled, r.code, "%s", r)
}

// TestLogsRefusesPlantedLink: a symbolic link planted at a job's log path
// is refused, not followed, by logs and by the worker.
func TestLogsRefusesPlantedLink(t *testing.T) {
	dir := newStoreDir(t)
	id := submit(t, dir, "--max-attempts", "1", "--", "echo", "output")
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("do not show\n"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o700))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "logs", id+".log")))
	r := jd(t, dir, "logs", id)
	require.Equal(t, exitError, r.code, "%s", r)
	require.NotContains(t, r.stdout, "do not show")
	require.Contains(t, r.stderr, "not a regular file (a symbolic link)")

	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	require.Equal(t, "do not show\n", string(b), "the job's output went through the link")
	r = jd(t, dir, "wait", id)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "refusing to write the job's output")
}

// TestWorkSaysHowJobsAreContained: a worker says at start-up how it
// contains jobs when they get no cgroup of their own (the weaker way, which
// a person must know of), and with -v also when they do; --containment
// chooses it.
func TestWorkSaysHowJobsAreContained(t *testing.T) {
	dir := newStoreDir(t)
	r := jdOK(t, dir, "work", "--exit-when-idle", "--containment", "supervisor")
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d  containment: each job runs under a supervisor \(no cgroup: containment set to supervisor\)`, r.stderr)
	r = jdOK(t, dir, "-v", "work", "--exit-when-idle")
	require.Regexp(t, `  containment: each job runs (in a cgroup v2 of its own under /|under a supervisor \(no cgroup: )`, r.stderr)
	cgroups := strings.Contains(r.stderr, "in a cgroup v2 of its own")
	r = jdOK(t, dir, "work", "--exit-when-idle")
	if cgroups {
		require.NotContains(t, r.stderr, "containment:", "a worker with cgroups says so only with -v")
	} else {
		require.Contains(t, r.stderr, "containment: each job runs under a supervisor")
	}
	r = jd(t, dir, "work", "--exit-when-idle", "--containment", "jail")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown containment "jail": want auto, cgroup or supervisor`)
}

// TestWorkCleanEnv: --clean-env keeps the worker's other variables from
// programs; without it, they get them, but never JOBDIR_TOKEN.
func TestWorkCleanEnv(t *testing.T) {
	dir := newStoreDir(t)
	t.Setenv("WORKER_ONLY", "visible")
	t.Setenv("JOBDIR_TOKEN", "secret")
	script := `echo "worker=[$WORKER_ONLY] token=[$JOBDIR_TOKEN] path=[$PATH] own=[$OWN]"`
	plain := submit(t, dir, "--env", "OWN=1", "--", "sh", "-c", script)
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	clean := submit(t, dir, "--env", "OWN=1", "--", "sh", "-c", script)
	jdOK(t, dir, "work", "--exit-when-idle", "-q", "--clean-env")
	require.Equal(t, "worker=[visible] token=[] path=["+os.Getenv("PATH")+"] own=[1]\n", jdOK(t, dir, "logs", "--raw", plain).stdout)
	require.Equal(t, "worker=[] token=[] path=["+os.Getenv("PATH")+"] own=[1]\n", jdOK(t, dir, "logs", "--raw", clean).stdout)
}

func TestStats(t *testing.T) {
	dir := newStoreDir(t)
	submit(t, dir, "--", "true")
	submit(t, dir, "--delay", "1h", "--", "true")
	r := jdOK(t, dir, "stats")
	require.Regexp(t, `(?m)^store\s+`+regexp.QuoteMeta(dir)+`$`, r.stdout)
	require.Regexp(t, `(?m)^queued\s+2$`, r.stdout)
	require.Regexp(t, `(?m)^running\s+0$`, r.stdout)
	require.Regexp(t, `(?m)^oldest due job\s+waiting \d+s \(due since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)$`, r.stdout)
	require.Regexp(t, `(?m)^waiting\s+0$`, r.stdout, "every state, waiting first")
	require.Regexp(t, `(?m)^KIND\s+WAITING\s+QUEUED\s+RUNNING\s+SUCCEEDED\s+FAILED\s+CANCELED\s+OLDEST DUE\nexec\s+0\s+2\s+0\s+0\s+0\s+0\s+waiting \d+s$`, r.stdout)

	later := newStoreDir(t)
	submit(t, later, "--delay", "1h", "--", "true")
	r = jdOK(t, later, "stats")
	require.Regexp(t, `(?m)^oldest due job\s+none: the queued job waits for its time or a retry$`, r.stdout)
	require.Regexp(t, `(?m)^exec\s+0\s+1\s+0\s+0\s+0\s+0\s+-$`, r.stdout, "no job of the kind is due")
	submit(t, later, "--delay", "2h", "--", "true")
	r = jdOK(t, later, "stats")
	require.Regexp(t, `(?m)^oldest due job\s+none: the 2 queued jobs wait for their time or a retry$`, r.stdout, "the plural")

	var s struct {
		Counts                 map[string]int            `json:"counts"`
		Kinds                  map[string]map[string]int `json:"kinds"`
		OldestQueuedAt         time.Time                 `json:"oldest_queued_at"`
		OldestQueuedAgeSeconds float64                   `json:"oldest_queued_age_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "stats", "--json").stdout), &s))
	require.Equal(t, map[string]int{"waiting": 0, "queued": 2, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0}, s.Counts)
	require.Equal(t, map[string]map[string]int{"exec": {"queued": 2}}, s.Kinds)
	require.False(t, s.OldestQueuedAt.IsZero())
	require.Greater(t, s.OldestQueuedAgeSeconds, 0.0)
}

func TestPruneRemovesJobsAndLogs(t *testing.T) {
	dir := newStoreDir(t)
	done := submit(t, dir, "--key", "once", "--", "echo", "done")
	waiting := submit(t, dir, "--delay", "1h", "--", "true")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	require.FileExists(t, filepath.Join(dir, "logs", done+".log"))

	r := jdOK(t, dir, "prune", "--older-than", "1h")
	require.Equal(t, "pruned 0 jobs and 0 logs\n", r.stdout)
	r = jdOK(t, dir, "prune", "--older-than", "0s")
	require.Equal(t, "pruned 1 job and 1 log\n", r.stdout)
	require.NoFileExists(t, filepath.Join(dir, "logs", done+".log"))
	require.Equal(t, exitError, jd(t, dir, "get", done).code)
	getJob(t, dir, waiting)

	// The key is free again.
	again := submit(t, dir, "--key", "once", "--", "echo", "done")
	require.NotEqual(t, done, again)
}

func TestFsck(t *testing.T) {
	dir := newStoreDir(t)
	submit(t, dir, "--", "true")
	r := jdOK(t, dir, "fsck")
	require.Equal(t, "checked 1 records: 0 problems\n", r.stdout)

	bad := jobstore.NewID(time.Now())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "queued", bad+".json"), []byte(`not a record`), 0o600))
	// What a power cut leaves of a record whose data never reached the disk.
	torn := jobstore.NewID(time.Now())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "done", torn+".json"), []byte(`{"trunc`), 0o600))
	r = jd(t, dir, "fsck")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stdout, "corrupt: "+filepath.Join(dir, "queued", bad+".json"))
	require.Contains(t, r.stdout, "torn-record: "+filepath.Join(dir, "done", torn+".json"))
	require.Contains(t, r.stderr, "run jobdir fsck --repair")

	r = jdOK(t, dir, "list")
	require.Contains(t, r.stderr, "skipped: ")
	require.Contains(t, r.stderr, bad)

	r = jd(t, dir, "fsck", "--repair")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "never removed automatically")
	require.Contains(t, r.stdout, "2 problems, 1 repaired")
	require.FileExists(t, filepath.Join(dir, "queued", bad+".json"))
	require.NoFileExists(t, filepath.Join(dir, "done", torn+".json"))
	require.FileExists(t, filepath.Join(dir, "quarantine", "done", torn+".json"), "set aside, not deleted")
}

func TestStoreThatCannotOpen(t *testing.T) {
	base := t.TempDir()

	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	r := jd(t, file, "list")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "cannot open the store in "+file)

	newer := filepath.Join(base, "newer")
	require.NoError(t, os.MkdirAll(newer, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(newer, "FORMAT"), []byte(`{"store":"jobdir","format":999}`), 0o600))
	r = jd(t, newer, "list")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "written by a newer jobdir")

	foreign := filepath.Join(base, "foreign")
	require.NoError(t, os.MkdirAll(foreign, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(foreign, "FORMAT"), []byte("something else\n"), 0o600))
	r = jd(t, foreign, "list")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "not a jobdir store")
	require.Contains(t, r.stderr, "Choose another directory")

	if os.Geteuid() != 0 { // root ignores permissions
		locked := filepath.Join(base, "locked")
		require.NoError(t, os.MkdirAll(locked, 0o500))
		r = jd(t, filepath.Join(locked, "store"), "submit", "true")
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "permission denied")
		require.Contains(t, r.stderr, "Check that this user may read and write")
	}
}

// TestStoreDiscovery: without --dir or $JOBDIR_DIR, jobdir uses the .jobdir
// of the working directory or the nearest one above it, as git does; only
// submit, work and serve create a store, and never in a directory that
// holds other files.
func TestStoreDiscovery(t *testing.T) {
	work := t.TempDir()
	deep := filepath.Join(work, "sub", "deeper")
	require.NoError(t, os.MkdirAll(deep, 0o700))
	t.Setenv("JOBDIR_DIR", "")
	store := filepath.Join(work, ".jobdir")

	t.Chdir(deep)
	for _, args := range [][]string{{"list"}, {"get", "01JCXZ8ZQ4V6Y2W0M8R5T3N7PB"}, {"stats"}, {"fsck"}, {"prune", "--older-than", "1h"}} {
		r := jd(t, "", args...)
		require.Equal(t, exitError, r.code, "%v: %s", args, r)
		require.Equal(t, "jobdir: no store found: there is no .jobdir in "+deep+" or a directory above it\n"+
			"jobdir submit, work and serve create one in the current directory; or name a store with --dir or $JOBDIR_DIR.\n", r.stderr, "%v", args)
		require.NoDirExists(t, filepath.Join(deep, ".jobdir"), "%v created a store", args)
	}

	t.Chdir(work)
	id := submit(t, "", "--", "true")
	require.DirExists(t, store)

	t.Chdir(deep)
	require.Equal(t, id, getJob(t, "", id).ID, "found in a parent directory")
	r := jdOK(t, "", "-v", "list")
	require.Regexp(t, `^jobdir: store `+regexp.QuoteMeta(store)+`\njobdir: durability: fsync: each new file and each changed directory[^\n]*\n$`, r.stderr,
		"-v says which store and how its changes are made durable")
	require.Contains(t, r.stdout, id)
	require.Regexp(t, `(?m)^store\s+`+regexp.QuoteMeta(store)+`$`, jdOK(t, "", "stats").stdout)
	submit(t, "", "--", "true")
	require.NoDirExists(t, filepath.Join(deep, ".jobdir"), "submit uses the store found above")
	require.NoDirExists(t, filepath.Join(work, "sub", ".jobdir"))

	missing := jobstore.NewID(time.Now())
	r = jd(t, "", "get", missing)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "no job "+missing+" in the store "+store)
}

// TestStoreNamedWrongly: a --dir that does not hold a store is never
// turned into one by a command that reads, and a directory of other files
// is refused by every command.
func TestStoreNamedWrongly(t *testing.T) {
	base := t.TempDir()
	typo := filepath.Join(base, ".jobdri")
	r := jd(t, typo, "list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, "jobdir: no store in "+typo+": the directory does not exist\n"+
		"Check --dir; jobdir submit, work and serve create a store there.\n", r.stderr)
	require.NoDirExists(t, typo)

	t.Setenv("JOBDIR_DIR", typo)
	r = jd(t, "", "get", "01JCXZ8ZQ4V6Y2W0M8R5T3N7PB")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "Check $JOBDIR_DIR;")
	require.NoDirExists(t, typo)
	t.Setenv("JOBDIR_DIR", "")

	empty := filepath.Join(base, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))
	r = jd(t, empty, "stats")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "no store in "+empty+": the directory is empty")
	submit(t, empty, "--", "true") // an empty directory may become a store

	notastore := filepath.Join(base, "notastore")
	require.NoError(t, os.Mkdir(notastore, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(notastore, "README"), []byte("mine\n"), 0o600))
	for _, args := range [][]string{{"list"}, {"submit", "true"}, {"work", "--exit-when-idle"}} {
		r := jd(t, notastore, args...)
		require.Equal(t, exitError, r.code, "%v: %s", args, r)
		require.Contains(t, r.stderr, "jobdir: "+notastore+" is not a jobdir store: it holds other files (README) and no FORMAT file\n", "%v", args)
	}
	ents, err := os.ReadDir(notastore)
	require.NoError(t, err)
	require.Len(t, ents, 1, "the directory was left as it was")

	a := &app{dir: typo}
	_, err = a.storeDir()
	require.ErrorIs(t, err, errNoStore)
	a = &app{dir: notastore, createStore: true}
	_, err = a.storeDir()
	require.ErrorIs(t, err, filestore.ErrNotStore)
}

func TestStoreLocation(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	t.Setenv("JOBDIR_DIR", "")
	id := submit(t, "", "--", "true")
	require.FileExists(t, filepath.Join(work, ".jobdir", "queued", id+".json"))

	env := filepath.Join(t.TempDir(), "from-env")
	t.Setenv("JOBDIR_DIR", env)
	id = submit(t, "", "--", "true")
	require.FileExists(t, filepath.Join(env, "queued", id+".json"))

	flag := filepath.Join(t.TempDir(), "from-flag")
	id = submit(t, flag, "--", "true")
	require.FileExists(t, filepath.Join(flag, "queued", id+".json"))
}

// TestServeTokenChecks: serve starts only with tokens that are hard to
// guess, from a file only this user can read and change, of a bounded
// size; each refusal says what is wrong and how to fix it.
func TestServeTokenChecks(t *testing.T) {
	dir := newStoreDir(t)
	t.Setenv("JOBDIR_TOKEN", "")
	tokenFile := func(content string, mode os.FileMode) string {
		p := filepath.Join(t.TempDir(), "tokens")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	const good = "a-good-token-0123456789"
	big := tokenFile(good+"\n"+strings.Repeat("#", 64<<10), 0o600)
	tests := []struct {
		name string
		file string
		want string
	}{
		{"empty", tokenFile("# no token here\n\n", 0o600), "holds no token"},
		{"missing", filepath.Join(t.TempDir(), "missing"), "token file"},
		{"short token", tokenFile(good+"\nshort\n", 0o600), "line 2: the token is 5 bytes; a token must be at least 16 bytes"},
		{"token with a space", tokenFile("a token with spaces in it\n", 0o600), "the token holds a space"},
		{"readable by the group", tokenFile(good, 0o640), "may be read or written by other users (mode -rw-r-----); make it private: chmod 600"},
		{"readable by all", tokenFile(good, 0o604), "may be read or written by other users"},
		{"a device that never ends", "/dev/zero", "is not a regular file"},
		{"a directory", t.TempDir(), "is not a regular file"},
		{"larger than 64 KiB", big, "more than the 64 KiB a token file may hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jd(t, dir, "serve", "--addr", "127.0.0.1:0", "--token-file", tt.file)
			require.Equal(t, exitError, r.code, "%s", r)
			require.Contains(t, r.stderr, tt.want)
			require.NotContains(t, r.stderr, "listening on")
		})
	}
	t.Run("read-only file", func(t *testing.T) {
		// 0400 is as private as 0600: serve gets past the token check.
		r := jd(t, dir, "serve", "--addr", "unix:", "--token-file", tokenFile(good, 0o400))
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "--addr unix:PATH needs a PATH")
	})
	t.Run("readable by one of this user's groups, with group access", func(t *testing.T) {
		// A Kubernetes Secret volume with an fsGroup: root's, 0440 in the
		// fsGroup, which is one of this process's groups.
		p := tokenFile(good, 0o440)
		r := jd(t, dir, "--group-access", "serve", "--addr", "unix:", "--token-file", p)
		require.Equal(t, exitUsage, r.code, "%s", r)
		require.Contains(t, r.stderr, "--addr unix:PATH needs a PATH")
		require.NoError(t, os.Chmod(p, 0o460))
		r = jd(t, dir, "--group-access", "serve", "--addr", "127.0.0.1:0", "--token-file", p)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "may be read or written by other users", "the group may not write it")
		if groups, _ := os.Getgroups(); os.Geteuid() == 0 && os.Getegid() != 65534 && !slices.Contains(groups, 65534) {
			require.NoError(t, os.Chmod(p, 0o440))
			require.NoError(t, os.Chown(p, 0, 65534))
			r = jd(t, dir, "--group-access", "serve", "--addr", "127.0.0.1:0", "--token-file", p)
			require.Equal(t, exitError, r.code, "%s", r)
			require.Contains(t, r.stderr, "may be read or written by other users", "a group not this user's may not read it")
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a file to another user")
		}
		p := tokenFile(good, 0o600)
		require.NoError(t, os.Chown(p, 65534, 65534))
		r := jd(t, dir, "serve", "--addr", "127.0.0.1:0", "--token-file", p)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "belongs to another user (uid 65534)")
	})
	t.Run("short token in the environment", func(t *testing.T) {
		t.Setenv("JOBDIR_TOKEN", "secret")
		r := jd(t, dir, "serve", "--addr", "127.0.0.1:0")
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "$JOBDIR_TOKEN: the token is 6 bytes")
	})

	t.Setenv("JOBDIR_TOKEN", good)
	r := jd(t, dir, "serve", "--insecure-no-auth")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "cannot be combined")
}

func TestExplainOpen(t *testing.T) {
	tests := []struct {
		err  error
		hint string
	}{
		{fmt.Errorf("statfs: %w", filestore.ErrUnsupportedFilesystem), "pass --allow-unsafe-filesystem if only one jobdir process on one machine will use it.\nEven then a power cut may lose changes"},
		{fmt.Errorf("FORMAT: %w", filestore.ErrFormatTooNew), "written by a newer jobdir"},
		{fmt.Errorf("FORMAT: %w", filestore.ErrNotStore), "Choose another directory"},
		{&fs.PathError{Op: "mkdir", Path: "/x", Err: fs.ErrPermission}, "Check that this user may read and write"},
	}
	for _, tt := range tests {
		err := explainOpen("/srv/jobs", tt.err)
		require.ErrorIs(t, err, tt.err)
		require.True(t, strings.HasPrefix(err.Error(), "cannot open the store in /srv/jobs: "+tt.err.Error()+"\n"), err.Error())
		require.Contains(t, err.Error(), tt.hint)
	}
}

// TestSyncFS: with --syncfs a submit and a worker work as without it,
// side by side on one store.
func TestSyncFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	t.Chdir(t.TempDir())
	a := submit(t, dir, "--syncfs", "--", "true")
	b := submit(t, dir, "--", "true")
	jdOK(t, dir, "--syncfs", "work", "--exit-when-idle")
	for _, id := range []string{a, b} {
		out := jdOK(t, dir, "get", "--json", id).stdout
		require.Contains(t, out, `"state": "succeeded"`, out)
	}
}

func TestGroupAccess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	t.Chdir(t.TempDir())
	id := submit(t, dir, "--group-access", "--", "true")
	jdOK(t, dir, "--group-access", "work", "--exit-when-idle")
	for path, want := range map[string]os.FileMode{
		dir:                                    0o770,
		filepath.Join(dir, "done"):             0o770,
		filepath.Join(dir, "done", id+".json"): 0o660,
		filepath.Join(dir, "logs"):             0o770,
		filepath.Join(dir, "logs", id+".log"):  0o660,
	} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, want, fi.Mode().Perm(), path)
	}
}
