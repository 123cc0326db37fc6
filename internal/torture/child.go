package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// envChild is the environment variable that tells a re-executed binary it is
// a torture child, and which one: it holds the child's spec as JSON.
const envChild = "JOBDIR_TORTURE_CHILD"

// Roles a child can play.
const (
	roleWorker    = "worker"
	roleSubmitter = "submitter"
	roleCanceller = "canceller"
	roleWaiter    = "waiter"
	roleLin       = "lin"
)

// childSpec is what a child is told through envChild.
type childSpec struct {
	Role        string `json:"role"`
	Index       int    `json:"index"`
	Incarnation int    `json:"incarnation"`
	// Name is unique to this incarnation; workers claim under it, so the
	// checker can tie an attempt to the process that ran it.
	Name      string `json:"name"`
	StoreDir  string `json:"store_dir"`
	RecordDir string `json:"record_dir"`
	Seed      int64  `json:"seed"`

	Concurrency    int           `json:"concurrency,omitempty"`
	Runner         bool          `json:"runner,omitempty"`
	SubmitInterval time.Duration `json:"submit_interval,omitempty"`
	Budget         int           `json:"budget,omitempty"`
	// FaultRate, when positive, runs the store with that share of its
	// file operations failing (Config.FaultRate).
	FaultRate float64 `json:"fault_rate,omitempty"`
	// Waits is how many Waits a waiter keeps going at once.
	Waits int `json:"waits,omitempty"`
	Keys  int `json:"keys,omitempty"`

	Lin     *LinConfig `json:"lin,omitempty"`
	LinOut  string     `json:"lin_out,omitempty"`
	LinFrom int        `json:"lin_from,omitempty"`

	// Exe and Args start this binary again: tree jobs' programs are it.
	Exe  string   `json:"exe,omitempty"`
	Args []string `json:"args,omitempty"`
	// Trees lets submitters send tree jobs (some workers run runner.Runner).
	Trees bool `json:"trees,omitempty"`
	// SleepMS, Shape and Level describe a tree job's program and nodes.
	SleepMS int    `json:"sleep_ms,omitempty"`
	Shape   string `json:"shape,omitempty"`
	Level   int    `json:"level,omitempty"`
}

// IsChild reports whether this process was started by Run or
// RunLinearizability as a child. A binary that starts children (by default
// the running executable) calls ChildMain first thing when it is.
func IsChild() bool {
	return os.Getenv(envChild) != ""
}

