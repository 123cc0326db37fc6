package filestore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// Multi-process tests re-execute the test binary as a child process: the
// environment variable childEnv selects the child's role, and TestMain
// runs it instead of the tests. Children print one line per event on
// stdout.
const (
	childEnv    = "FILESTORE_TEST_CHILD"
	childDir    = "FILESTORE_TEST_DIR"
	childKey    = "FILESTORE_TEST_KEY"
	childStart  = "FILESTORE_TEST_START" // unix nanoseconds to wait for
	childNoSync = "FILESTORE_TEST_NOSYNC"
)

func runChild(role string) int {
	if role == "hold-locks" {
		// Hold the record lock files named in childKey (comma-separated;
		// "all": every stripe) exclusively, as a process stopped in the
		// middle of a SubmitBatch would, until killed. No Store: its Open
		// would make the repairs the test leaves to others.
		if err := holdLocks(os.Getenv(childDir), os.Getenv(childKey)); err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
		}
		return 1
	}
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(childDir), &Options{RecoverInterval: 100 * time.Millisecond, NoSync: os.Getenv(childNoSync) != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	if start, _ := strconv.ParseInt(os.Getenv(childStart), 10, 64); start > 0 {
		time.Sleep(time.Until(time.Unix(0, start)))
	}
	worker := "child-" + strconv.Itoa(os.Getpid())
	if err := childRole(ctx, s, role, worker); err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 1
	}
	return 0
}

func childRole(ctx context.Context, s *Store, role, worker string) error {
	switch role {
	case "submit-key":
		j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "race", Key: os.Getenv(childKey)})
		if err != nil {
			return err
		}
		fmt.Printf("submitted %s %v\n", j.ID, created)
	case "submit-batch":
		// batchKeys keyed specs, in an order this child's number picks, and
		// as many without keys.
		n, err := strconv.Atoi(os.Getenv(childKey))
		if err != nil {
			return err
		}
		var specs []jobstore.Spec
		for i := range batchKeys {
			specs = append(specs, jobstore.Spec{Kind: "batch", Key: fmt.Sprintf("batch-%d", (i*(2*n+1))%batchKeys)}, jobstore.Spec{Kind: "batch"})
		}
		out, err := s.SubmitBatch(ctx, specs)
		if err != nil {
			return err
		}
		for _, r := range out {
			fmt.Printf("submitted %s %v %s\n", r.Job.ID, r.Created, r.Job.Key)
		}
	case "claim-all":
		// Claim and complete until no job has appeared for a while.
		idle := 0
		for idle < 3 {
			j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
			if errors.Is(err, jobstore.ErrNoJob) {
				wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				if s.AwaitWork(wctx) != nil {
					idle++
				}
				cancel()
				continue
			}
			if err != nil {
				return err
			}
			idle = 0
			fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
			if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
				return err
			}
		}
	case "claim-hold":
		// Claim one job and hold it until killed.
		j, err := claimOne(ctx, s, worker)
		if err != nil {
			return err
		}
		fmt.Printf("claimed %s\n", j.ID)
		select {}
	case "prune":
		n, err := s.Prune(ctx, 0)
		if err != nil {
			return err
		}
		fmt.Printf("pruned %d\n", n)
	case "hold-lease-file":
		// Claim a job and hand a copy of its lease to a process of its own
		// that outlives this one, as execjob's supervisor does.
		j, err := claimOne(ctx, s, worker)
		if err != nil {
			return err
		}
		f, err := s.LeaseFile(ctx, j.Lease())
		if err != nil {
			return err
		}
		holder := exec.Command("sleep", "300")
		holder.ExtraFiles = []*os.File{f}
		holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := holder.Start(); err != nil {
			return err
		}
		_ = f.Close()
		fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
		fmt.Printf("holder %d\n", holder.Process.Pid)
		if os.Getenv(childKey) == "complete" {
			if _, err := s.Complete(ctx, j.Lease(), jobstore.Outcome{Error: "done with it"}); err != nil {
				return err
			}
			fmt.Println("completed")
		}
		select {} // until killed
	case "hold", "watch-cancel", "complete-later":
		j, err := claimOne(ctx, s, worker)
		if err != nil {
			return err
		}
		fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
		switch role {
		case "hold":
			select {} // until killed
		case "watch-cancel":
			if err := s.WatchCancel(ctx, j.Lease()); err != nil {
				return err
			}
			fmt.Printf("canceled %d\n", time.Now().UnixNano())
			_, err = s.Complete(ctx, j.Lease(), jobstore.Failed(context.Canceled))
			return err
		case "complete-later":
			time.Sleep(200 * time.Millisecond)
			if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
				return err
			}
			fmt.Printf("completed %d\n", time.Now().UnixNano())
		}
	case "runner":
		return runDrain(ctx, s, worker)
	case "cycle":
		return cycleChild(ctx, s, worker)
	case "claim-once":
		// One Claim, with no waiting for work; a job claimed is completed.
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		if errors.Is(err, jobstore.ErrNoJob) {
			fmt.Println("nojob")
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			return err
		}
		fmt.Printf("claimed %s\n", j.ID)

	default:
		return fmt.Errorf("unknown role %q", role)
	}
	return nil
}

