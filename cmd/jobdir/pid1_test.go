package main

import (
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

	"github.com/jobdir/jobdir/jobstore"
	"github.com/stretchr/testify/require"
)

// The tests below run jobdir as PID 1 of a PID namespace of its own, as in
// a container: unshare --pid --fork --mount-proc, whose child is the
// namespace's PID 1.

// pod is jobdir running as PID 1 of its own PID namespace.
type pod struct {
	*proc
	init int // jobdir's PID, as seen from outside the namespace
}

// startPod starts jobdir with args as PID 1 of a new PID namespace, or
// skips the test where none can be made.
func startPod(t *testing.T, dir, wd string, args ...string) pod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a PID namespace needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1)")
	}
	cmd := jobdirCmd(dir, wd, args...)
	// --kill-child: the namespace's PID 1, and so every process in it,
	// gets SIGKILL if unshare dies (the test's cleanup kills it).
	cmd.Args = append([]string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child"}, cmd.Args...)
	cmd.Path = "/usr/bin/unshare"
	if p, err := exec.LookPath("unshare"); err == nil {
		cmd.Path = p
	}
	p := start(t, cmd)
	children := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
	deadline := time.Now().Add(liveness)
	for {
		b, err := os.ReadFile(children)
		if pid, err2 := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && err2 == nil {
			return pod{proc: p, init: pid}
		}
		if p.exited() {
			t.Skipf("cannot make a PID namespace: %s", p.errb.String())
		}
		require.True(t, time.Now().Before(deadline), "unshare started no child")
		time.Sleep(5 * time.Millisecond)
	}
}

// waitForOutput waits until the process's stderr holds s.
func waitForOutput(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for !strings.Contains(p.errb.String(), s) {
		require.False(t, p.exited(), "exited before it wrote %q; stderr:\n%s", s, p.errb.String())
		require.True(t, time.Now().Before(deadline), "no %q in stderr:\n%s", s, p.errb.String())
		time.Sleep(5 * time.Millisecond)
	}
}

// zombieChildren returns the children of pid that are zombies, and how
// many children it has.
func zombieChildren(pid int) (zombies []int, children int) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			children++
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
			if s := string(st); err == nil && strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z") {
				zombies = append(zombies, child)
			}
		}
	}
	return zombies, children
}

// TestE2EPID1ReapsOrphans: jobdir work and jobdir serve, as PID 1 of a PID
// namespace, reap the orphans the kernel hands them: processes a command
// run in the namespace from outside (as kubectl exec does) left in the
// background. Meanwhile the exit statuses of the worker's jobs stay
// right: the reaper never takes a supervisor's.
func TestE2EPID1ReapsOrphans(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter(1)")
	}
	for _, tc := range []struct {
		name string
		args []string
		up   string
	}{
		{"work", []string{"work", "--concurrency", "4"}, "running up to 4 jobs"},
		{"serve", []string{"serve", "--work", "4", "--addr", "127.0.0.1:0", "--insecure-no-auth"}, "serving without authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, wd := newStoreDir(t), t.TempDir()
			p := startPod(t, dir, wd, tc.args...)
			waitForOutput(t, p.proc, tc.up)

			var ids []string
			for i := range 8 {
				ids = append(ids, submitBin(t, dir, wd, "--max-attempts", "1", "--", "sh", "-c", fmt.Sprintf("sleep 0.0%d; exit %d", i, 3*(i%2))))
			}
			// Ten orphans, each exiting a moment after its parent, while
			// the jobs run.
			const orphans = 10
			enter := exec.Command("nsenter", "-t", strconv.Itoa(p.init), "-p", "-m", "--",
				"sh", "-c", fmt.Sprintf("for i in $(seq %d); do sleep 0.1 & done; exit 0", orphans))
			out, err := enter.CombinedOutput()
			require.NoError(t, err, "%s", out)

			deadline := time.Now().Add(5 * time.Second)
			var zombies []int
			for {
				var children int
				zombies, children = zombieChildren(p.init)
				if children == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			require.Empty(t, zombies, "zombies of PID 1 left unreaped")

			for i, id := range ids {
				r := runBin(t, dir, wd, "wait", "--timeout", "60s", id)
				j := getJob(t, dir, id)
				if i%2 == 0 {
					require.Equal(t, 0, r.code, "%s\n%+v", r, j)
					require.Equal(t, jobstore.StateSucceeded, j.State)
				} else {
					require.Equal(t, exitFailed, r.code, "%s\n%+v", r, j)
					require.Contains(t, j.LastError, "exit status 3")
				}
			}
			require.NoError(t, syscall.Kill(p.init, syscall.SIGTERM))
			require.Equal(t, 0, p.wait(t), "stderr:\n%s", p.errb.String())
		})
	}
}

// TestE2ESecondSignalEndsAtOnce: while jobdir work waits for its running
// job after a SIGTERM or SIGINT, a second one ends it at once: a process
// dies by the signal, and PID 1 of a PID namespace, which cannot, exits
// with status 128+signal. The job is left to its lease, as after a kill.
func TestE2ESecondSignalEndsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid1 bool
		sig  syscall.Signal
	}{
		{"process/SIGTERM", false, syscall.SIGTERM},
		{"process/SIGINT", false, syscall.SIGINT},
		{"pid1/SIGTERM", true, syscall.SIGTERM},
		{"pid1/SIGINT", true, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, wd := newStoreDir(t), t.TempDir()
			args := []string{"work", "--concurrency", "1", "--shutdown-grace", "60s"}
			var p *proc
			var pid int
			if tc.pid1 {
				pd := startPod(t, dir, wd, args...)
				p, pid = pd.proc, pd.init
			} else {
				p = start(t, jobdirCmd(dir, wd, args...))
				pid = p.cmd.Process.Pid
			}
			id := submitBin(t, dir, wd, "--", "sh", "-c", "touch started; exec sleep 60")
			waitForFile(t, filepath.Join(wd, "started"))

			require.NoError(t, syscall.Kill(pid, tc.sig))
			waitForOutput(t, p, "stopping: waiting up to 1m for 1 running job")
			sent := time.Now()
			require.NoError(t, syscall.Kill(pid, tc.sig))
			<-p.done
			t.Logf("exited %s after the second signal", time.Since(sent))
			require.Less(t, time.Since(sent), 10*time.Second)
			var ee *exec.ExitError
			require.True(t, errors.As(p.err, &ee), "exited cleanly: %v", p.err)
			ws := ee.Sys().(syscall.WaitStatus)
			if tc.pid1 {
				// unshare exits with its child's status.
				require.Equal(t, 128+int(tc.sig), ee.ExitCode(), "stderr:\n%s", p.errb.String())
			} else {
				require.True(t, ws.Signaled(), "not killed by a signal: %v", ws)
				require.Equal(t, tc.sig, ws.Signal())
			}
			// The lease, which the job's supervisor holds until it has
			// killed the program, frees the job.
			deadline := time.Now().Add(liveness)
			for getJob(t, dir, id).State != jobstore.StateQueued {
				require.True(t, time.Now().Before(deadline), "the dead worker's job is not queued again")
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
