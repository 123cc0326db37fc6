package execjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// Defaults of Handler's fields.
const (
	// DefaultMaxLogBytes bounds a job's log file when Handler.MaxLogBytes is
	// zero: 10 MiB.
	DefaultMaxLogBytes = 10 << 20
	// DefaultKillGrace is how long a program has to exit after SIGTERM
	// before it gets SIGKILL, when Handler.KillGrace is zero.
	DefaultKillGrace = 5 * time.Second
	// TailBytes is how much of the end of a failed attempt's output its
	// ExitError carries.
	TailBytes = 2 << 10
)

// Environment variables a program receives from Handler.
const (
	// EnvJobID names the variable that holds the job's ID.
	EnvJobID = "JOBDIR_JOB_ID"
	// EnvAttempt names the variable that holds the attempt number,
	// starting at 1.
	EnvAttempt = "JOBDIR_ATTEMPT"
)

// waitDelay bounds how long Handler waits for the program's output pipe to
// close after the program and its process group are gone (a process that
// left the group may still hold it).
const waitDelay = 2 * time.Second

// Handler runs exec jobs. Its Work method is a runner.Handler; register it
// for Kind. The zero value discards output and uses the defaults below. A
// Handler is safe for concurrent use: it holds no state between calls.
type Handler struct {
	// LogDir is the directory that holds one log file per job,
	// <LogDir>/<job ID>.log, created (mode 0700, files 0600; see
	// GroupAccess) when needed. Empty means output is discarded, except the
	// tail kept for error messages.
	LogDir string
	// GroupAccess creates the log directory 0770 and log files 0660, for a
	// store shared by the users of one group (filestore.Options.GroupAccess).
	GroupAccess bool
	// MaxLogBytes bounds each log file; zero means DefaultMaxLogBytes.
	MaxLogBytes int64
	// KillGrace is how long the program's process group has between
	// SIGTERM and SIGKILL once the job's context ends; zero means
	// DefaultKillGrace.
	KillGrace time.Duration
}

// ExitError is the error of an attempt whose program ran and did not exit
// with status 0.
type ExitError struct {
	// Code is the exit status, or -1 if the program was killed by a signal.
	Code int
	// Signal names the signal that killed the program, if one did.
	Signal string
	// Tail is the end of the attempt's output (at most TailBytes).
	Tail string
}

func (e *ExitError) Error() string {
	msg := "exit status " + strconv.Itoa(e.Code)
	if e.Signal != "" {
		msg = "killed by signal " + e.Signal
	}
	if e.Tail != "" {
		msg += "; output ends with:\n" + e.Tail
	}
	return msg
}

var _ runner.Handler = Handler{}

// LogPath returns the log file of job id in logDir. It fails with an error
// wrapping jobstore.ErrInvalidID if id is not a job ID, so the path never
// leaves logDir.
func LogPath(logDir, id string) (string, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return "", err
	}
	return filepath.Join(logDir, id+".log"), nil
}

