package testproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The environment of a child: the name of what it runs, its arguments (a
// JSON array) and, when it runs a test rather than a function, that test.
const (
	envName = "JOBDIR_TESTPROC_NAME"
	envArgs = "JOBDIR_TESTPROC_ARGS"
	envTest = "JOBDIR_TESTPROC_TEST"
)

// liveness bounds how long Next waits for a line and Lines waits for a
// child to exit once its stdout has closed.
const liveness = 60 * time.Second

// Func is a function a child runs: args are those the parent passed in
// Options.Args, and the result is the child's exit code.
type Func func(args []string) int

// registered holds the functions given to Register.
var registered = map[string]Func{}

// Register adds f to the functions Main may run, under name. A package
// whose child function serves the tests of several packages (as
// internal/waitstorm's does) calls it from an init function, so that the
// test binaries that import it know the function without naming it. It
// panics if name is registered already.
func Register(name string, f Func) {
	if _, ok := registered[name]; ok {
		panic("testproc: child function " + name + " registered twice")
	}
	registered[name] = f
}

// Main runs the child's function and exits, when this process is a child
// that Start or Run started for a function in funcs or given to Register;
// otherwise, in the parent and in a child that runs a test, it returns at
// once. TestMain calls it first thing. An unknown name exits with code 2.
func Main(funcs map[string]Func) { MainRoles(funcs, nil) }

// MainRoles is Main for a package whose children play many roles of one
// function: a child whose name neither funcs nor Register names runs
// roles with that name, which says itself whether it knows the role, so
// that the roles are listed once, where they are played. A nil roles is
// Main.
func MainRoles(funcs map[string]Func, roles func(name string) int) {
	if os.Getenv(envPIDNS) != "" {
		if err := enterPIDNamespace(); err != nil {
			fmt.Fprintf(os.Stderr, "testproc: %v\n", err)
			os.Exit(2)
		}
	}
	name := Name()
	if name == "" || os.Getenv(envTest) != "" {
		return
	}
	f, ok := funcs[name]
	if !ok {
		f, ok = registered[name]
	}
	if !ok && roles != nil {
		f, ok = func([]string) int { return roles(name) }, true
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "testproc: this test binary has no child function %q\n", name)
		os.Exit(2)
	}
	os.Exit(f(Args()))
}

// Name returns the name this process was started for as a child (the
// function, or the role of the test it runs), or "" when it is not a
// child.
func Name() string { return os.Getenv(envName) }

// Args returns the arguments the parent passed to this child, or nil when
// it passed none.
func Args() []string {
	var args []string
	if s := os.Getenv(envArgs); s != "" {
		_ = json.Unmarshal([]byte(s), &args)
	}
	return args
}

// Env returns the environment entries that make the test binary, started
// by other means (as the program of an exec job, for instance), a child
// that runs the function name with args. Appended to an environment, they
// override a child's own.
func Env(name string, args ...string) []string {
	a, _ := json.Marshal(args)
	return []string{envName + "=" + name, envArgs + "=" + string(a), envTest + "="}
}

// Options says how to start a child. A nil *Options is the zero value.
type Options struct {
	// Test, if set, makes the child run this test of the test binary
	// (with -test.run=^Test$ -test.v) instead of a function; the test
	// calls Name to learn that it is the child and which part it plays.
	// Default: the child runs the function Main finds under its name.
	Test string
	// Args are the function's arguments, or, with Test, more flags for
	// the test binary (-test.timeout=90s, say). Default: none.
	Args []string
	// Env is added to the child's environment. Default: nothing added.
	Env []string
	// BareEnv starts the child's environment from PATH=/usr/bin:/bin
	// alone instead of this process's environment, as for a child running
	// as another user. Default: false.
	BareEnv bool
	// Exe is the binary to start, a copy of the test binary (see
	// Unprivileged). Default: the running test binary, os.Args[0].
	Exe string
	// Dir is the child's working directory. Default: this process's.
	Dir string
	// Cred, if set, runs the child as that user and group (see User and
	// Unprivileged); the test is skipped if the system refuses the
	// switch. Default: this process's user.
	Cred *syscall.Credential
	// PIDNamespace, if set, starts the child as PID 1 of a PID namespace
	// of its own, in a mount namespace of its own whose /proc shows that
	// PID namespace, as `unshare --pid --fork --mount-proc` would and as
	// a container does: every such child's os.Getpid() is 1, and the
	// processes it starts live and die in its namespace. Main mounts the
	// /proc (then takes on Cred, if set). Pid, Signal and Stop act on the
	// child as this process sees it; being PID 1, it gets from here only
	// SIGKILL, SIGSTOP and the signals it handles. The test is skipped,
	// with the reason, where the machine does not allow it (see
	// RequirePIDNamespaces). Default: this process's namespaces.
	PIDNamespace bool
}

