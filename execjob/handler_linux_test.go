//go:build linux

package execjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

func TestMain(m *testing.M) {
	testproc.Main(childFuncs())
	goleak.VerifyTestMain(m)
}

// execJob returns a running exec job for argv in dir, as a runner would
// hand it to the handler.
func execJob(t testing.TB, dir string, attempt int, argv ...string) jobstore.Job {
	t.Helper()
	spec, err := execjob.NewSpec(execjob.Payload{Argv: argv, Dir: dir})
	require.NoError(t, err)
	j := jobstore.NewJob(spec, time.Now())
	j.State = jobstore.StateRunning
	j.Attempt = attempt
	j.Worker = "test-worker"
	return j
}

func readLog(t *testing.T, logDir, id string) string {
	t.Helper()
	path, err := execjob.LogPath(logDir, id)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestWorkSuccess(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "logs")
	work := t.TempDir()
	h := execjob.Handler{LogDir: logDir}
	j := execJob(t, work, 1, "sh", "-c", `echo "id=$JOBDIR_JOB_ID attempt=$JOBDIR_ATTEMPT pwd=$(pwd)"; echo oops >&2`)

	res, err := h.Work(t.Context(), j)
	require.NoError(t, err)
	require.JSONEq(t, `{"exit_code":0}`, string(res))

	log := readLog(t, logDir, j.ID)
	require.Contains(t, log, fmt.Sprintf("id=%s attempt=1 pwd=%s\n", j.ID, work))
	require.Contains(t, log, "oops\n")
	require.Contains(t, log, "--- jobdir: job "+j.ID+" attempt 1 of 3")
	require.Contains(t, log, "--- jobdir: attempt 1 exited with status 0")
	fi, err := os.Stat(filepath.Join(logDir, j.ID+".log"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestWorkEnvFromPayload(t *testing.T) {
	logDir := t.TempDir()
	spec, err := execjob.NewSpec(execjob.Payload{
		Argv: []string{"sh", "-c", `echo "X=$X JOBDIR_JOB_ID=$JOBDIR_JOB_ID"`},
		Dir:  "/",
		// A payload cannot forge the job's own variables.
		Env: []string{"X=from payload", "JOBDIR_JOB_ID=forged"},
	})
	require.NoError(t, err)
	j := jobstore.NewJob(spec, time.Now())
	j.Attempt = 1
	_, err = execjob.Handler{LogDir: logDir}.Work(t.Context(), j)
	require.NoError(t, err)
	require.Contains(t, readLog(t, logDir, j.ID), "X=from payload JOBDIR_JOB_ID="+j.ID+"\n")
}

func TestWorkFailureCarriesExitCodeAndTail(t *testing.T) {
	logDir := t.TempDir()
	h := execjob.Handler{LogDir: logDir}
	j := execJob(t, "/", 2, "sh", "-c", `seq 1 5000; echo "the last words"; exit 3`)

	res, err := h.Work(t.Context(), j)
	require.Nil(t, res)
	var ee *execjob.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.Code)
	require.Empty(t, ee.Signal)
	require.LessOrEqual(t, len(ee.Tail), execjob.TailBytes)
	require.True(t, strings.HasSuffix(ee.Tail, "5000\nthe last words\n"), "tail %q", ee.Tail)
	require.Contains(t, err.Error(), "exit status 3")
	require.False(t, runner.IsPermanent(err))
	require.Contains(t, readLog(t, logDir, j.ID), "attempt 2 exited with status 3")
}

func TestWorkAppendsEachAttempt(t *testing.T) {
	logDir := t.TempDir()
	h := execjob.Handler{LogDir: logDir}
	j := execJob(t, "/", 1, "sh", "-c", `echo "run $JOBDIR_ATTEMPT"; exit 1`)
	_, err := h.Work(t.Context(), j)
	require.Error(t, err)
	j.Attempt = 2
	_, err = h.Work(t.Context(), j)
	require.Error(t, err)

	log := readLog(t, logDir, j.ID)
	require.Less(t, strings.Index(log, "run 1\n"), strings.Index(log, "run 2\n"))
	require.Equal(t, 2, strings.Count(log, "--- jobdir: job "+j.ID))
}

// TestWorkLogKeepsHeadAndTail checks the log's bound: an attempt whose
// output does not fit keeps its beginning and its end, where errors are,
// with a marker of exactly how much was dropped between them; a later
// attempt on a full log still keeps its end; and the log's growth stays
// bounded.
func TestWorkLogKeepsHeadAndTail(t *testing.T) {
	logDir := t.TempDir()
	const limit = 8192
	h := execjob.Handler{LogDir: logDir, MaxLogBytes: limit}
	// 1 MiB of output between a first and a last line: the program must
	// not block on a full pipe either.
	j := execJob(t, "/", 1, "sh", "-c", `echo first line; head -c 1048576 /dev/zero | tr '\0' x; echo; echo "the error at the end"; exit 1`)
	_, err := h.Work(t.Context(), j)
	var ee *execjob.ExitError
	require.ErrorAs(t, err, &ee)
	require.Contains(t, ee.Tail, "the error at the end")

	log := readLog(t, logDir, j.ID)
	require.LessOrEqual(t, len(log), limit+1024, "the log is bounded")
	lines := strings.Split(log, "\n")
	require.Contains(t, lines[0], "--- jobdir: job "+j.ID+" attempt 1")
	require.Equal(t, "first line", lines[1], "the beginning is kept")
	require.Contains(t, log, "the error at the end\n--- jobdir: attempt 1 exited with status 1", "the end is kept")
	var dropped, kept int
	require.Equal(t, 1, strings.Count(log, "log limit of 8192 bytes reached"))
	for _, l := range lines {
		if strings.Contains(l, "log limit") {
			_, err := fmt.Sscanf(l[strings.Index(l, "reached: "):], "reached: %d bytes of output dropped here; the last %d follow", &dropped, &kept)
			require.NoError(t, err, l)
			require.True(t, strings.HasSuffix(l, "(no newline at the end of the output above) ---"), "the marker cuts a line: %q", l)
		}
	}
	total := len("first line\n") + 1048576 + len("\nthe error at the end\n")
	written := 0
	for _, l := range lines {
		if !joblog.IsNote([]byte(l)) {
			written += strings.Count(l, "x")
		}
	}
	require.Equal(t, total, written+dropped+len("first line\n")+len("\nthe error at the end\n"), "the marker counts exactly what is missing")
	require.Positive(t, kept)

	// A later attempt on a full log keeps its end.
	j.Attempt = 2
	before := len(log)
	_, err = h.Work(t.Context(), j)
	require.ErrorAs(t, err, &ee)
	log = readLog(t, logDir, j.ID)
	require.Contains(t, log, "the error at the end\n--- jobdir: attempt 2 exited with status 1")
	require.Less(t, len(log)-before, execjob.TailBytes+1024, "past the bound, an attempt adds only its end and notes")

	// The raw log is the program's bytes without jobdir's lines: the
	// beginning, then the end, of each attempt.
	var raw strings.Builder
	rw := &joblog.RawWriter{W: &raw}
	_, _ = rw.Write([]byte(log))
	require.NoError(t, rw.Flush())
	require.NotContains(t, raw.String(), "--- jobdir")
	require.True(t, strings.HasPrefix(raw.String(), "first line\nxxx"))
	require.True(t, strings.HasSuffix(raw.String(), "x\nthe error at the end\n"))
}

// TestWorkLogOnlyRegularFile plants a symbolic link, a FIFO and a hard
// link at a job's log path: the attempt refuses each, permanently and at
// once, and the file planted there, or its target, is untouched.
func TestWorkLogOnlyRegularFile(t *testing.T) {
	for _, kind := range []string{"symlink", "fifo", "hardlink"} {
		t.Run(kind, func(t *testing.T) {
			logDir := t.TempDir()
			victim := filepath.Join(t.TempDir(), "victim")
			require.NoError(t, os.WriteFile(victim, []byte("precious\n"), 0o600))
			marker := filepath.Join(t.TempDir(), "ran")
			j := execJob(t, "/", 1, "sh", "-c", "touch "+marker+"; echo output")
			path, err := execjob.LogPath(logDir, j.ID)
			require.NoError(t, err)
			switch kind {
			case "symlink":
				require.NoError(t, os.Symlink(victim, path))
			case "fifo":
				require.NoError(t, syscall.Mkfifo(path, 0o600))
			case "hardlink":
				require.NoError(t, os.Link(victim, path))
			}
			done := make(chan error, 1)
			go func() {
				_, err := execjob.Handler{LogDir: logDir}.Work(t.Context(), j)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the handler blocked on the planted file")
			}
			require.ErrorIs(t, err, joblog.ErrNotRegular)
			require.True(t, runner.IsPermanent(err))
			require.NoFileExists(t, marker, "the program ran without a log")
			b, err := os.ReadFile(victim)
			require.NoError(t, err)
			require.Equal(t, "precious\n", string(b))
		})
	}
}

func TestWorkWithoutLogDirDiscardsButKeepsTail(t *testing.T) {
	j := execJob(t, "/", 1, "sh", "-c", `echo visible; exit 7`)
	_, err := execjob.Handler{}.Work(t.Context(), j)
	var ee *execjob.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 7, ee.Code)
	require.Equal(t, "visible\n", ee.Tail)
}

func TestWorkRelativeProgramRunsFromDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.sh"), []byte("#!/bin/sh\necho \"script in $(pwd)\"\nexit 5\n"), 0o700))
	j := execJob(t, dir, 1, "./script.sh")
	_, err := execjob.Handler{}.Work(t.Context(), j)
	var ee *execjob.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 5, ee.Code)
	require.Equal(t, "script in "+dir+"\n", ee.Tail)
}

func TestWorkNotStartedAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errTestCancel)
	marker := filepath.Join(t.TempDir(), "ran")
	_, err := execjob.Handler{}.Work(ctx, execJob(t, "/", 1, "touch", marker))
	require.ErrorIs(t, err, errTestCancel)
	require.NoFileExists(t, marker)
}

// TestWorkStartErrors checks that a program that cannot start fails its
// job at once, with a message in plain words, testable with errors.Is.
func TestWorkStartErrors(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notexec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "garbage"), []byte("not a program\x00\x01"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "badinterp"), []byte("#!/no/such/interpreter\n"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
	tests := []struct {
		dir  string
		argv []string
		want string
		is   error
	}{
		{"/no/such/dir/for/jobdir", []string{"ls"}, `cannot start "ls": directory /no/such/dir/for/jobdir does not exist`, fs.ErrNotExist},
		{filepath.Join(dir, "file"), []string{"ls"}, `cannot start "ls": ` + filepath.Join(dir, "file") + ` is not a directory`, fs.ErrNotExist},
		{dir, []string{"no-such-program-jobdir-test"}, `cannot start "no-such-program-jobdir-test": program "no-such-program-jobdir-test" not found in PATH (`, exec.ErrNotFound},
		{dir, []string{"./missing.sh"}, `cannot start "./missing.sh": program ./missing.sh does not exist`, exec.ErrNotFound},
		{dir, []string{"/"}, `cannot start "/": / is a directory, not a program`, exec.ErrNotFound},
		{dir, []string{"./notexec.sh"}, `cannot start "./notexec.sh": program ./notexec.sh is not executable`, fs.ErrPermission},
		{dir, []string{"./garbage"}, `cannot start "./garbage": program ./garbage cannot be run: it is not a binary this system runs, nor a script with a #! line`, errors.ErrUnsupported},
		{dir, []string{"./badinterp"}, `cannot start "./badinterp": program ./badinterp cannot be run: the interpreter on its #! line, or a library it needs, does not exist`, errors.ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.argv[0], func(t *testing.T) {
			logDir := t.TempDir()
			j := execJob(t, tc.dir, 1, tc.argv...)
			_, err := execjob.Handler{LogDir: logDir}.Work(t.Context(), j)
			require.True(t, runner.IsPermanent(err), "%v", err)
			require.ErrorIs(t, err, tc.is)
			var se *execjob.StartError
			require.ErrorAs(t, err, &se)
			require.True(t, strings.HasPrefix(err.Error(), tc.want), "message %q, want %q", err.Error(), tc.want)
			require.NotContains(t, err.Error(), "fork/exec")
			require.Contains(t, readLog(t, logDir, j.ID), "attempt 1 did not start: "+se.Reason)
		})
	}

	h := execjob.Handler{LogDir: t.TempDir()}
	j := execJob(t, "/", 1, "true")
	j.Payload = json.RawMessage(`{"argv":[],"dir":"/"}`)
	_, err := h.Work(t.Context(), j)
	require.True(t, runner.IsPermanent(err), "%v", err)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)

	j.Kind = "other"
	_, err = h.Work(t.Context(), j)
	require.True(t, runner.IsPermanent(err), "%v", err)
}

