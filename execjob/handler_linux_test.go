//go:build linux

package execjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

const childEnv = "EXECJOB_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
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

func TestWorkLogIsBounded(t *testing.T) {
	logDir := t.TempDir()
	h := execjob.Handler{LogDir: logDir, MaxLogBytes: 4096}
	// 1 MiB of output: the program must not block on a full pipe.
	j := execJob(t, "/", 1, "sh", "-c", `head -c 1048576 /dev/zero | tr '\0' x; echo; echo done`)
	res, err := h.Work(t.Context(), j)
	require.NoError(t, err)
	require.JSONEq(t, `{"exit_code":0}`, string(res))

	log := readLog(t, logDir, j.ID)
	require.Less(t, len(log), 4096+1024)
	require.Equal(t, 1, strings.Count(log, "log limit of 4096 bytes reached"))
	require.Contains(t, log, "exited with status 0")

	// A later attempt on a full log still records its header and footer.
	j.Attempt = 2
	_, err = h.Work(t.Context(), j)
	require.NoError(t, err)
	log = readLog(t, logDir, j.ID)
	require.Contains(t, log, "attempt 2 exited with status 0")
	require.Less(t, len(log), 4096+2048)
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

func TestWorkPermanentErrors(t *testing.T) {
	h := execjob.Handler{LogDir: t.TempDir()}

	j := execJob(t, "/", 1, "no-such-program-jobdir-test")
	_, err := h.Work(t.Context(), j)
	require.True(t, runner.IsPermanent(err), "%v", err)
	require.ErrorIs(t, err, exec.ErrNotFound)

	j = execJob(t, "/no/such/dir/for/jobdir", 1, "true")
	_, err = h.Work(t.Context(), j)
	require.True(t, runner.IsPermanent(err), "%v", err)

	j.Payload = json.RawMessage(`{"argv":[],"dir":"/"}`)
	_, err = h.Work(t.Context(), j)
	require.True(t, runner.IsPermanent(err), "%v", err)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)

	j.Kind = "other"
	_, err = h.Work(t.Context(), j)
	require.True(t, runner.IsPermanent(err), "%v", err)
}

var errTestCancel = errors.New("test cancel")

func TestWorkCancelStopsProcessGroup(t *testing.T) {
	logDir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pids")
	h := execjob.Handler{LogDir: logDir, KillGrace: 10 * time.Second}
	// A background child in the same group must die too.
	j := execJob(t, "/", 1, "sh", "-c", `sleep 60 & echo $! > `+pidFile+`.tmp; mv `+pidFile+`.tmp `+pidFile+`; wait`)

	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	go func() {
		waitFile(t, pidFile)
		cancel(errTestCancel)
	}()
	start := time.Now()
	_, err := h.Work(ctx, j)
	require.ErrorIs(t, err, errTestCancel)
	require.Less(t, time.Since(start), 10*time.Second, "SIGTERM, not the SIGKILL after the grace, should have stopped it")
	requireGone(t, readPid(t, pidFile))
	require.Contains(t, readLog(t, logDir, j.ID), "ended: execjob: program stopped")
}

func TestWorkKillsAfterGrace(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	h := execjob.Handler{KillGrace: 200 * time.Millisecond}
	// Ignored signals stay ignored across exec, so sleep ignores SIGTERM too.
	j := execJob(t, "/", 1, "sh", "-c", `trap "" TERM; touch `+ready+`; sleep 60; echo survived`)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		waitFile(t, ready)
		cancel()
	}()
	start := time.Now()
	_, err := h.Work(ctx, j)
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), "killed by signal SIGKILL")
	require.Less(t, time.Since(start), 30*time.Second)
}

func TestWorkKillsLeftoversOnExit(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	j := execJob(t, "/", 1, "sh", "-c", `sleep 60 & echo $! > `+pidFile)
	_, err := execjob.Handler{}.Work(t.Context(), j)
	require.NoError(t, err)
	requireGone(t, readPid(t, pidFile))
}

// TestPdeathsig runs the handler in a child process, SIGKILLs that process
// while its program runs, and checks that the kernel killed the program.
func TestPdeathsig(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+pidFile)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	waitFile(t, pidFile)
	pid := readPid(t, pidFile)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	requireGone(t, pid)
}

// runChild is the child of TestPdeathsig: it runs sleep 60 through the
// handler, after writing its PID (exec keeps it) to a file.
func runChild() int {
	pidFile := os.Getenv(childEnv)
	// Keep the runtime busy on other threads so the handler's goroutine is
	// not trivially on the main thread.
	spec, err := execjob.NewSpec(execjob.Payload{
		Argv: []string{"sh", "-c", `echo $$ > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; exec sleep 60`},
		Dir:  "/",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	j := jobstore.NewJob(spec, time.Now())
	j.Attempt = 1
	done := make(chan error)
	go func() {
		_, err := execjob.Handler{}.Work(context.Background(), j)
		done <- err
	}()
	err = <-done
	fmt.Fprintln(os.Stderr, "child: handler returned:", err)
	return 1
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

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// requireGone waits until pid no longer runs: it does not exist or is a
// zombie waiting for init to reap it.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		require.NoError(t, err)
		// The state follows the parenthesized command name.
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z") {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still runs: %s", pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