// Proc is a running child. Its methods may be called from one goroutine at
// a time, apart from Signal, Pid and Output, which are safe for concurrent
// use.
type Proc struct {
	name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	unread []string      // stdout lines not yet taken by Next or Lines
	more   chan struct{} // a line arrived, or stdout closed
	eof    bool          // stdout closed
	output bytes.Buffer  // stdout and stderr, interleaved

	pipes   []*os.File    // the read ends of stdout and stderr
	drained chan struct{} // closed when both pipes are read to the end
	stdin   io.WriteCloser
	done    chan struct{} // closed when the child has exited
	err     error         // the child's exit, once done is closed
}

// Start starts the test binary as a child that runs name (a function given
// to Main, or, with o.Test, a role of that test), and returns it. Its
// stdout lines are read with Next and Lines; its stderr goes to the test
// log, each line prefixed with name. When the test ends, the child's
// process group is killed and the child waited for.
func Start(t testing.TB, name string, o *Options) *Proc {
	t.Helper()
	p := start(t, name, o, true)
	t.Cleanup(p.kill)
	return p
}

// Run starts name as Start does, waits until the child exits or ctx ends
// (then it kills the child's process group), and returns everything the
// child wrote to stdout and stderr and how it ended: nil, an
// *exec.ExitError, or ctx's error.
func Run(ctx context.Context, t testing.TB, name string, o *Options) (string, error) {
	t.Helper()
	p := start(t, name, o, false)
	err := p.Wait(ctx)
	p.kill()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return p.Output(), err
}

