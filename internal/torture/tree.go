package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// Jobs of class tree are run by runner workers through execjob: the
// program is this binary in the role program, which starts a tree of
// processes of every shape a real job makes (a child in its process group,
// a child that called setsid, a daemon that double-forked, a chain three
// levels deep, each this binary in the role node, sleeping until killed),
// then works for the task's time and exits, leaving the tree behind for
// execjob to kill. Every process of attempt n of job id holds a shared
// flock on trees/<id>.<n>.lock, inherited as descriptor 3. When an attempt
// starts, its worker takes each earlier attempt's lock exclusively without
// waiting: if any process of an earlier attempt still runs, that fails,
// and it is a violation (a survivor). The program also checks that no later
// attempt had started before it took its lock, and once every worker has
// stopped, every lock must be free.

// Roles of the processes of a tree job.
const (
	roleProgram = "program"
	roleNode    = "node"
)

// treeDir holds the tree jobs' lock files and logs, under the records.
const (
	treeDir    = "trees"
	treeLogDir = "treelogs"
)

func treeLock(recDir, id string, attempt int) string {
	return filepath.Join(recDir, treeDir, fmt.Sprintf("%s.%d.lock", id, attempt))
}

// lockHeld reports whether any process holds the lock file at path.
func lockHeld(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// handleTree is the runner worker's handler for a tree job: it checks that
// no process of an earlier attempt survives, then runs the program through
// execjob.
func handleTree(ctx context.Context, rec *recorder, spec childSpec, j jobstore.Job) (jobstore.Outcome, string) {
	var t task
	if err := json.Unmarshal(j.Payload, &t); err != nil {
		return jobstore.Outcome{Error: "bad payload: " + err.Error(), Permanent: true}, outcomeFailed
	}
	for n := 1; n < j.Attempt; n++ {
		held, err := lockHeld(treeLock(rec.dir, j.ID, n))
		if err != nil {
			return jobstore.Outcome{Error: "tree check: " + err.Error(), RetryAfter: retryAfter}, outcomeFailed
		}
		if held {
			rec.violation("job %s attempt %d started while a process of attempt %d still ran (a survivor of the tree)", j.ID, j.Attempt, n)
		}
	}
	prog := spec
	prog.Role, prog.Name = roleProgram, fmt.Sprintf("%s-%s.%d", roleProgram, j.ID, j.Attempt)
	prog.SleepMS = t.SleepMS
	js, err := json.Marshal(prog)
	if err != nil {
		return jobstore.Outcome{Error: err.Error(), Permanent: true}, outcomeFailed
	}
	p := execjob.Payload{
		Argv: append([]string{spec.Exe}, spec.Args...),
		Dir:  "/",
		Env:  []string{envChild + "=" + string(js), "GORACE=atexit_sleep_ms=0"},
	}
	ej := j
	ej.Kind = execjob.Kind
	if ej.Payload, err = json.Marshal(p); err != nil {
		return jobstore.Outcome{Error: err.Error(), Permanent: true}, outcomeFailed
	}
	h := execjob.Handler{LogDir: filepath.Join(rec.dir, treeLogDir), MaxLogBytes: 64 << 10, KillGrace: 200 * time.Millisecond}
	_, err = h.Work(ctx, ej)
	if err == nil {
		return jobstore.Succeeded(json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, j.Attempt))), outcomeOK
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		label := outcomeCanceled
		if errors.Is(cause, errTimeout) || errors.Is(cause, runner.ErrTimeout) {
			label = outcomeTimeout
		}
		return jobstore.Outcome{Error: err.Error(), RetryAfter: retryAfter}, label
	}
	return jobstore.Outcome{Error: err.Error(), RetryAfter: retryAfter}, outcomeFailed
}

// runProgram is a tree job's program.
func runProgram(spec childSpec) error {
	id := os.Getenv(execjob.EnvJobID)
	attempt, err := strconv.Atoi(os.Getenv(execjob.EnvAttempt))
	if err != nil {
		return fmt.Errorf("%s: %w", execjob.EnvAttempt, err)
	}
	rec := &recorder{dir: spec.RecordDir, name: spec.Name}
	lock, err := os.OpenFile(treeLock(spec.RecordDir, id, attempt), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		return err
	}
	// With its lock held, a later attempt can see this one; if a later
	// attempt started before, this process outlived its attempt.
	ents, err := os.ReadDir(filepath.Join(spec.RecordDir, attemptDir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), id+".")
		if !ok || !strings.HasSuffix(rest, ".start") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(rest, ".start")); err == nil && n > attempt {
			rec.violation("job %s attempt %d: its program started after attempt %d had", id, attempt, n)
		}
	}
	for _, shape := range []string{"group", "setsid", "double-fork", "chain"} {
		if err := startTreeNode(spec, lock, shape, 1); err != nil {
			return err
		}
	}
	time.Sleep(time.Duration(spec.SleepMS) * time.Millisecond)
	return nil
}

// startTreeNode starts a node of shape at level under the program.
func startTreeNode(spec childSpec, lock *os.File, shape string, level int) error {
	spec.Role, spec.Shape, spec.Level = roleNode, shape, level
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	cmd := exec.Command(spec.Exe, spec.Args...)
	cmd.Env = append(os.Environ(), envChild+"="+string(js))
	cmd.ExtraFiles = []*os.File{lock}
	if shape == "setsid" || shape == "double-fork" && level == 2 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	return cmd.Start()
}

// runNode is a process of a tree: it starts the next one of its shape, if
// any, and sleeps until killed (the double fork's middle process exits).
func runNode(spec childSpec) error {
	lock := os.NewFile(3, "lock")
	switch {
	case spec.Shape == "chain" && spec.Level < 3:
		if err := startTreeNode(spec, lock, spec.Shape, spec.Level+1); err != nil {
			return err
		}
	case spec.Shape == "double-fork" && spec.Level == 1:
		return startTreeNode(spec, lock, spec.Shape, 2)
	}
	select {}
}

// treeGrace is how long checkTrees lets the supervisors of the workers
// stopped last finish their work.
const treeGrace = 10 * time.Second

// checkTrees checks, once every worker has stopped, that no process of any
// tree job runs: every lock is free, within grace.
func checkTrees(r *Report, recDir string, grace time.Duration) error {
	ents, err := os.ReadDir(filepath.Join(recDir, treeDir))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(grace)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		r.TreeAttempts++
		name := strings.TrimSuffix(e.Name(), ".lock")
		if _, err := os.Stat(filepath.Join(recDir, attemptDir, name+".end")); errors.Is(err, os.ErrNotExist) {
			r.TreeAttemptsKilled++ // its worker died during it
		}
		for {
			held, err := lockHeld(filepath.Join(recDir, treeDir, e.Name()))
			if err != nil {
				return err
			}
			if !held {
				break
			}
			if time.Now().After(deadline) {
				r.violate("tree %s: a process of that attempt still runs after every worker stopped", strings.TrimSuffix(e.Name(), ".lock"))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
