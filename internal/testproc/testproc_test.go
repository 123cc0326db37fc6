package testproc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/internal/testproc"
)

func init() {
	testproc.Register("registered", func(args []string) int {
		fmt.Println("registered", args[0])
		return 0
	})
}

func TestMain(m *testing.M) {
	testproc.MainRoles(map[string]testproc.Func{
		"echo": func(args []string) int {
			for _, a := range args {
				fmt.Println(a)
			}
			fmt.Fprintln(os.Stderr, "to stderr")
			return 0
		},
		"exit": func(args []string) int {
			code, _ := strconv.Atoi(args[0])
			return code
		},
		"group": func([]string) int {
			// A grandchild in the child's process group, then wait to be
			// killed.
			cmd := exec.Command("sleep", "300")
			if err := cmd.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Println(cmd.Process.Pid)
			select {}
		},
		"count": func([]string) int {
			// Print a growing number as fast as it can.
			for i := 0; ; i++ {
				fmt.Println(i)
			}
		},
		"pid": func([]string) int {
			// Its PID, what /proc says its PID is, and its groups; then
			// wait to be killed.
			self, err := os.Readlink("/proc/self")
			groups, _ := os.Getgroups()
			fmt.Println(os.Getpid(), self, err, os.Getuid(), os.Getgid(), groups)
			select {}
		},
		"env": func([]string) int {
			fmt.Println(os.Getenv("TESTPROC_TEST_VALUE"))
			return 0
		},
	}, func(name string) int {
		// Any other name: a role of one function.
		if !strings.HasPrefix(name, "role-") {
			fmt.Fprintln(os.Stderr, "unknown role", name)
			return 2 // as Main answers a name it does not know
		}
		fmt.Println("playing", name)
		return 0
	})
	goleak.VerifyTestMain(m)
}

func TestFunctionArgsAndLines(t *testing.T) {
	p := testproc.Start(t, "echo", &testproc.Options{Args: []string{"one", "two words", ""}})
	require.Equal(t, "one", p.Next(t))
	require.Equal(t, []string{"two words", ""}, p.Lines(t))
	require.Contains(t, p.Output(), "to stderr")
}

func TestRunReturnsOutputAndExit(t *testing.T) {
	out, err := testproc.Run(t.Context(), t, "echo", &testproc.Options{Args: []string{"hello"}})
	require.NoError(t, err)
	require.Equal(t, "hello\nto stderr\n", sortLines(out))

	_, err = testproc.Run(t.Context(), t, "exit", &testproc.Options{Args: []string{"7"}})
	require.Equal(t, 7, testproc.ExitCode(err))

	_, err = testproc.Run(t.Context(), t, "no-such-function", nil)
	require.Equal(t, 2, testproc.ExitCode(err), "a name Main does not know")
}

// sortLines puts "to stderr" last: stdout and stderr interleave in any
// order.
func sortLines(s string) string {
	var out, errs []string
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if l == "to stderr" {
			errs = append(errs, l)
		} else {
			out = append(out, l)
		}
	}
	return strings.Join(append(out, errs...), "\n") + "\n"
}

// TestRegisteredFunction: a function given to Register runs in a child
// like one given to Main.
func TestRegisteredFunction(t *testing.T) {
	p := testproc.Start(t, "registered", &testproc.Options{Args: []string{"x"}})
	require.Equal(t, []string{"registered x"}, p.Lines(t))
}

func TestRunEndsWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := testproc.Run(ctx, t, "group", nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestEnvAddsToTheChildsEnvironment(t *testing.T) {
	p := testproc.Start(t, "env", &testproc.Options{Env: []string{"TESTPROC_TEST_VALUE=set"}})
	require.Equal(t, []string{"set"}, p.Lines(t))
}

// TestCleanupKillsTheProcessGroup: when the test that started a child
// ends, the child and every process in its group are gone.
func TestCleanupKillsTheProcessGroup(t *testing.T) {
	var child, grandchild int
	t.Run("start", func(t *testing.T) {
		p := testproc.Start(t, "group", nil)
		child = p.Pid()
		var err error
		grandchild, err = strconv.Atoi(p.Next(t))
		require.NoError(t, err)
		pgid, err := syscall.Getpgid(grandchild)
		require.NoError(t, err)
		require.Equal(t, child, pgid, "the grandchild is in the child's group")
		require.NotEqual(t, syscall.Getpgrp(), pgid, "the child has a group of its own")
	})
	// The child was waited for; the grandchild, reparented, is reaped by
	// init once killed.
	require.ErrorIs(t, syscall.Kill(child, 0), syscall.ESRCH)
	deadline := time.Now().Add(time.Minute)
	for alive(grandchild) {
		require.True(t, time.Now().Before(deadline), "process %d of the child's group outlived the test", grandchild)
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestMainRolesHandsOtherNamesToRoles: with MainRoles, a name that no
// function is registered for runs the roles function with that name, and
// a registered name still runs its own function.
func TestMainRolesHandsOtherNamesToRoles(t *testing.T) {
	require.Equal(t, []string{"playing role-one"}, testproc.Start(t, "role-one", nil).Lines(t))
	require.Equal(t, []string{"x"}, testproc.Start(t, "echo", &testproc.Options{Args: []string{"x"}}).Lines(t))
	out, err := testproc.Run(t.Context(), t, "other", nil)
	require.Error(t, err, "roles refused the name, so the child failed")
	require.Contains(t, out, "unknown role other")
}

// TestStopReturnsOnceStopped: once Stop returns, the child runs no more:
// a child that prints without pause prints nothing after it.
func TestStopReturnsOnceStopped(t *testing.T) {
	for range 20 {
		p := testproc.Start(t, "count", nil)
		p.Next(t)
		require.NoError(t, p.Stop(t.Context()))
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/stat")
		require.NoError(t, err)
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		require.Contains(t, []string{"T", "t"}, f[0], "the child is not stopped")
		before := processTicks(t, p.Pid())
		time.Sleep(20 * time.Millisecond)
		require.Equal(t, before, processTicks(t, p.Pid()), "the stopped child used CPU")
	}
}

// processTicks returns the user and system CPU ticks process pid has used.
func processTicks(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[11] + " " + f[12]
}

// TestChildRunsATest: with Options.Test, the child runs that test, which
// learns from Name that it is the child.
func TestChildRunsATest(t *testing.T) {
	if testproc.Name() == "role" {
		fmt.Println("playing", testproc.Name())
		return
	}
	out, err := testproc.Run(t.Context(), t, "role", &testproc.Options{Test: "TestChildRunsATest"})
	require.NoError(t, err)
	require.Contains(t, out, "playing role")
	require.Contains(t, out, "--- PASS: TestChildRunsATest")
}

// TestChildAsNobody runs a child as another user.
func TestChildAsNobody(t *testing.T) {
	if testproc.Name() == "whoami" {
		fmt.Println("uid", os.Getuid())
		return
	}
	base, exe := testproc.Unprivileged(t)
	out, err := testproc.Run(t.Context(), t, "whoami", &testproc.Options{
		Test: "TestChildAsNobody", Exe: exe, Dir: base, BareEnv: true, Cred: testproc.Nobody()})
	require.NoError(t, err, out)
	require.Contains(t, out, "uid 65534")
}

// TestPIDNamespaceChildIsPID1: children started with PIDNamespace are
// each PID 1 of their own namespace, with a /proc that says so, can be
// stopped from here as any child, and take on Cred after the mount.
func TestPIDNamespaceChildIsPID1(t *testing.T) {
	testproc.RequirePIDNamespaces(t)
	a := testproc.Start(t, "pid", &testproc.Options{PIDNamespace: true})
	b := testproc.Start(t, "pid", &testproc.Options{PIDNamespace: true})
	require.True(t, strings.HasPrefix(a.Next(t), "1 1 <nil> 0 0 "), "PID 1, and /proc says so")
	require.True(t, strings.HasPrefix(b.Next(t), "1 1 <nil> 0 0 "), "PID 1, and /proc says so")
	require.NotEqual(t, a.Pid(), b.Pid())
	require.NotEqual(t, 1, a.Pid(), "Pid is the child's PID as the parent sees it")
	require.NoError(t, a.Stop(t.Context()))
	require.NoError(t, a.Signal(syscall.SIGCONT))

	c := testproc.Start(t, "pid", &testproc.Options{PIDNamespace: true,
		Cred: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534, 4242}}})
	require.Equal(t, "1 1 <nil> 65534 65534 [4242 65534]", c.Next(t))
}

// TestPIDNamespaceCmd: a program other than the test binary runs as PID 1
// of its own namespace, with a /proc that shows it alone and its own, and
// keeps the PID that the parent sees.
func TestPIDNamespaceCmd(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", `echo $$; ls /proc | grep -c '^[0-9]'`)
	testproc.PIDNamespaceCmd(t, cmd)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, "1\n3\n", string(out), "the shell is PID 1, and /proc shows it, ls and grep")

	cmd = exec.Command("/bin/sh", "-c", `echo $$ $(id -u) $(id -G)`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4242}}}
	testproc.PIDNamespaceCmd(t, cmd)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, "1 65534 65534 4242\n", string(out), "the credentials are taken on after the mount")
}
