//go:build linux

package execjob_test

import (
	"context"
	"encoding/json"
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
	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// The tests of this file run programs that start trees of processes of
// every shape a job can make: a child in its process group, a child that
// called setsid, a daemon that double-forked, a tree three levels deep, and
// a process that ignores SIGTERM. The programs and their processes are this
// test binary in the roles below. Every process of attempt n records itself
// in the tree's directory and holds a shared flock on its lock-<n> file
// (inherited as descriptor 3), so that the program of a later attempt can
// tell, race-free, whether any process of an earlier attempt is still
// alive: it takes that lock exclusively without waiting, which succeeds
// only once every holder is gone.

// Roles of this test binary, the names of its child functions
// (internal/testproc).
const (
	roleProgram = "program" // a job's program
	roleNode    = "node"    // a process of its tree
	roleWorker  = "worker"  // a worker process on a filestore
)

// Environment of the roles.
const (
	envTree    = "EXECJOB_TEST_TREE"    // the tree spec, JSON
	envStore   = "EXECJOB_TEST_STORE"   // the worker's store directory
	envContain = "EXECJOB_TEST_CONTAIN" // the worker's containment
)

// treeSpec says what a program does.
type treeSpec struct {
	// Dir is where the tree records itself: pid-<pid> files, lock-<n>,
	// check-<n> and ready-<n> files.
	Dir string `json:"dir"`
	// Shape is the tree attempt 1 starts (later attempts start none):
	// group, setsid, double-fork, three-levels, term-ignorer, or all.
	Shape string `json:"shape"`
	// Then is what the program does once its tree runs: "sleep" (until
	// killed), "exit" (status 0) or "fail" (status 3). A later attempt of
	// a job with a Shape exits with status 0 at once.
	Then string `json:"then"`
	// Node is the role of a node process: which shape it is part of and
	// what it does.
	Node string `json:"node,omitempty"`
	// Level is a node's depth under the program.
	Level int `json:"level,omitempty"`
}

// expected is how many processes (the program included) each shape makes.
var expected = map[string]int{
	"group": 2, "setsid": 2, "double-fork": 3, "three-levels": 4, "term-ignorer": 2,
	"all": 1 + 1 + 1 + 2 + 3 + 1,
}

// runRole runs this test binary's role and returns its exit status.
// childFuncs returns the function of each role, for testproc.Main.
func childFuncs() map[string]testproc.Func {
	funcs := map[string]testproc.Func{}
	for _, role := range []string{roleProgram, roleNode, roleWorker} {
		funcs[role] = func([]string) int { return runRole(role) }
	}
	return funcs
}

func runRole(role string) int {
	var err error
	switch role {
	case roleProgram:
		err = runProgram()
	case roleNode:
		err = runNode()
	case roleWorker:
		err = runWorker()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

func readTree() (treeSpec, error) {
	var spec treeSpec
	err := json.Unmarshal([]byte(os.Getenv(envTree)), &spec)
	return spec, err
}

// record writes this process's pid-<pid> file (see recordPid).
func record(dir string, attempt int) error {
	return recordPid(dir, attempt, os.Getpid())
}

// recordPid writes the pid-<pid> file of process pid: its attempt and its
// start time, which tell it apart from a later process with the same PID.
func recordPid(dir string, attempt, pid int) error {
	st, err := procStart(pid)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf("tmp-%d", pid))
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", attempt, st), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("pid-%d", pid)))
}

func runProgram() error {
	spec, err := readTree()
	if err != nil {
		return err
	}
	attempt, err := strconv.Atoi(os.Getenv(execjob.EnvAttempt))
	if err != nil {
		return fmt.Errorf("%s: %w", execjob.EnvAttempt, err)
	}
	lock, err := os.OpenFile(filepath.Join(spec.Dir, fmt.Sprintf("lock-%d", attempt)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		return err
	}
	// Every earlier attempt's processes must be gone by now.
	check := "free"
	for n := 1; n < attempt; n++ {
		f, err := os.Open(filepath.Join(spec.Dir, fmt.Sprintf("lock-%d", n)))
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			check = fmt.Sprintf("overlap with attempt %d", n)
		}
		f.Close()
	}
	// Written whole, then renamed: a reader never sees it half written.
	checkFile := filepath.Join(spec.Dir, fmt.Sprintf("check-%d", attempt))
	if err := os.WriteFile(checkFile+".tmp", []byte(check), 0o644); err != nil {
		return err
	}
	if err := os.Rename(checkFile+".tmp", checkFile); err != nil {
		return err
	}
	if err := record(spec.Dir, attempt); err != nil {
		return err
	}
	if attempt == 1 && spec.Shape != "" {
		shapes := []string{spec.Shape}
		if spec.Shape == "all" {
			shapes = []string{"group", "setsid", "double-fork", "three-levels", "term-ignorer"}
		}
		for _, sh := range shapes {
			if err := startNode(spec, lock, sh, 1); err != nil {
				return err
			}
		}
		want := expected[spec.Shape]
		for count(spec.Dir, attempt) < want {
			time.Sleep(5 * time.Millisecond)
		}
	}
	fmt.Printf("attempt %d ready\n", attempt)
	if err := os.WriteFile(filepath.Join(spec.Dir, fmt.Sprintf("ready-%d", attempt)), nil, 0o644); err != nil {
		return err
	}
	switch {
	case spec.Then == "exit", attempt > 1 && spec.Shape != "":
		return nil // a later attempt of a tree job just succeeds
	case spec.Then == "fail":
		os.Exit(3)
	}
	select {}
}

// startNode starts a node of the given shape at level under the program,
// passing it the lock. Leaves are sleep(1), recorded by their parent;
// nodes that start others are this binary, which records itself.
func startNode(spec treeSpec, lock *os.File, shape string, level int) error {
	spec.Node, spec.Level = shape, level
	var cmd *exec.Cmd
	leaf := true
	switch {
	case shape == "term-ignorer":
		// An ignored signal stays ignored across exec.
		cmd = exec.Command("sh", "-c", `trap "" TERM; exec sleep 300`)
	case shape == "three-levels" && level < 3, shape == "double-fork" && level == 1:
		b, _ := json.Marshal(spec)
		cmd = exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), testproc.Env(roleNode)...)
		cmd.Env = append(cmd.Env, envTree+"="+string(b), "GORACE=atexit_sleep_ms=0")
		leaf = false
	default:
		cmd = exec.Command("sleep", "300")
	}
	cmd.ExtraFiles = []*os.File{lock}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	switch {
	case shape == "setsid" && level == 1, shape == "term-ignorer" && level == 1, shape == "double-fork" && level == 2:
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if leaf {
		attempt, _ := strconv.Atoi(os.Getenv(execjob.EnvAttempt))
		return recordPid(spec.Dir, attempt, cmd.Process.Pid)
	}
	return nil
}

func runNode() error {
	spec, err := readTree()
	if err != nil {
		return err
	}
	lock := os.NewFile(3, "lock")
	attempt, _ := strconv.Atoi(os.Getenv(execjob.EnvAttempt))
	if err := record(spec.Dir, attempt); err != nil {
		return err
	}
	switch {
	case spec.Node == "three-levels":
		if err := startNode(spec, lock, spec.Node, spec.Level+1); err != nil {
			return err
		}
	case spec.Node == "double-fork":
		// The middle process starts the daemon and exits, leaving it an
		// orphan in a session of its own.
		return startNode(spec, lock, spec.Node, 2)
	}
	select {}
}

// count returns how many processes of attempt recorded themselves in dir.
func count(dir string, attempt int) int {
	return len(treePids(dir, attempt))
}

// proc is a process a tree recorded.
type proc struct {
	pid   int
	start uint64
}

// treePids returns the processes of attempt recorded in dir.
func treePids(dir string, attempt int) []proc {
	entries, _ := os.ReadDir(dir)
	var out []proc
	for _, e := range entries {
		pidStr, ok := strings.CutPrefix(e.Name(), "pid-")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var a int
		var st uint64
		if _, err := fmt.Sscan(string(b), &a, &st); err != nil || a != attempt {
			continue
		}
		if pid, err := strconv.Atoi(pidStr); err == nil {
			out = append(out, proc{pid: pid, start: st})
		}
	}
	return out
}

// procStart returns the start time of process pid, in clock ticks.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return strconv.ParseUint(f[19], 10, 64)
}

