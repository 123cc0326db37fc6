package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/internal/reaper"
)

// Supported reports whether programs can be supervised here.
const Supported = true

// Spec says what to run and how.
type Spec struct {
	// Argv is the program and its arguments; Argv[0] is looked up in the
	// PATH of Env when it has no slash, and taken relative to Dir when it
	// is relative.
	Argv []string
	// Dir is the absolute directory it runs in.
	Dir string
	// Env is its whole environment.
	Env []string
	// KillGrace is the time between SIGTERM and SIGKILL when it is
	// stopped.
	KillGrace time.Duration
	// Cgroup is a cgroup made for this attempt (NewAttemptCgroup), or
	// empty for none. The supervisor removes it.
	Cgroup string
	// Lease, if not nil, is held open by the supervisor until every
	// process of the attempt is gone. Start does not close it.
	Lease *os.File
	// Output receives the program's standard output and error.
	Output io.Writer
	// Name is what the supervisor is called in ps, such as
	// "jobdir-supervise 01J... 2".
	Name string
}

// waitDelay bounds how long Wait reads the output after the supervisor
// exited: only a process that escaped every search could hold it.
const waitDelay = 2 * time.Second

// Attempt is a supervised program.
type Attempt struct {
	cmd     *exec.Cmd
	ctrl    *os.File
	events  *bufio.Reader
	started event
	cgroup  string
}

// Start starts the supervisor, which starts the program. It returns once
// the program runs, or with a *StartError if it could not be started. The
// calling goroutine must stay on its OS thread (runtime.LockOSThread) until
// Wait returns: the supervisor's parent-death signal fires when that thread
// ends.
func Start(spec Spec) (*Attempt, error) {
	if len(spec.Argv) == 0 {
		return nil, &StartError{FailureNotFound, "no program given"}
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	cmd := &exec.Cmd{
		// The running binary itself, even if its file was replaced since.
		Path:   "/proc/self/exe",
		Args:   []string{spec.Name},
		Env:    []string{envSupervise + "=" + protocolVersion},
		Stdout: spec.Output,
		Stderr: spec.Output,
		// A group of its own: a terminal's ^C reaches the worker, which
		// decides what to do, and not the supervisor.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGUSR1},
		WaitDelay:   waitDelay,
		ExtraFiles:  []*os.File{ctrlR, statW},
	}
	for _, k := range []string{"GOCOVERDIR", "GOTRACEBACK"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	// In a binary built with -race, the race runtime sleeps a second
	// before exiting unless told not to; the lease waits for the exit.
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	if spec.Cgroup != "" {
		cmd.Env = append(cmd.Env, envCgroup+"="+spec.Cgroup)
	}
	cfg := config{Argv: spec.Argv, Dir: spec.Dir, Env: spec.Env, KillGrace: spec.KillGrace, Worker: os.Getpid(), Cgroup: spec.Cgroup}
	if spec.Lease != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, spec.Lease)
		cfg.Lease = true
	}
	// Through the reaper, so that a worker that reaps orphans as PID 1
	// leaves the supervisor's exit status to finish.
	err = reaper.StartChild(cmd)
	ctrlR.Close()
	statW.Close()
	if err != nil {
		ctrlW.Close()
		statR.Close()
		if spec.Cgroup != "" {
			RemoveCgroup(spec.Cgroup)
		}
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	a := &Attempt{cmd: cmd, ctrl: ctrlW, events: bufio.NewReader(statR), cgroup: spec.Cgroup}
	line, _ := json.Marshal(cfg)
	if _, err := ctrlW.Write(append(line, '\n')); err != nil {
		a.abort()
		return nil, fmt.Errorf("supervisor: send config: %w", err)
	}
	ev, err := a.next()
	if err != nil {
		a.abort()
		return nil, err
	}
	switch ev.Event {
	case evStarted:
		a.started = ev
		return a, nil
	case evStartFailed:
		_ = a.finish(true)
		return nil, &StartError{Failure: ev.Failure, Message: ev.Message}
	}
	a.abort()
	return nil, fmt.Errorf("supervisor: unexpected event %q", ev.Event)
}

// next reads the next event.
func (a *Attempt) next() (event, error) {
	line, err := a.events.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return event{}, errors.New("supervisor: exited without a word")
		}
		return event{}, fmt.Errorf("supervisor: %w", err)
	}
	var ev event
	if err := json.Unmarshal(line, &ev); err != nil {
		return event{}, fmt.Errorf("supervisor: bad event %q: %w", line, err)
	}
	return ev, nil
}

// Pid returns the program's process ID.
func (a *Attempt) Pid() int { return a.started.Pid }

// Stop asks the supervisor to stop the program: SIGTERM to every process
// of the attempt, and SIGKILL to those left after the kill grace.
func (a *Attempt) Stop() { _, _ = a.ctrl.Write([]byte{cmdStop}) }

// Kill asks the supervisor to SIGKILL every process of the attempt now.
func (a *Attempt) Kill() { _, _ = a.ctrl.Write([]byte{cmdKill}) }

// Wait waits until the program and every other process of the attempt are
// gone, and the supervisor with them, and returns how the program ended.
func (a *Attempt) Wait() (Exit, error) {
	ev, err := a.next()
	werr := a.finish(err == nil && ev.Event == evExited)
	if err != nil {
		return Exit{}, err
	}
	if ev.Event != evExited {
		return Exit{}, fmt.Errorf("supervisor: unexpected event %q", ev.Event)
	}
	if werr != nil && !errors.Is(werr, exec.ErrWaitDelay) {
		return Exit{}, fmt.Errorf("supervisor: %w", werr)
	}
	return Exit{Code: ev.Code, Signal: ev.Signal, Leftovers: ev.Leftovers,
		Containment: a.started.Containment, Note: a.started.Note}, werr
}

// Containment returns how the attempt is contained (ModeCgroup or
// ModeSubreaper) and, if a cgroup was wanted but not used, why.
func (a *Attempt) Containment() (mode, note string) {
	return a.started.Containment, a.started.Note
}

// finish reaps the supervisor. If it died without cleaning up (someone
// SIGKILLed it), whatever is left of the attempt in its cgroup is killed
// here; without a cgroup, only the program's group can be, and only if
// the supervisor died before it reaped the program, so that the group ID
// cannot have been reused.
func (a *Attempt) finish(cleanExit bool) error {
	a.ctrl.Close()
	err := a.cmd.Wait()
	reaper.ChildDone(a.cmd.Process.Pid)
	if a.cgroup != "" {
		RemoveCgroup(a.cgroup)
	}
	if !cleanExit && a.started.Pid > 0 {
		_ = syscall.Kill(-a.started.Pid, syscall.SIGKILL)
	}
	return err
}

// abort kills the supervisor (which kills the program) and reaps it.
func (a *Attempt) abort() {
	a.Kill()
	_ = a.finish(false)
}