// holdLocks locks the record lock files names lists, prints "locked" and
// blocks.
func holdLocks(dir, names string) error {
	var paths []string
	if names == "all" {
		for n := range lockStripes {
			paths = append(paths, filepath.Join(dir, dirLocks, fmt.Sprintf("rec-%03x%s", n, recordLock)))
		}
	} else {
		for _, name := range strings.Split(names, ",") {
			paths = append(paths, filepath.Join(dir, dirLocks, name))
		}
	}
	for _, p := range paths {
		fl := flock.New(p, flock.SetFlag(os.O_RDONLY|os.O_CREATE))
		if err := fl.Lock(); err != nil {
			return err
		}
	}
	fmt.Println("locked")
	select {} // until killed
}

// claimOne claims a job, waiting for one to appear.
func claimOne(ctx context.Context, s *Store, worker string) (jobstore.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		if !errors.Is(err, jobstore.ErrNoJob) {
			return j, err
		}
		if err := s.AwaitWork(ctx); err != nil {
			return j, err
		}
	}
}

// child is a running child process and its output lines.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

// startChild starts the test binary as a child in role on the store dir.
func startChild(t *testing.T, dir, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, childDir+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = &prefixWriter{t: t, prefix: role}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// next returns the child's next output line, failing the test if none
// comes in time.
func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		require.True(t, ok, "child exited without output")
		return l
	case <-time.After(60 * time.Second):
		t.Fatal("no output from child")
		return ""
	}
}

// all returns every output line and requires the child to exit cleanly.
func (c *child) all(t *testing.T) []string {
	t.Helper()
	var out []string
	for l := range c.lines {
		out = append(out, l)
	}
	select {
	case err := <-c.done:
		c.done <- err
		require.NoError(t, err, "child failed")
	case <-time.After(60 * time.Second):
		t.Fatal("child did not exit")
	}
	return out
}

type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Logf("child %s: %s", w.prefix, l)
	}
	return len(p), nil
}

// runDrain runs a runner that prints each job it runs, until no job is
// queued or running.
func runDrain(ctx context.Context, s *Store, worker string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	r := runner.New(s, &runner.Options{Concurrency: 4, Worker: worker})
	r.Handle("drain", runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		mu.Lock()
		fmt.Printf("ran %s %d\n", j.ID, j.Attempt)
		mu.Unlock()
		return nil, nil
	}))
	go func() {
		for ctx.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			page, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued, jobstore.StateRunning}, Limit: 1})
			if err == nil && len(page.Jobs) == 0 {
				cancel()
			}
		}
	}()
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