var errTestCancel = errors.New("test cancel")

// containments are the ways a Handler may contain attempts, each tested.
var containments = []execjob.Containment{execjob.ContainAuto, execjob.ContainSupervisor}

// TestStopKillsTree stops running programs of every shape, by cancel and by
// timeout: SIGTERM reaches every process of the attempt, those that
// escaped its process group too, SIGKILL follows after the grace for those
// that ignore it, and Work returns only once all are gone.
func TestStopKillsTree(t *testing.T) {
	for _, contain := range containments {
		for _, tc := range []struct {
			name, shape string
			grace       time.Duration
			timeout     bool
		}{
			{"cancel escapers", "double-fork", time.Minute, false},
			{"timeout three levels", "three-levels", time.Minute, true},
			{"cancel all after grace", "all", 300 * time.Millisecond, false},
		} {
			t.Run(fmt.Sprintf("%s/%s", contain, tc.name), func(t *testing.T) {
				t.Parallel()
				p, dir := treePayload(t, tc.shape, "sleep", "")
				spec, err := execjob.NewSpec(p)
				require.NoError(t, err)
				j := jobstore.NewJob(spec, time.Now())
				j.Attempt = 1
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				cause := errTestCancel
				if tc.timeout {
					cause = runner.ErrTimeout
				}
				canceled := make(chan time.Time, 1)
				go func() {
					waitFor(t, filepath.Join(dir, "ready-1"), time.Minute)
					canceled <- time.Now()
					cancel(cause)
				}()
				logDir := t.TempDir()
				h := execjob.Handler{LogDir: logDir, KillGrace: tc.grace, Contain: contain}
				_, err = h.Work(ctx, j)
				stopped := time.Now()
				require.ErrorIs(t, err, cause)
				requireTreeGone(t, dir, 1)
				log := readLog(t, logDir, j.ID)
				require.Contains(t, log, "ended: program stopped")
				require.Contains(t, err.Error(), "killed by signal SIGTERM", "the program got SIGTERM")
				if tc.grace < time.Minute {
					// A process ignores SIGTERM: only the SIGKILL after
					// the grace ends the attempt.
					require.GreaterOrEqual(t, stopped.Sub(<-canceled), tc.grace)
				}
			})
		}
	}
}

