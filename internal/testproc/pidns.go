package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The environment of a child started in a PID namespace of its own: that
// it must mount its /proc, and the credentials it takes on afterwards.
const (
	envPIDNS = "JOBDIR_TESTPROC_PIDNS"
	envCred  = "JOBDIR_TESTPROC_CRED"
)

// execFunc is the function of the child that PIDNamespaceCmd starts: it
// replaces itself with the program its arguments name.
const execFunc = "testproc-exec"

func init() {
	Register(execFunc, func(args []string) int {
		if len(args) < 2 {
			fmt.Fprintln(os.Stderr, "testproc: exec: no program")
			return 2
		}
		var env []string
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "JOBDIR_TESTPROC_") {
				env = append(env, e)
			}
		}
		err := syscall.Exec(args[0], args[1:], env)
		fmt.Fprintf(os.Stderr, "testproc: exec %s: %v\n", args[0], err)
		return 2
	})
}

var (
	pidnsOnce sync.Once
	pidnsErr  error
)

// RequirePIDNamespaces skips the test, with the reason, unless this
// machine lets this process start a child in a PID namespace of its own
// (Options.PIDNamespace, PIDNamespaceCmd): Linux, and root, and no
// sandbox that refuses new namespaces. It tries once per process.
func RequirePIDNamespaces(t testing.TB) {
	t.Helper()
	pidnsOnce.Do(func() {
		if os.Geteuid() != 0 {
			pidnsErr = fmt.Errorf("not root (uid %d)", os.Geteuid())
			return
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), Env(execFunc, "/bin/true", "true")...)
		cmd.Env = append(cmd.Env, envPIDNS+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		if pidnsErr = usePIDNamespace(cmd.SysProcAttr); pidnsErr != nil {
			return
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			pidnsErr = fmt.Errorf("%w %s", err, strings.TrimSpace(string(out)))
		}
	})
	if pidnsErr != nil {
		t.Skipf("cannot start a process in a PID namespace of its own: %v", pidnsErr)
	}
}

// PIDNamespaceCmd makes cmd, not yet started, run its program as PID 1 of
// a PID namespace of its own, in a mount namespace of its own whose /proc
// shows that PID namespace, as `unshare --pid --fork --mount-proc` would
// and as a container does; it is Options.PIDNamespace for a program other
// than the test binary (the jobdir command, say). The test binary starts
// in the namespace, mounts /proc, takes on cmd's SysProcAttr.Credential if
// set, and execs the program, which keeps its PID: cmd.Process.Pid is the
// program's PID as this process sees it. The rest of cmd.SysProcAttr
// (Setpgid, say) is kept. The package's TestMain must call Main or
// MainRoles. The test is skipped, with the reason, where the machine does
// not allow it (see RequirePIDNamespaces).
func PIDNamespaceCmd(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	RequirePIDNamespaces(t)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	env := append(cmd.Environ(), Env(execFunc, append([]string{cmd.Path}, cmd.Args...)...)...)
	env = append(env, envPIDNS+"=1")
	if c := cmd.SysProcAttr.Credential; c != nil {
		env = append(env, envCred+"="+formatCred(c))
		cmd.SysProcAttr.Credential = nil
	}
	if err := usePIDNamespace(cmd.SysProcAttr); err != nil {
		t.Skipf("cannot start a process in a PID namespace of its own: %v", err)
	}
	cmd.Env = env
	cmd.Path = os.Args[0]
	cmd.Args = []string{os.Args[0], "-test.run=^$"}
}

// formatCred writes c as envCred holds it: uid:gid:group,group,...
func formatCred(c *syscall.Credential) string {
	gs := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		gs[i] = strconv.FormatUint(uint64(g), 10)
	}
	return fmt.Sprintf("%d:%d:%s", c.Uid, c.Gid, strings.Join(gs, ","))
}

// parseCred reads what formatCred wrote.
func parseCred(s string) (*syscall.Credential, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return nil, fmt.Errorf("credentials %q: want uid:gid:groups", s)
	}
	uid, err1 := strconv.ParseUint(f[0], 10, 32)
	gid, err2 := strconv.ParseUint(f[1], 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("credentials %q: want numbers", s)
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if f[2] != "" {
		for _, g := range strings.Split(f[2], ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("credentials %q: group %q is not a number", s, g)
			}
			c.Groups = append(c.Groups, uint32(n))
		}
	}
	return c, nil
}
