package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/internal/queuetest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// Multi-process tests re-execute the test binary as a child process
// (internal/testproc), each with a pool of its own, that plays one of
// the roles of childRole (testproc.MainRoles hands any name to runChild),
// on the schema childSchema names. Children
// print one line per event on stdout.
const (
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
	case "claim-starts":
		return queuetest.ClaimStarts(ctx, s, worker)
	case "limit-worker":
		return queuetest.LimitWorker(ctx, s, worker)
	case "register-worker":
		// Register as a worker and stay registered until killed.
		if _, err := s.RegisterWorker(ctx, jobstore.WorkerInfo{ID: worker, PID: os.Getpid(), Concurrency: 1}); err != nil {
			return err
		}
		fmt.Printf("registered %s\n", worker)
		select {}
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
	case "submit-and-close":
		// One submit of the kind childKey names, then Close at once (as
		// the command's submit does): the other processes must still
		// hear of it.
		var specs []jobstore.Spec
		switch os.Getenv(childKey) {
		case "submit":
			_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "wake"})
			return err
		case "batch":
			specs = []jobstore.Spec{{Kind: "wake"}, {Kind: "wake"}}
		case "keyed-batch":
			specs = []jobstore.Spec{{Kind: "wake", Key: "wake-" + worker}, {Kind: "wake"}}
		default:
			return fmt.Errorf("unknown submit %q", os.Getenv(childKey))
		}
		_, err := s.SubmitBatch(ctx, specs)
		return err
	case "submit-during-close":
		// A keyed submit that waits on a row lock (the test holds the
		// key in an open transaction), then Close while it waits: the
		// submit commits after the store closed.
		return submitDuringClose(ctx, s)
	case "claim-all":
		return workUntilIdle(ctx, s, worker, 3, func(j jobstore.Job) error {
			fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
			_, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
			return err
		})
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
	case "churn":
		return churn(ctx, s, worker)
	case "fan-in":
		return fanIn(ctx, s, worker)
	case "complete-deps":
		return completeDeps(ctx, s, worker)
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

// startChild starts the test binary as a child in role on the schema.
func startChild(t *testing.T, schema, role string, env ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, role, &testproc.Options{Env: append([]string{childSchema + "=" + schema}, env...)})
}

// workUntilIdle claims the jobs of s for worker and hands each to handle
// until idle waits in a row (of 300 ms each) found no work.
func workUntilIdle(ctx context.Context, s *pgstore.Store, worker string, idle int, handle func(jobstore.Job) error) error {
	for waits := 0; waits < idle; {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		if errors.Is(err, jobstore.ErrNoJob) {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if s.AwaitWork(wctx) != nil {
				waits++
			}
			cancel()
			continue
		}
		if err != nil {
			return err
		}
		waits = 0
		if err := handle(j); err != nil {
			return err
		}
	}
	return nil
}