// TestExitKillsLeftovers: when a program exits, every process it left
// running is killed before Work returns, whatever its shape, and the log
// says how many there were.
func TestExitKillsLeftovers(t *testing.T) {
	for _, contain := range containments {
		t.Run(string(contain), func(t *testing.T) {
			t.Parallel()
			p, dir := treePayload(t, "all", "exit", "")
			spec, err := execjob.NewSpec(p)
			require.NoError(t, err)
			j := jobstore.NewJob(spec, time.Now())
			j.Attempt = 1
			logDir := t.TempDir()
			res, err := execjob.Handler{LogDir: logDir, Contain: contain}.Work(t.Context(), j)
			require.NoError(t, err)
			require.JSONEq(t, `{"exit_code":0}`, string(res))
			requireTreeGone(t, dir, 1)
			// All but the program, which exited by itself, and the double
			// fork's middle process, which exits by itself too, but may
			// not have done so yet when the program does.
			log := readLog(t, logDir, j.ID)
			if !strings.Contains(log, fmt.Sprintf("killed %d processes it left running", expected["all"]-2)) {
				require.Contains(t, log, fmt.Sprintf("killed %d processes it left running", expected["all"]-1))
			}
		})
	}
}

func waitFile(t *testing.T, path string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s did not appear", path)
}