// running reports whether p still runs: its PID names the same process
// (same start time) and it is not a zombie.
func (p proc) running() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	st, _ := strconv.ParseUint(f[19], 10, 64)
	return st == p.start && f[0] != "Z"
}

// requireTreeGone fails unless every recorded process of attempt is gone
// now, and kills any that is not.
func requireTreeGone(t *testing.T, dir string, attempt int) {
	t.Helper()
	procs := treePids(dir, attempt)
	require.NotEmpty(t, procs, "attempt %d recorded no process", attempt)
	var alive []int
	for _, p := range procs {
		if p.running() {
			alive = append(alive, p.pid)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	require.Empty(t, alive, "processes of attempt %d survive (of %d)", attempt, len(procs))
}

// killTreeAtCleanup kills whatever a test leaves of a tree.
func killTreeAtCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		for a := 1; a <= 5; a++ {
			for _, p := range treePids(dir, a) {
				if p.running() {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
			}
		}
	})
}

// treePayload returns the payload of a job that runs a tree of shape, and
// the tree's directory (in base, or a new temporary directory if base is
// empty).
func treePayload(t *testing.T, shape, then, base string) (execjob.Payload, string) {
	return treePayloadExe(t, os.Args[0], shape, then, base)
}

// treePayloadExe is treePayload with exe, a copy of this test binary, as
// the program.
func treePayloadExe(t *testing.T, exe, shape, then, base string) (execjob.Payload, string) {
	t.Helper()
	dir := base
	if dir == "" {
		dir = t.TempDir()
	} else {
		require.NoError(t, os.Mkdir(dir, 0o777))
	}
	require.NoError(t, os.Chmod(dir, 0o777))
	killTreeAtCleanup(t, dir)
	b, err := json.Marshal(treeSpec{Dir: dir, Shape: shape, Then: then})
	require.NoError(t, err)
	return execjob.Payload{
		Argv: []string{exe},
		Dir:  "/",
		Env:  append(testproc.Env(roleProgram), envTree+"="+string(b), "GORACE=atexit_sleep_ms=0"),
	}, dir
}