func start(t testing.TB, name string, o *Options, logStderr bool) *Proc {
	t.Helper()
	if o == nil {
		o = &Options{}
	}
	exe := o.Exe
	if exe == "" {
		exe = os.Args[0]
	}
	var cmd *exec.Cmd
	var env []string
	if o.Test != "" {
		cmd = exec.Command(exe, append([]string{"-test.run=^" + o.Test + "$", "-test.count=1", "-test.v"}, o.Args...)...)
		env = []string{envName + "=" + name, envArgs + "=", envTest + "=" + o.Test}
	} else {
		cmd = exec.Command(exe, "-test.run=^$")
		env = Env(name, o.Args...)
	}
	if o.BareEnv {
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	} else {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Env = append(cmd.Env, o.Env...)
	cmd.Dir = o.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: o.Cred}
	if o.PIDNamespace {
		RequirePIDNamespaces(t)
		if err := usePIDNamespace(cmd.SysProcAttr); err != nil {
			t.Skipf("cannot start a process in a PID namespace of its own: %v", err)
		}
		cmd.Env = append(cmd.Env, envPIDNS+"=1")
		if o.Cred != nil {
			// Taken on in the child, after it mounts its /proc.
			cmd.Env = append(cmd.Env, envCred+"="+formatCred(o.Cred))
			cmd.SysProcAttr.Credential = nil
		}
	}

	p := &Proc{name: name, cmd: cmd, more: make(chan struct{}, 1), done: make(chan struct{}), drained: make(chan struct{})}
	// Pipes of its own rather than exec's: Wait then returns when the
	// child exits, even while a process it started holds its stdout.
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatalf("testproc: child %s: %v", name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatalf("testproc: child %s: %v", name, err)
	}
	p.pipes = []*os.File{outR, errR}
	cmd.Stdout, cmd.Stderr = outW, errW
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatalf("testproc: child %s: %v", name, err)
	}
	err = cmd.Start()
	_, _ = outW.Close(), errW.Close()
	if err != nil {
		_, _ = outR.Close(), errR.Close()
		if o.Cred != nil {
			t.Skipf("cannot start a child process as uid %d: %v", o.Cred.Uid, err)
		}
		t.Fatalf("testproc: start child %s: %v", name, err)
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.unread = append(p.unread, sc.Text())
			p.output.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.signal()
		}
		p.mu.Lock()
		p.eof = true
		p.mu.Unlock()
		p.signal()
	})
	readers.Go(func() {
		sc := bufio.NewScanner(errR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.output.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if logStderr {
				t.Logf("child %s: %s", name, sc.Text())
			}
		}
	})
	go func() {
		readers.Wait()
		close(p.drained)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *Proc) signal() {
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// kill SIGKILLs the child's process group, waits for the child, and
// stops reading its output.
func (p *Proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
	p.drain()
	for _, f := range p.pipes {
		_ = f.Close() // ends a read that a process outside the group holds open
	}
	<-p.drained
}

// drainGrace bounds how long the output of a child that has exited is
// read: longer only when a process it started holds its stdout or stderr.
const drainGrace = 5 * time.Second

// drain waits until the output of the exited child is read, or
// drainGrace.
func (p *Proc) drain() {
	select {
	case <-p.drained:
	case <-time.After(drainGrace):
	}
}

// Pid returns the child's process ID, which is also its process group's.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the child alone, not to its process group.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGSTOP to the child and returns once the kernel reports it
// stopped (state T or t in /proc/PID/stat), or ctx ends: kill(2) returns
// before the signal takes effect, and a child that runs on meanwhile can
// still change what the test is about to compare.
func (p *Proc) Stop(ctx context.Context) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.Pid())
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return err
		}
		// The state is the first field after the command name, which is
		// in parentheses and may hold spaces.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// Stdin returns the write end of the child's standard input.
func (p *Proc) Stdin() io.WriteCloser { return p.stdin }

// Next returns the child's next line on stdout, failing the test if the
// child exits without one or none comes within a minute.
func (p *Proc) Next(t testing.TB) string {
	t.Helper()
	timeout := time.NewTimer(liveness)
	defer timeout.Stop()
	for {
		p.mu.Lock()
		if len(p.unread) > 0 {
			l := p.unread[0]
			p.unread = p.unread[1:]
			p.mu.Unlock()
			return l
		}
		eof := p.eof
		p.mu.Unlock()
		if eof {
			t.Fatalf("child %s exited without output", p.name)
		}
		select {
		case <-p.more:
		case <-timeout.C:
			t.Fatalf("no output from child %s within %s", p.name, liveness)
		}
	}
}

// Lines waits for the child to close its stdout and exit, requires that
// it exited with code 0, and returns the lines of stdout that Next has not
// taken.
func (p *Proc) Lines(t testing.TB) []string {
	t.Helper()
	for {
		p.mu.Lock()
		eof := p.eof
		p.mu.Unlock()
		if eof {
			break
		}
		<-p.more
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("child %s failed: %v\n%s", p.name, err, p.Output())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.unread
	p.unread = nil
	return out
}

// Wait waits until the child exits, and returns how: nil, or an
// *exec.ExitError. If ctx ends first, it returns ctx's error and leaves
// the child running.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		p.drain()
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Output returns what the child has written so far to stdout and stderr,
// interleaved.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// ExitCode returns the exit code in err, an error from Wait or Run: 0 for
// nil, the code of an *exec.ExitError, and -1 for any other error.
func ExitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