// ChildMain plays the child role described by envChild against the store b
// opens, until the role is done or the process receives SIGTERM, and returns
// the process exit code. Problems are written to standard error.
func ChildMain(b Backend) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(envChild)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "torture child: bad %s: %v\n", envChild, err)
		return 2
	}
	switch spec.Role {
	case roleProgram, roleNode:
		// A tree job's processes: no store, and the default reaction to
		// signals.
		run := runProgram
		if spec.Role == roleNode {
			run = runNode
		}
		if err := run(spec); err != nil {
			fmt.Fprintf(os.Stderr, "torture %s: %v\n", spec.Role, err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	signalReady()
	if err := runChild(ctx, b, spec); err != nil {
		fmt.Fprintf(os.Stderr, "torture child %s: %v\n", spec.Name, err)
		return 1
	}
	return 0
}

// envReadyFD names the descriptor on which a child tells the driver that it
// handles SIGTERM from now on.
const envReadyFD = "JOBDIR_TORTURE_READY_FD"

// signalReady tells the driver that SIGTERM is handled, and closes the
// descriptor so that no process this child starts inherits it.
func signalReady() {
	fd, err := strconv.Atoi(os.Getenv(envReadyFD))
	_ = os.Unsetenv(envReadyFD)
	if err != nil || fd < 3 {
		return
	}
	f := os.NewFile(uintptr(fd), "ready")
	_, _ = f.Write([]byte{1})
	_ = f.Close()
}

func runChild(ctx context.Context, b Backend, spec childSpec) error {
	open, transient := b.Open, b.Transient
	if spec.FaultRate > 0 && b.OpenFaulty != nil {
		inj := newInjector(spec, spec.FaultRate)
		open = func(ctx context.Context, dir string) (jobstore.Store, error) { return b.OpenFaulty(ctx, dir, inj) }
		transient = func(err error) bool { return injectedError(err) || (b.Transient != nil && b.Transient(err)) }
	}
	st, err := open(ctx, spec.StoreDir)
	for deadline := time.Now().Add(time.Minute); err != nil && transient != nil && transient(err) &&
		ctx.Err() == nil && time.Now().Before(deadline); {
		// The server may be restarting, or the disk failing.
		fmt.Fprintf(os.Stderr, "%sopen: %v\n", transientPrefix, err)
		sleep(ctx, 200*time.Millisecond)
		st, err = open(ctx, spec.StoreDir)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil // terminated while opening
		}
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	rec := &recorder{dir: spec.RecordDir, name: spec.Name, transient: transient, leaseLost: b.LeaseLost}
	if spec.Role != roleLin && !spec.Runner {
		// runner.Runner gets the store itself: timedStore would hide its
		// optional interfaces.
		l, err := openLatencyLog(spec.RecordDir, spec.Name)
		if err != nil {
			return fmt.Errorf("latency log: %w", err)
		}
		defer l.Close()
		st = timedStore{Store: st, log: l}
	}
	switch spec.Role {
	case roleWorker:
		if spec.Runner {
			return runRunnerWorker(ctx, st, rec, spec)
		}
		return runWorker(ctx, st, rec, spec)
	case roleSubmitter:
		return runSubmitter(ctx, st, rec, spec)
	case roleCanceller:
		return runCanceller(ctx, st, rec, spec)
	case roleWaiter:
		return runWaiter(ctx, st, rec, spec)
	case roleLin:
		return runLinChild(ctx, st, spec)
	}
	return fmt.Errorf("unknown role %q", spec.Role)
}

// monoNow reads CLOCK_MONOTONIC, which every process on one machine shares
// (unlike the monotonic reading inside a time.Time, which is per process).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// Record directory layout, under Config.Dir/records.
const (
	submitDir    = "submit"     // <index>.log: one line per submit and cancel
	cancelDir    = "cancel"     // <name>.log: canceller's cancels
	attemptDir   = "attempts"   // <id>.<attempt>.start / .end markers
	violationDir = "violations" // one file per violation a child saw
	outDir       = "out"        // each child's stderr
)

// recorder writes a child's records outside the store.
type recorder struct {
	dir  string
	name string
	seq  atomic.Int64
	// transient and leaseLost are Backend.Transient and Backend.LeaseLost.
	transient, leaseLost func(error) bool
}

// lostOutcome records that the outcome of attempt of job id was lost with
// the worker's lease, if err says so, and reports whether it did.
func (r *recorder) lostOutcome(id string, attempt int, err error) bool {
	if r.leaseLost == nil || !r.leaseLost(err) {
		return false
	}
	if _, merr := r.marker(markerName(id, attempt, "lost"), fmt.Sprintf("%s\t%d\t%d\n", r.name, os.Getpid(), monoNow())); merr != nil {
		r.violation("job %s attempt %d: lost marker: %v", id, attempt, merr)
	}
	return true
}

// transientPrefix starts the line a child writes to its output for each
// transient store error it retries; the driver counts them.
const transientPrefix = "transient store error; retrying: "

// isTransient reports whether err is a store error to retry.
func (r *recorder) isTransient(err error) bool {
	return err != nil && r.transient != nil && r.transient(err)
}

// transientError notes a transient error of op.
func (r *recorder) transientError(op string, err error) {
	fmt.Fprintf(os.Stderr, "%s%s: %v\n", transientPrefix, op, err)
}

// retry calls f until it returns nil or an error that is not transient, or
// ctx ends, pausing briefly after each transient error.
func (r *recorder) retry(ctx context.Context, op string, f func() error) error {
	for {
		err := f()
		if !r.isTransient(err) || ctx.Err() != nil {
			return err
		}
		r.transientError(op, err)
		sleep(ctx, 50*time.Millisecond)
	}
}

// appendLine appends line to the log at path and fsyncs it before
// returning, so a record exists before the child acts on what it records.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	// One write(2) per line: a SIGKILL leaves whole lines or none.
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// marker publishes the marker file name with content, atomically and only
// if it does not exist yet: the content goes to a temporary file that is
// then hard-linked to the name (link(2) fails with EEXIST instead of
// replacing). A SIGKILL therefore leaves the marker whole or absent.
func (r *recorder) marker(name, content string) (existed bool, err error) {
	dir := filepath.Join(r.dir, attemptDir)
	tmp := filepath.Join(dir, fmt.Sprintf(".tmp-%s-%d", r.name, r.seq.Add(1)))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	err = os.Link(tmp, filepath.Join(dir, name))
	if errors.Is(err, os.ErrExist) {
		return true, nil
	}
	return false, err
}

// violation records something the child saw that the store must never do.
func (r *recorder) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	name := fmt.Sprintf("%s-%d", r.name, r.seq.Add(1))
	if err := os.WriteFile(filepath.Join(r.dir, violationDir, name), []byte(msg+"\n"), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "violation (not recorded: %v): %s\n", err, msg)
	}
}

func makeRecordDirs(dir string) error {
	for _, d := range []string{submitDir, cancelDir, attemptDir, violationDir, outDir, treeDir, treeLogDir, latencyDir, faultDir, waitDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	return nil
}

// fields splits a tab-separated record line.
func fields(line string) []string { return strings.Split(line, "\t") }
