package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childEnv carries a childSpec to a re-executed copy of this binary, which
// then plays one part of a multi-process workload instead of running the
// benchmark.
const childEnv = "JOBDIR_BENCH_CHILD"

// childSpec tells a child process what to do.
type childSpec struct {
	// Role is the part the child plays: work, latency, cancel, victim,
	// rescuer, scale or wake (measureIdleWake).
	Role string `json:"role"`
	// System names the system under test.
	System string `json:"system"`
	// Dir is the store directory.
	Dir string `json:"dir"`
	// Workers is the number of concurrent handlers.
	Workers int `json:"workers,omitempty"`
	// Scale configures the scale role.
	Scale *scaleSpec `json:"scale,omitempty"`
}

// child is a running child process and the lines it prints.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error // the exit status, once done is closed

	stderrMu sync.Mutex
	stderr   strings.Builder
}

// startChild re-executes this binary with spec in its environment.
func startChild(ctx context.Context, spec childSpec) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// The child is stopped through its stdin or by kill, never through
	// ctx, so that a workload can stop it gracefully.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	c := &child{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &c.stderrMu, w: &c.stderr}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child %s: %w", spec.Role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		c.err = cmd.Wait()
		close(c.lines)
		close(c.done)
	}()
	return c, nil
}

// expect returns the fields of the next line the child prints that starts
// with word, skipping others, or an error if none comes within timeout.
func (c *child) expect(ctx context.Context, word string, timeout time.Duration) ([]string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.done
				return nil, fmt.Errorf("child exited (%v) while waiting for %q: %s", c.err, word, c.stderrText())
			}
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == word {
				return f[1:], nil
			}
		case <-t.C:
			return nil, fmt.Errorf("no %q from child within %s: %s", word, timeout, c.stderrText())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// send writes one line to the child's stdin.
func (c *child) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// stop closes the child's stdin, which asks it to shut down gracefully,
// and kills it if it has not exited within timeout.
func (c *child) stop(timeout time.Duration) error {
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.kill()
		<-c.done
		return fmt.Errorf("child did not stop within %s: %s", timeout, c.stderrText())
	}
	var ee *exec.ExitError
	if c.err != nil && !errors.As(c.err, &ee) {
		return c.err
	}
	if c.err != nil {
		return fmt.Errorf("child: %w: %s", c.err, c.stderrText())
	}
	return nil
}

// kill sends SIGKILL to the child and waits for it to exit.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL) // it may have exited already
	for range c.lines {
	}
	<-c.done
}

func (c *child) stderrText() string {
	c.stderrMu.Lock()
	defer c.stderrMu.Unlock()
	s := c.stderr.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return strings.TrimSpace(s)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// out prints the child's lines to its parent, one write per line.
type out struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *out) println(args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintln(o.w, args...)
}

// runChild plays the part spec describes, printing to stdout and stopping
// when stdin closes.
func runChild(spec childSpec, stdin io.Reader, stdout io.Writer) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	o := &out{w: stdout}
	// Lines from the parent: "go" starts a work-off; "cpu" asks for the
	// CPU time spent since "go" and the jobs handled (a cpuLine); EOF
	// stops the child.
	goCh := make(chan struct{})
	var handled atomicCounter // jobs the work role's handlers started
	go func() {
		var cpu0 cpuUsage
		started := false
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "go":
				if !started {
					// Taken before the workers start: the child was
					// idle since it printed "open".
					cpu0, _ = selfCPU() // getrusage(RUSAGE_SELF) does not fail
					started = true
					close(goCh)
				}
			case "cpu":
				n := handled.load()
				u, _ := selfCPU()
				o.println(cpuLine(u.sub(cpu0), n))
			}
		}
		stop()
	}()
	switch spec.Role {
	case "scale":
		return runScaleChild(ctx, spec, o)
	case "wake":
		return runWakeChild(ctx, spec, o)
	}
	sys, err := findSystem(spec.System)
	if err != nil {
		return err
	}
	q, err := sys.open(ctx, spec.Dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", sys.name, err)
	}
	defer q.Close()
	ready := func() { o.println("ready") }
	switch spec.Role {
	case "work":
		o.println("open")
		select {
		case <-goCh:
		case <-ctx.Done():
			return nil
		}
		err := q.Work(ctx, spec.Workers, func(context.Context, int64) error {
			handled.add()
			return nil
		}, ready)
		o.println("handled", handled.load())
		return err
	case "latency":
		// "lat NANOS HANDLED" for each sample: its submit-to-start time
		// and the jobs (samples and load) started so far, which tells the
		// parent whether the handlers keep up with the load.
		var handled atomicCounter
		return q.Work(ctx, spec.Workers, func(_ context.Context, t int64) error {
			handled.add()
			if t != 0 {
				o.println("lat", time.Now().UnixNano()-t, handled.load())
			}
			return nil
		}, ready)
	case "cancel", "victim", "rescuer":
		jq, ok := q.(*jobdirQueue)
		if !ok {
			return fmt.Errorf("role %s needs a jobdir store, not %s", spec.Role, sys.name)
		}
		return jq.run(ctx, spec.Workers, jobdirRole(spec.Role, o), ready)
	}
	return fmt.Errorf("unknown child role %q", spec.Role)
}