// TestWorkEnvHygiene checks which of the worker's variables a program
// gets: never its secrets or the supervisor's variables, and with CleanEnv
// only CleanEnvVars; the payload's env and the job's own variables always.
func TestWorkEnvHygiene(t *testing.T) {
	t.Setenv("JOBDIR_TOKEN", "secret-token")
	t.Setenv("JOBDIR_TOKEN_FILE", "/run/secrets/jobdir")
	t.Setenv("JOBDIR_EXECJOB_SUPERVISE", "1")
	t.Setenv("NOTIFY_SOCKET", "/run/systemd/notify")
	t.Setenv("JOBDIR_DIR", "/srv/jobs")
	t.Setenv("JOBDIR_STORE", "postgres://jobdir:db-password@db/app")
	t.Setenv("WORKER_SETTING", "kept")
	t.Setenv("LANG", "C.UTF-8")
	env := func(clean bool) map[string]string {
		spec, err := execjob.NewSpec(execjob.Payload{Argv: []string{"env"}, Dir: "/",
			Env: []string{"FROM_PAYLOAD=yes", "JOBDIR_EXECJOB_SUPERVISE=1", "LANG=fr_FR.UTF-8"}})
		require.NoError(t, err)
		j := jobstore.NewJob(spec, time.Now())
		j.Attempt = 2
		logDir := t.TempDir()
		_, err = execjob.Handler{LogDir: logDir, CleanEnv: clean}.Work(t.Context(), j)
		require.NoError(t, err)
		vars := map[string]string{}
		for line := range strings.Lines(readLog(t, logDir, j.ID)) {
			if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok && !joblog.IsNote([]byte(line)) {
				vars[k] = v
			}
		}
		require.Equal(t, j.ID, vars[execjob.EnvJobID])
		require.Equal(t, "2", vars[execjob.EnvAttempt])
		require.Equal(t, "yes", vars["FROM_PAYLOAD"])
		require.Equal(t, "fr_FR.UTF-8", vars["LANG"], "the payload overrides the worker")
		for _, k := range []string{"JOBDIR_TOKEN", "JOBDIR_TOKEN_FILE", "JOBDIR_EXECJOB_SUPERVISE", "NOTIFY_SOCKET", "JOBDIR_STORE"} {
			require.NotContains(t, vars, k)
		}
		return vars
	}

	vars := env(false)
	require.Equal(t, "kept", vars["WORKER_SETTING"])
	require.Equal(t, "/srv/jobs", vars["JOBDIR_DIR"], "a job may submit jobs to its store")
	require.Equal(t, os.Getenv("PATH"), vars["PATH"])

	vars = env(true)
	for k := range vars {
		switch k {
		case "PATH", "HOME", "LANG", "TZ", "USER", "FROM_PAYLOAD", execjob.EnvJobID, execjob.EnvAttempt:
		default:
			t.Errorf("CleanEnv passed %s", k)
		}
	}
	require.Equal(t, os.Getenv("PATH"), vars["PATH"])
}

