package supervise

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	testproc.Main(map[string]testproc.Func{"pod-worker": podWorker})
	os.Exit(m.Run())
}

const testJobID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

// TestSweepCgroups: a sweep removes the empty cgroups that no process
// holds locked, whatever PID their names carry (1 here, which always
// exists); it leaves alone one that a live worker made and no program
// entered yet, and cgroups of other names.
func TestSweepCgroups(t *testing.T) {
	dir, err := CgroupDir()
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	dir = privateCgroup(t, dir)
	dead := filepath.Join(dir, "jobdir-"+testJobID+"-1-1-0badf00d")
	foreign := filepath.Join(dir, "jobdir-not-one-of-ours")
	for _, d := range []string{dead, foreign} {
		require.NoError(t, os.Mkdir(d, 0o755))
		t.Cleanup(func() { _ = os.Remove(d) })
	}
	live, err := NewAttemptCgroup(dir, testJobID, 2)
	require.NoError(t, err)
	t.Cleanup(func() { RemoveCgroup(live) })
	require.Contains(t, filepath.Base(live), fmt.Sprintf("-%d-", os.Getpid()))

	sweepCgroups(dir)
	require.NoDirExists(t, dead)
	require.DirExists(t, foreign)
	require.DirExists(t, live, "a sweep removed the empty cgroup of a live worker")

	// RemoveCgroup drops the lock: what is left then is a sweep's.
	RemoveCgroup(live)
	require.NoDirExists(t, live)
}

// privateCgroup makes a cgroup under dir for a test to make attempts' in,
// named so that no sweep takes it, so that its sweeps touch no other
// process's cgroups, nor other processes' sweeps its own.
func privateCgroup(t *testing.T, dir string) string {
	t.Helper()
	var r [8]byte
	_, _ = rand.Read(r[:])
	p := filepath.Join(dir, "jobdir-test."+hex.EncodeToString(r[:]))
	require.NoError(t, os.Mkdir(p, 0o755))
	t.Cleanup(func() { _ = os.Remove(p) })
	return p
}