func runWorker() error {
	contain, err := execjob.ParseContainment(os.Getenv(envContain))
	if err != nil {
		return err
	}
	ctx := context.Background()
	// A worker run as another user than the test's (root) shares the store
	// through its group, as the test made it: without GroupAccess it would
	// rightly refuse to run jobs from a store others can write.
	st, err := filestore.Open(ctx, os.Getenv(envStore), &filestore.Options{NoSync: true, RecoverInterval: 20 * time.Millisecond,
		GroupAccess: os.Geteuid() != 0})
	if err != nil {
		return err
	}
	defer st.Close()
	h := execjob.Handler{LogDir: filepath.Join(os.Getenv(envStore), "logs"), Contain: contain, KillGrace: 30 * time.Second}
	info, err := h.Containment()
	if err != nil {
		return err
	}
	r := runner.New(st, &runner.Options{Concurrency: 1, PollInterval: 20 * time.Millisecond,
		Worker: fmt.Sprintf("worker-%d", os.Getpid())})
	r.Handle(execjob.Kind, h)
	fmt.Printf("worker %d: %s\n", os.Getpid(), info)
	return r.Run(ctx)
}

// startWorker starts a worker process on the store in dir, and returns it
// with the line it printed about containment.
func startWorker(t *testing.T, exe, dir string, contain execjob.Containment, cred *syscall.Credential) (*testproc.Proc, string) {
	t.Helper()
	p := testproc.Start(t, roleWorker, &testproc.Options{Exe: exe, Cred: cred,
		Env: []string{envStore + "=" + dir, envContain + "=" + string(contain), "GORACE=atexit_sleep_ms=0"}})
	return p, p.Next(t)
}

