package pgstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
	"github.com/jobdir/jobdir/runner"
)

// Multi-process tests re-execute the test binary as a child process, each
// with a pool of its own: the environment variable childEnv selects the
// child's role, and TestMain runs it instead of the tests. Children print
// one line per event on stdout.
const (
	childEnv    = "PGSTORE_TEST_CHILD"
	childSchema = "PGSTORE_TEST_SCHEMA"
	childKey    = "PGSTORE_TEST_KEY"
	childStart  = "PGSTORE_TEST_START" // unix nanoseconds to wait for
	childTTL    = "PGSTORE_TEST_TTL"   // Options.LeaseTTL
)

// appName is the application_name of every connection of the process with
// the given PID, so that a test can find them in pg_stat_activity.
func appName(pid int) string { return "pgstore-test-" + strconv.Itoa(pid) }

// openChildStore opens the store a child works on.
func openChildStore(ctx context.Context) (*pgstore.Store, error) {
	cfg, err := pgxpool.ParseConfig(pgtest.DSN())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = appName(os.Getpid())
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	o := &pgstore.Options{Schema: os.Getenv(childSchema), RecoverInterval: 100 * time.Millisecond}
	if ttl := os.Getenv(childTTL); ttl != "" {
		if o.LeaseTTL, err = time.ParseDuration(ttl); err != nil {
			return nil, err
		}
	}
	s, err := pgstore.Open(ctx, pool, o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func runChild(role string) int {
	ctx := context.Background()
	s, err := openChildStore(ctx)
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

func childRole(ctx context.Context, s *pgstore.Store, role, worker string) error {
	switch role {
	case "submit-key":
		j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "race", Key: os.Getenv(childKey)})
		if err != nil {
			return err
		}
		fmt.Printf("submitted %s %v\n", j.ID, created)
	case "submit-batch":
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
	case "hold", "watch-cancel", "complete-later", "watch-lease":
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
		case "watch-lease":
			// Until the lease is lost: say how, then try to complete.
			err := s.WatchCancel(ctx, j.Lease())
			fmt.Printf("watch %d %s\n", time.Now().UnixNano(), errClass(err))
			_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(json.RawMessage(`"stale"`)))
			fmt.Printf("complete %s\n", errClass(err))
		}
	case "append-log":
		// childKey is "<job ID> <line>".
		id, line, _ := strings.Cut(os.Getenv(childKey), " ")
		a, err := s.Logs().Append(ctx, id)
		if err != nil {
			return err
		}
		if _, err := a.Write([]byte(line + "\n")); err != nil {
			return err
		}
		if err := a.Close(); err != nil {
			return err
		}
		fmt.Println("appended")
	case "runner":
		return runDrain(ctx, s, worker)
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	return nil
}

// errClass names an error for a child's output.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, pgstore.ErrLeaseLost) && errors.Is(err, jobstore.ErrNotHeld):
		return "lease-lost"
	case errors.Is(err, jobstore.ErrNotHeld):
		return "not-held"
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

// claimOne claims a job, waiting for one to appear.
func claimOne(ctx context.Context, s jobstore.Store, worker string) (jobstore.Job, error) {
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

// runDrain runs a runner that prints each job it runs, until no job is
// queued or running.
func runDrain(ctx context.Context, s jobstore.Store, worker string) error {
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

// child is a running child process and its output lines.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

// startChild starts the test binary as a child in role on the schema.
func startChild(t *testing.T, schema, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, childSchema+"="+schema)
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