// TestSweepRemovesDeadPodsCgroups: a worker that is PID 1 of its own PID
// namespace, as in a pod, is killed with its whole namespace while two
// attempts run, which leaves their cgroups behind, named with PID 1. The
// sweep of a worker started afterwards removes them, but leaves a
// leftover cgroup that still has a process in it.
func TestSweepRemovesDeadPodsCgroups(t *testing.T) {
	dir, err := CgroupDir()
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("making a PID namespace needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1)")
	}
	// --kill-child: the namespace's PID 1, and with it everything in the
	// namespace, gets SIGKILL when unshare does.
	pod := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", os.Args[0], "-test.run=^$")
	dir = privateCgroup(t, dir)
	pod.Env = append(os.Environ(), testproc.Env("pod-worker", dir)...)
	var stderr strings.Builder
	pod.Stderr = &stderr
	out, err := pod.StdoutPipe()
	require.NoError(t, err)
	if err := pod.Start(); err != nil {
		t.Skipf("cannot make a PID namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = pod.Process.Kill()
		_ = pod.Wait()
	})
	var cgroups []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "cgroup "); ok {
			cgroups = append(cgroups, p)
			t.Cleanup(func() { RemoveCgroup(p) })
			continue
		}
		require.Equal(t, "running as pid 1", line)
		break
	}
	require.Len(t, cgroups, 2, "the worker in the namespace did not start its attempts: %s", &stderr)
	for _, cg := range cgroups {
		require.False(t, isEmptyCgroup(cg), "%s: the attempt is not in its cgroup", cg)
		require.Contains(t, filepath.Base(cg), "-1-", "the name carries the worker's PID")
	}

	// SIGKILL to the namespace's PID 1 kills the whole pod, and unshare
	// exits once every process of the namespace is gone.
	init := children(t, pod.Process.Pid)
	require.Len(t, init, 1, "the pod's PID 1 from outside")
	// A dying worker closes its descriptors before the kernel kills the
	// rest of its namespace, and a supervisor that reads the end of its
	// control pipe in that moment stops its program and removes its
	// cgroup, as it should. What this test is about is the pod that had
	// no such moment: its supervisors are stopped first, so that nothing
	// of the pod cleans up after it.
	sups := children(t, init[0])
	require.Len(t, sups, 2, "the worker's supervisors")
	for _, pid := range sups {
		require.NoError(t, unix.Kill(pid, unix.SIGSTOP))
	}
	for _, pid := range sups {
		require.Eventually(t, func() bool { return processState(pid) == 'T' }, 10*time.Second, 5*time.Millisecond,
			"supervisor %d did not stop", pid)
	}
	require.NoError(t, unix.Kill(init[0], unix.SIGKILL))
	_ = pod.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, cg := range cgroups {
		for !isEmptyCgroup(cg) {
			if _, err := os.Stat(cg); errors.Is(err, fs.ErrNotExist) {
				// Not a process left behind: something removed the
				// cgroup before the sweep this test is about, although
				// nothing of the pod could.
				t.Fatalf("%s was removed before any sweep of this test ran", cg)
			}
			if time.Now().After(deadline) {
				procs, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
				var status []string
				for _, pid := range strings.Fields(string(procs)) {
					b, _ := os.ReadFile("/proc/" + pid + "/status")
					status = append(status, string(b))
				}
				_, err := os.Stat(cg)
				t.Fatalf("%s (%v) still has processes after its pod was killed: %q\n%s", cg, err, procs, strings.Join(status, "\n"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.DirExists(t, cg, "nothing was left behind to sweep")
	}

	// A leftover whose process still runs: a dead worker's program that
	// escaped every kill, say.
	busy := filepath.Join(dir, "jobdir-"+testJobID+"-3-1-0badf00d")
	require.NoError(t, os.Mkdir(busy, 0o755))
	fd, err := unix.Open(busy, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	err = sleep.Start()
	_ = unix.Close(fd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sleep.Wait() })
	t.Cleanup(func() { RemoveCgroup(busy) })

	sweepCgroups(dir)
	for _, cg := range cgroups {
		require.NoDirExists(t, cg, "the sweep left a dead pod's cgroup")
	}
	require.DirExists(t, busy, "the sweep removed a cgroup with a process in it")
}

// children returns the PIDs of the children of process pid's main thread,
// as seen from this process's PID namespace.
func children(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err, "children of %d: %q", pid, b)
		pids = append(pids, n)
	}
	return pids
}

// processState returns the state letter of process pid from
// /proc/pid/stat (T when stopped), or 0 if it cannot be read.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name in parentheses may hold spaces; the state follows
	// its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// podWorker is a worker in a pod: it runs two attempts of a long program,
// each in a cgroup of its own under args[0], says where, and waits to be
// killed.
func podWorker(args []string) int {
	runtime.LockOSThread()
	if _, err := CgroupDir(); err != nil {
		fmt.Println("no cgroup:", err)
		return 1
	}
	dir := args[0]
	for i := 1; i <= 2; i++ {
		cg, err := NewAttemptCgroup(dir, testJobID, i)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		a, err := Start(Spec{Argv: []string{"sleep", "60"}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"},
			KillGrace: time.Second, Cgroup: cg, Output: io.Discard, Name: "jobdir-supervise test"})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if mode, note := a.Containment(); mode != ModeCgroup {
			fmt.Println("not in a cgroup:", note)
			return 1
		}
		fmt.Println("cgroup", cg)
	}
	fmt.Printf("running as pid %d\n", os.Getpid())
	select {}
}

// TestSweepSparesAttemptsStarting: sweeps running all the while never take
// the cgroup of an attempt between its making and its program's start:
// every attempt runs in its cgroup.
func TestSweepSparesAttemptsStarting(t *testing.T) {
	dir, err := CgroupDir()
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	dir = privateCgroup(t, dir)
	done := make(chan struct{})
	swept := make(chan int)
	go func() {
		n := 0
		defer func() { swept <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			sweepCgroups(dir)
			n++
		}
	}()
	defer func() {
		close(done)
		t.Logf("%d sweeps meanwhile", <-swept)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range 20 {
		cg, err := NewAttemptCgroup(dir, testJobID, i+1)
		require.NoError(t, err)
		a, err := Start(Spec{Argv: []string{"true"}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"},
			KillGrace: time.Second, Cgroup: cg, Output: io.Discard, Name: "jobdir-supervise test"})
		require.NoError(t, err)
		mode, note := a.Containment()
		ex, err := a.Wait()
		require.NoError(t, err)
		require.Equal(t, 0, ex.Code)
		require.Equal(t, ModeCgroup, mode, "attempt %d: %s", i+1, note)
		require.NoDirExists(t, cg)
	}
}

// TestLockCgroupSeesASweep: a cgroup that a sweep removes between its
// mkdir and its maker's lock is reported as swept, so that the maker makes
// another, and never takes a lock on a cgroup that is gone.
func TestLockCgroupSeesASweep(t *testing.T) {
	dir, err := CgroupDir()
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	path := filepath.Join(privateCgroup(t, dir), "jobdir-"+testJobID+"-1-1-0badf00d")
	require.NoError(t, os.Mkdir(path, 0o755))
	t.Cleanup(func() { _ = os.Remove(path) })
	// The sweep holds the exclusive lock while the maker asks for its
	// shared one, and removes the cgroup.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB))
	got := make(chan error, 1)
	go func() {
		lfd, err := lockCgroup(path)
		if err == nil {
			_ = unix.Close(lfd)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // the maker is waiting for the lock, or about to
	require.NoError(t, unix.Rmdir(path))
	require.NoError(t, unix.Close(fd))
	require.ErrorIs(t, <-got, errSwept)
}