// Work runs one attempt of job, an exec job, and returns the result
// {"exit_code":0} when its program exits with status 0. Otherwise it returns
// an *ExitError; an error wrapping context.Cause(ctx) if ctx ended and the
// program was stopped; or a runner.Permanent error (wrapping
// jobstore.ErrInvalidInput for a bad payload, exec.ErrNotFound for a missing
// program, fs.ErrNotExist for a missing directory) when another attempt
// cannot help.
// Work returns only once the program and its process group are gone.
func (h Handler) Work(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
	if job.Kind != Kind {
		return nil, runner.Permanent(fmt.Errorf("execjob: job %s has kind %q, not %q", job.ID, job.Kind, Kind))
	}
	p, err := ParsePayload(job.Payload)
	if err != nil {
		return nil, runner.Permanent(fmt.Errorf("execjob: job %s: %w", job.ID, err))
	}
	if !supported {
		return nil, runner.Permanent(fmt.Errorf("execjob: running programs needs Linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported))
	}
	out, err := h.openLog(job.ID)
	if err != nil {
		return nil, err
	}
	defer out.close()
	out.note(fmt.Sprintf("--- jobdir: job %s attempt %d of %d on %s at %s: %q in %s ---\n",
		job.ID, job.Attempt, job.MaxAttempts, job.Worker, time.Now().UTC().Format(time.RFC3339Nano), p.Argv, p.Dir))
	start := time.Now()
	res, err := h.run(ctx, job, p, out)
	out.note(fmt.Sprintf("--- jobdir: attempt %d %s after %s ---\n", job.Attempt, describe(res, err), time.Since(start).Round(time.Millisecond)))
	return res, err
}

func describe(res json.RawMessage, err error) string {
	var ee *ExitError
	switch {
	case err == nil:
		return "exited with status 0"
	case errors.As(err, &ee):
		if ee.Signal != "" {
			return "was killed by signal " + ee.Signal
		}
		return "exited with status " + strconv.Itoa(ee.Code)
	}
	return "ended: " + err.Error()
}

// run starts the program and waits for it and its process group. The
// calling goroutine keeps its OS thread for the whole run: Pdeathsig fires
// when the thread that started the child exits, not the process
// (https://go.dev/issue/27505), and an unlocked goroutine's thread may be
// retired by the runtime while the child still runs.
func (h Handler) run(ctx context.Context, job jobstore.Job, p Payload, out *logWriter) (json.RawMessage, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if ctx.Err() != nil {
		return nil, fmt.Errorf("execjob: not started: %w", context.Cause(ctx))
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Dir = p.Dir
	env := append(os.Environ(), p.Env...)
	cmd.Env = append(env, EnvJobID+"="+job.ID, EnvAttempt+"="+strconv.Itoa(job.Attempt))
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		out.note(fmt.Sprintf("jobdir: cannot start %q: %v\n", p.Argv[0], err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, runner.Permanent(fmt.Errorf("execjob: start %q in %s: %w", p.Argv[0], p.Dir, err))
		}
		return nil, fmt.Errorf("execjob: start %q in %s: %w", p.Argv[0], p.Dir, err)
	}
	pid := cmd.Process.Pid

	grace := h.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	var (
		mu       sync.Mutex
		exited   bool // the leader is a zombie: its PID, and so the group ID, is about to be freed
		signaled bool
	)
	signal := func(sig syscall.Signal) {
		mu.Lock()
		defer mu.Unlock()
		if !exited {
			signaled = true
			_ = killGroup(pid, sig)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			signal(syscall.SIGKILL)
		}
	})

	// Wait for the leader to exit without reaping it, so that its PID
	// cannot be reused while the rest of its group is killed.
	waitErr := waitExited(pid)
	mu.Lock()
	if waitErr == nil {
		_ = killGroup(pid, syscall.SIGKILL)
	}
	exited = true
	wasSignaled := signaled
	mu.Unlock()
	close(done)
	wg.Wait()

	err := cmd.Wait()
	if errors.Is(err, exec.ErrWaitDelay) {
		out.note("jobdir: output still open after the program exited; stopped reading it\n")
		err = nil
	}
	if waitErr != nil && err == nil {
		err = waitErr
	}
	if wasSignaled && ctx.Err() != nil {
		return nil, fmt.Errorf("execjob: program stopped: %w (%s)", context.Cause(ctx), exitText(cmd.ProcessState))
	}
	if err != nil {
		var xe *exec.ExitError
		if !errors.As(err, &xe) {
			return nil, fmt.Errorf("execjob: wait for %q: %w", p.Argv[0], err)
		}
		code, sig := exitStatus(xe.ProcessState)
		return nil, &ExitError{Code: code, Signal: sig, Tail: out.tailString()}
	}
	return json.RawMessage(`{"exit_code":0}`), nil
}

func exitText(ps *os.ProcessState) string {
	if ps == nil {
		return "not started"
	}
	code, sig := exitStatus(ps)
	if sig != "" {
		return "killed by signal " + sig
	}
	return "exit status " + strconv.Itoa(code)
}

func (h Handler) openLog(id string) (*logWriter, error) {
	limit := h.MaxLogBytes
	if limit <= 0 {
		limit = DefaultMaxLogBytes
	}
	w := &logWriter{limit: limit}
	if h.LogDir == "" {
		return w, nil
	}
	path, err := LogPath(h.LogDir, id)
	if err != nil {
		return nil, runner.Permanent(fmt.Errorf("execjob: %w", err))
	}
	dirPerm, filePerm := os.FileMode(0o700), os.FileMode(0o600)
	if h.GroupAccess {
		dirPerm, filePerm = 0o770, 0o660
	}
	if err := os.MkdirAll(h.LogDir, dirPerm); err != nil {
		return nil, fmt.Errorf("execjob: log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("execjob: open log: %w", err)
	}
	if h.GroupAccess {
		// The umask would take the group's write bit away.
		_ = os.Chmod(h.LogDir, dirPerm)
		_ = f.Chmod(filePerm)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("execjob: open log: %w", err)
	}
	w.f, w.size = f, fi.Size()
	return w, nil
}
