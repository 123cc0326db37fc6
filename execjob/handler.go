package execjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"time"

	"github.com/jobdir/jobdir/execjob/internal/supervise"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// supported reports whether this system can run programs.
const supported = supervise.Supported

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

// Handler runs exec jobs. Its Work method is a runner.Handler; register it
// for Kind. The zero value discards output and uses the defaults below. A
// Handler is safe for concurrent use: it holds no state between calls.
type Handler struct {
	// LogDir is the directory that holds one log file per job,
	// <LogDir>/<job ID>.log, created (mode 0700, files 0600; see
	// GroupAccess) when needed. Empty means output is discarded, except the
	// tail kept for error messages.
	LogDir string
	// Logs keeps the output instead of LogDir's files when not nil: for
	// example a pgstore.Store's Logs, which every machine can read.
	Logs joblog.Logs
	// GroupAccess creates the log directory 0770 and log files 0660, for a
	// store shared by the users of one group (filestore.Options.GroupAccess).
	GroupAccess bool
	// MaxLogBytes bounds each log file; zero means DefaultMaxLogBytes. An
	// attempt whose output does not fit keeps its beginning and its end
	// (at least TailBytes of it) with a marker between them.
	MaxLogBytes int64
	// KillGrace is how long the attempt's processes have between SIGTERM
	// and SIGKILL once the job's context ends; zero means
	// DefaultKillGrace.
	KillGrace time.Duration
	// CleanEnv gives programs only CleanEnvVars of the worker's
	// environment, besides the payload's env and the job's own variables.
	// Zero: programs get the worker's environment except the variables it
	// withholds (see the package doc).
	CleanEnv bool
	// Contain chooses how attempts are contained; zero is ContainAuto.
	Contain Containment
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
	return joblog.Path(logDir, id)
}

// StartError is the error of an attempt whose program could not be started.
// It unwraps to fs.ErrNotExist for a missing directory, exec.ErrNotFound
// for a missing program, and fs.ErrPermission for one that may not be run;
// Work wraps those with runner.Permanent, since another attempt cannot
// help.
type StartError struct {
	// Program is the program as the payload names it.
	Program string
	// Reason says what is wrong in plain words, such as "directory /x does
	// not exist".
	Reason string
	err    error
}

// Error returns "cannot start PROGRAM: REASON".
func (e *StartError) Error() string {
	return fmt.Sprintf("cannot start %q: %s", e.Program, e.Reason)
}

// Unwrap returns the error that classifies the failure, if any.
func (e *StartError) Unwrap() error { return e.err }