// TestContainment checks what a Handler says about containment, and that
// each attempt's cgroup is removed when the attempt ends.
func TestContainment(t *testing.T) {
	info, err := execjob.Handler{Contain: execjob.ContainSupervisor}.Containment()
	require.NoError(t, err)
	require.Empty(t, info.Cgroup)
	require.Contains(t, info.String(), "under a supervisor (no cgroup: containment set to supervisor)")

	auto, err := execjob.Handler{}.Containment()
	require.NoError(t, err)
	_, cgErr := execjob.Handler{Contain: execjob.ContainCgroup}.Containment()
	if auto.Cgroup == "" {
		require.Error(t, cgErr, "cgroup required where none can be made")
		require.Contains(t, cgErr.Error(), auto.Reason)
		t.Skipf("no writable cgroup v2 here (%s): the cgroup part is not tested", auto.Reason)
	}
	require.NoError(t, cgErr)
	require.Contains(t, auto.String(), "in a cgroup v2 of its own under "+auto.Cgroup)

	// The attempt runs in a cgroup of its own, gone when Work returns.
	spec, err := execjob.NewSpec(execjob.Payload{Argv: []string{"cat", "/proc/self/cgroup"}, Dir: "/"})
	require.NoError(t, err)
	j := jobstore.NewJob(spec, time.Now())
	j.Attempt = 1
	logDir := t.TempDir()
	_, err = execjob.Handler{LogDir: logDir, Contain: execjob.ContainCgroup}.Work(t.Context(), j)
	require.NoError(t, err)
	require.Regexp(t, `0::/.*jobdir-`+j.ID+`-1-[0-9]+-[0-9a-f]{8}\n`, readLog(t, logDir, j.ID))
	entries, err := os.ReadDir(auto.Cgroup)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotContains(t, e.Name(), j.ID, "the attempt's cgroup is left behind")
	}
}

// TestSupervisorKilled: if the supervisor itself is SIGKILLed while its
// worker lives, the worker kills what is left of the attempt in its
// cgroup, and the attempt fails (to be retried).
func TestSupervisorKilled(t *testing.T) {
	if info, _ := (execjob.Handler{}).Containment(); info.Cgroup == "" {
		t.Skipf("no writable cgroup v2 here (%s): without one, a killed supervisor's orphans cannot be found", info.Reason)
	}
	p, dir := treePayload(t, "all", "sleep", "")
	spec, err := execjob.NewSpec(p)
	require.NoError(t, err)
	j := jobstore.NewJob(spec, time.Now())
	j.Attempt = 1
	go func() {
		waitFor(t, filepath.Join(dir, "ready-1"), time.Minute)
		// The supervisor is this process's child named for the job.
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.HasPrefix(string(cmdline), "jobdir-supervise "+j.ID) {
				pid, _ := strconv.Atoi(e.Name())
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()
	_, err = execjob.Handler{Contain: execjob.ContainCgroup}.Work(t.Context(), j)
	require.Error(t, err)
	require.False(t, runner.IsPermanent(err))
	require.Contains(t, err.Error(), "supervisor")
	requireTreeGone(t, dir, 1)
}

// TestWorkTraceContext: a traced attempt (its ctx holds a span, as
// otelrunner's middleware gives it) hands its program the span's W3C
// trace context in TRACEPARENT and TRACESTATE, over the worker's own and
// the payload's; an attempt without a span sets neither.
func TestWorkTraceContext(t *testing.T) {
	logDir := t.TempDir()
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	spec, err := execjob.NewSpec(execjob.Payload{
		Argv: []string{"sh", "-c", `echo "tp=$TRACEPARENT ts=$TRACESTATE"`},
		Dir:  "/",
		Env:  []string{"TRACEPARENT=from-payload"},
	})
	require.NoError(t, err)
	j := jobstore.NewJob(spec, time.Now())
	j.Attempt = 1

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("vendor=x")
	require.NoError(t, err)
	ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))
	_, err = execjob.Handler{LogDir: logDir}.Work(ctx, j)
	require.NoError(t, err)
	require.Contains(t, readLog(t, logDir, j.ID), "tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ts=vendor=x\n")

	j2 := jobstore.NewJob(spec, time.Now())
	j2.Attempt = 1
	_, err = execjob.Handler{LogDir: logDir}.Work(t.Context(), j2)
	require.NoError(t, err)
	require.Contains(t, readLog(t, logDir, j2.ID), "tp=from-payload ts=\n", "without a span, the environment is as it was")
}