// waitFor waits until path exists and returns when it appeared.
func waitFor(t *testing.T, path string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(path); err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killedWorkerTree runs a job whose program starts a tree of shape under a
// worker process, SIGKILLs that worker, and checks on another worker's
// next attempt that no process of the first survived it; it returns the
// time from the SIGKILL to the next attempt's start.
func killedWorkerTree(t *testing.T, shape string, contain execjob.Containment, cred *syscall.Credential, base string) (time.Duration, string) {
	t.Helper()
	storeDir, treeDir, exe := t.TempDir(), "", os.Args[0]
	if base != "" {
		storeDir, treeDir, exe = filepath.Join(base, "store"), filepath.Join(base, "tree"), filepath.Join(base, filepath.Base(os.Args[0]))
	}
	st, err := filestore.Open(t.Context(), storeDir, &filestore.Options{NoSync: true, GroupAccess: cred != nil})
	require.NoError(t, err)
	defer st.Close()
	p, dir := treePayloadExe(t, exe, shape, "sleep", treeDir)
	spec, err := execjob.NewSpec(p)
	require.NoError(t, err)
	spec.MaxAttempts = 3
	j, _, err := st.Submit(t.Context(), spec)
	require.NoError(t, err)
	if cred != nil {
		// Share the store with the workers' group, as operations.md
		// says: this process reads it too, and files it makes must stay
		// usable by the workers.
		require.NoError(t, filepath.Walk(storeDir, func(path string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
			if fi.IsDir() {
				return os.Chmod(path, 0o770|os.ModeSetgid)
			}
			return nil
		}))
	}

	first, containment := startWorker(t, exe, storeDir, contain, cred)
	waitFor(t, filepath.Join(dir, "ready-1"), time.Minute)
	require.Len(t, treePids(dir, 1), expected[shape])
	// The second worker waits for the job; it can claim it only once the
	// first attempt is over.
	startWorker(t, exe, storeDir, contain, cred)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, first.Signal(syscall.SIGKILL))
	killed := time.Now()
	started := waitFor(t, filepath.Join(dir, "check-2"), time.Minute)
	check, err := os.ReadFile(filepath.Join(dir, "check-2"))
	require.NoError(t, err)
	require.Equal(t, "free", string(check), "attempt 2 started while a process of attempt 1 still ran")
	requireTreeGone(t, dir, 1)

	got, err := st.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got.Attempt)
	require.Equal(t, jobstore.EndWorkerLost, got.History[0].End)
	got, err = st.Wait(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
	requireTreeGone(t, dir, 2)
	return started.Sub(killed), containment
}

// TestWorkerKilledTreeGone SIGKILLs a worker process while its job's
// program runs a tree of each shape, and checks that the job's next
// attempt, in another worker process, starts only after every process of
// the first is gone, and that none survives. Run as root here, the workers
// put each attempt in a cgroup of its own.
func TestWorkerKilledTreeGone(t *testing.T) {
	for _, shape := range []string{"group", "setsid", "double-fork", "three-levels", "term-ignorer"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			d, containment := killedWorkerTree(t, shape, execjob.ContainAuto, nil, "")
			t.Logf("next attempt started %v after the worker's SIGKILL; %s", d, containment)
		})
	}
}

// TestWorkerKilledTreeGoneSupervisorOnly is TestWorkerKilledTreeGone for
// every shape at once without a cgroup, as on a machine where the worker
// may not make one.
func TestWorkerKilledTreeGoneSupervisorOnly(t *testing.T) {
	t.Parallel()
	d, containment := killedWorkerTree(t, "all", execjob.ContainSupervisor, nil, "")
	require.Contains(t, containment, "under a supervisor (no cgroup: containment set to supervisor)")
	t.Logf("next attempt started %v after the worker's SIGKILL; %s", d, containment)
}

// TestWorkerKilledTreeGoneUnprivileged is TestWorkerKilledTreeGone for
// every shape at once, run by a user who may not write the cgroup
// hierarchy ("nobody"), whose workers find they cannot make a cgroup and
// rely on the supervisor alone.
func TestWorkerKilledTreeGoneUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the workers as another user")
	}
	// nobody must be able to run this binary and reach the store: both go
	// in a directory anyone may search.
	base, _ := testproc.Unprivileged(t)
	t.Parallel()
	cred := testproc.Nobody()
	d, containment := killedWorkerTree(t, "all", execjob.ContainAuto, cred, base)
	require.Contains(t, containment, "under a supervisor (no cgroup:")
	t.Logf("next attempt started %v after the worker's SIGKILL; %s", d, containment)
}