var errUnsupported = fmt.Errorf("execjob: running programs needs Linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported)

// Work runs one attempt of job, an exec job, and returns the result
// {"exit_code":0} when its program exits with status 0. Otherwise it returns
// an *ExitError; an error wrapping context.Cause(ctx) if ctx ended and the
// program was stopped; a *StartError if it could not be started, wrapped
// by runner.Permanent when another attempt cannot help; or a
// runner.Permanent error wrapping jobstore.ErrInvalidInput for a bad
// payload.
//
// Work returns only once every process of the attempt is gone: the
// program, whatever it started, and the supervisor, which holds the
// attempt's lease (runner.LeaseFile) until then.
func (h Handler) Work(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
	if job.Kind != Kind {
		return nil, runner.Permanent(fmt.Errorf("execjob: job %s has kind %q, not %q", job.ID, job.Kind, Kind))
	}
	p, err := ParsePayload(job.Payload)
	if err != nil {
		return nil, runner.Permanent(fmt.Errorf("execjob: job %s: %w", job.ID, err))
	}
	if !supported {
		return nil, runner.Permanent(errUnsupported)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("execjob: not started: %w", context.Cause(ctx))
	}
	out, err := h.openLog(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	defer out.close()
	out.note(fmt.Sprintf("job %s attempt %d of %d on %s at %s: %q in %s",
		job.ID, job.Attempt, job.MaxAttempts, job.Worker, time.Now().UTC().Format(time.RFC3339Nano), p.Argv, p.Dir))
	start := time.Now()
	res, ex, err := h.run(ctx, job, p, out)
	out.finish()
	footer := fmt.Sprintf("attempt %d %s after %s", job.Attempt, describe(ex, err), time.Since(start).Round(time.Millisecond))
	if ex.Leftovers > 0 {
		footer += fmt.Sprintf("; killed %d processes it left running", ex.Leftovers)
	}
	out.note(footer)
	return res, err
}

func describe(ex supervise.Exit, err error) string {
	var ee *ExitError
	var se *StartError
	switch {
	case err == nil:
		return "exited with status 0"
	case errors.As(err, &ee):
		return ex.String()
	case errors.As(err, &se):
		return "did not start: " + se.Reason
	}
	return "ended: " + err.Error()
}

// run starts the program under a supervisor and waits until the attempt's
// every process is gone. The calling goroutine keeps its OS thread for the
// whole run: the supervisor's parent-death signal fires when the thread that
// started it exits, not the process (https://go.dev/issue/27505), and an
// unlocked goroutine's thread may be retired by the runtime while the
// supervisor still runs.
func (h Handler) run(ctx context.Context, job jobstore.Job, p Payload, out *logWriter) (json.RawMessage, supervise.Exit, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	spec := supervise.Spec{
		Argv:      p.Argv,
		Dir:       p.Dir,
		Env:       programEnv(os.Environ(), h.CleanEnv, p.Env, traceEnv(ctx), job.ID, job.Attempt),
		KillGrace: h.KillGrace,
		Output:    out,
		Name:      fmt.Sprintf("jobdir-supervise %s %d", job.ID, job.Attempt),
	}
	if spec.KillGrace <= 0 {
		spec.KillGrace = DefaultKillGrace
	}
	lease, err := runner.LeaseFile(ctx)
	switch {
	case err == nil:
		defer lease.Close()
		spec.Lease = lease
	case errors.Is(err, runner.ErrNoLeaseFile):
		// A store that cannot share its lease (an in-memory one) loses
		// its jobs with its process anyway.
	default:
		// Without a copy of the lease, the job could run again while
		// this attempt's processes are still being killed.
		out.note("cannot hold the job's lease for the program: " + err.Error())
		return nil, supervise.Exit{}, fmt.Errorf("execjob: not started: %w", err)
	}
	info, err := h.Containment()
	if err != nil {
		out.note(err.Error())
		return nil, supervise.Exit{}, err
	}
	if info.Cgroup != "" {
		cg, err := supervise.NewAttemptCgroup(info.Cgroup, job.ID, job.Attempt)
		if err != nil && h.Contain == ContainCgroup {
			out.note("cannot make a cgroup for this attempt: " + err.Error())
			return nil, supervise.Exit{}, fmt.Errorf("execjob: not started: no cgroup: %w", err)
		}
		spec.Cgroup = cg
	}

	a, err := supervise.Start(spec)
	if err != nil {
		return nil, supervise.Exit{}, startError(p.Argv[0], err)
	}
	if mode, note := a.Containment(); mode != supervise.ModeCgroup && h.Contain == ContainCgroup {
		a.Kill()
		_, _ = a.Wait()
		return nil, supervise.Exit{}, fmt.Errorf("execjob: not started: %s", note)
	}

	stopped := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			close(stopped)
			a.Stop()
		case <-done:
		}
	}()
	ex, err := a.Wait()
	close(done)
	if errors.Is(err, exec.ErrWaitDelay) {
		out.note("output still open after every process of the attempt was gone; stopped reading it")
		err = nil
	}
	if err != nil {
		return nil, ex, fmt.Errorf("execjob: %w", err)
	}
	select {
	case <-stopped:
		return nil, ex, fmt.Errorf("program stopped: %w (%s)", context.Cause(ctx), exitText(ex))
	default:
	}
	if ex.Code != 0 || ex.Signal != "" {
		return nil, ex, &ExitError{Code: ex.Code, Signal: ex.Signal, Tail: out.tailString()}
	}
	return json.RawMessage(`{"exit_code":0}`), ex, nil
}

// startError turns the supervisor's start failure into the attempt's
// error: a *StartError, permanent when another attempt cannot help.
func startError(program string, err error) error {
	var se *supervise.StartError
	if !errors.As(err, &se) {
		return fmt.Errorf("execjob: start %q: %w", program, err)
	}
	e := &StartError{Program: program, Reason: se.Message}
	switch se.Failure {
	case supervise.FailureDir:
		e.err = fs.ErrNotExist
	case supervise.FailureNotFound:
		e.err = exec.ErrNotFound
	case supervise.FailurePermission:
		e.err = fs.ErrPermission
	case supervise.FailureExec:
		e.err = errors.ErrUnsupported
	default:
		return e
	}
	return runner.Permanent(e)
}

func exitText(ex supervise.Exit) string {
	if ex.Signal != "" {
		return "killed by signal " + ex.Signal
	}
	return "exit status " + strconv.Itoa(ex.Code)
}

// logs returns where the handler keeps the output: Logs, else LogDir's
// files, else nil (discarded).
func (h Handler) logs() joblog.Logs {
	switch {
	case h.Logs != nil:
		return h.Logs
	case h.LogDir != "":
		return joblog.Dir{Path: h.LogDir, GroupAccess: h.GroupAccess}
	}
	return nil
}

// openLog opens the log of job id for one attempt. It is not bound to
// ctx: the attempt's last notes are written after ctx ends.
func (h Handler) openLog(ctx context.Context, id string) (*logWriter, error) {
	limit := h.MaxLogBytes
	if limit <= 0 {
		limit = DefaultMaxLogBytes
	}
	w := &logWriter{limit: limit, lineEnd: true}
	logs := h.logs()
	if logs == nil {
		return w, nil
	}
	a, err := logs.Append(context.WithoutCancel(ctx), id)
	switch {
	case errors.Is(err, errLogNotRegular):
		return nil, runner.Permanent(fmt.Errorf("execjob: refusing to write the job's output: %w; remove it and retry the job", err))
	case errors.Is(err, jobstore.ErrInvalidID):
		return nil, runner.Permanent(fmt.Errorf("execjob: %w", err))
	case err != nil:
		return nil, fmt.Errorf("execjob: open log: %w", err)
	}
	w.f = a
	room := max(limit-a.Size(), 0)
	w.keepMax = int(max(room/4, minTailKeep))
	w.head = max(room-int64(w.keepMax), 0)
	w.lineEnd = a.AtLineStart()
	return w, nil
}
