package filestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/jobdir/jobdir/internal/queuetest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// Multi-process tests re-execute the test binary as a child process
// (internal/testproc) that plays a role of childRole (TestMain hands any
// name to runChild: testproc.MainRoles), named by the role, on
// the store in the directory childDir names. Children print one line per
// event on stdout.
const (
	childDir    = "FILESTORE_TEST_DIR"
	childKey    = "FILESTORE_TEST_KEY"
	childStart  = "FILESTORE_TEST_START" // unix nanoseconds to wait for
	childNoSync = "FILESTORE_TEST_NOSYNC"
	childPoll   = "FILESTORE_TEST_POLL" // Options.PollInterval
	// childLockFiles, set, makes the child's Stores keep a lock file per
	// job, as its parent's do (useLockFiles): every process of a store
	// must lock the same way.
	childLockFiles = "FILESTORE_TEST_LOCK_FILES"
	// childNoCover, set, makes the child's Store never cover its
	// submission journal on its own (Close still does).
	childNoCover = "FILESTORE_TEST_NO_COVER"
)

func runChild(role string) int {
	if os.Getenv(childLockFiles) != "" {
		lockFilesIn.Store(os.Getenv(childDir), true)
	}
	if strings.HasPrefix(role, "powercut-") {
		return powercutChild(role)
	}
	if role == "stop-inside" {
		return stopInsideChild()
	}
	if role == "share-flushes" {
		if err := shareFlushesChild(os.Getenv(childDir)); err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
		}
		return 1
	}
	if role == "hold-locks" {
		// Hold the record locks of the jobs childKey names (comma-separated;
		// "all": every job) exclusively, as a process stopped in the
		// middle of a SubmitBatch would, until killed. No Store: its Open
		// would make the repairs the test leaves to others.
		if err := holdLocks(os.Getenv(childDir), os.Getenv(childKey)); err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
		}
		return 1
	}
	ctx := context.Background()
	poll, _ := time.ParseDuration(os.Getenv(childPoll))
	opts := &Options{RecoverInterval: 100 * time.Millisecond, NoSync: os.Getenv(childNoSync) != "", PollInterval: poll}
	if os.Getenv(childNoCover) != "" {
		opts.journalCoverEvery = time.Hour
	}
	s, err := Open(ctx, os.Getenv(childDir), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	if start, _ := strconv.ParseInt(os.Getenv(childStart), 10, 64); start > 0 {
		time.Sleep(time.Until(time.Unix(0, start)))
	}
	// The PID alone would name every child that is PID 1 of its own PID
	// namespace (testproc.Options.PIDNamespace) alike.
	worker := "child-" + strconv.Itoa(os.Getpid()) + "-" + newNonce()[:8]
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
	case "journal-submit":
		// Submits one by one and a batch, through the journal, says so,
		// and waits to be killed.
		journalFromNow(s)
		for range 20 {
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "journaled"})
			if err != nil {
				return err
			}
			fmt.Printf("submitted %s\n", j.ID)
		}
		specs := make([]jobstore.Spec, 50)
		for i := range specs {
			specs[i] = jobstore.Spec{Kind: "journaled"}
		}
		out, err := s.SubmitBatch(ctx, specs)
		if err != nil {
			return err
		}
		for _, r := range out {
			fmt.Printf("submitted %s\n", r.Job.ID)
		}
		if s.jr == nil {
			return errors.New("no journal")
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "claim-all":
		// Claim and complete until no job has appeared for a while; with
		// the key "batch", up to 7 jobs at a time with ClaimBatch.
		idle := 0
		for idle < 3 {
			var jobs []jobstore.Job
			var err error
			if os.Getenv(childKey) == "batch" {
				jobs, err = s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: worker}, 7)
			} else {
				var j jobstore.Job
				j, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
				jobs = []jobstore.Job{j}
			}
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
			for _, j := range jobs {
				fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
				if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
					return err
				}
			}
		}
	case "claim-starts":
		return queuetest.ClaimStarts(ctx, s, worker)
	case "pause-queues":
		// Pause ten queues named for this child's number (childKey).
		for i := range 10 {
			if err := s.PauseQueue(ctx, fmt.Sprintf("c%s-q%d", os.Getenv(childKey), i)); err != nil {
				return err
			}
		}
	case "limit-worker":
		return queuetest.LimitWorker(ctx, s, worker)
	case "register-worker":
		// Register as a worker (named by childKey, if set) and stay
		// registered until killed.
		if id := os.Getenv(childKey); id != "" {
			worker = id
		}
		if _, err := s.RegisterWorker(ctx, jobstore.WorkerInfo{ID: worker, PID: os.Getpid(), Concurrency: 1, Kinds: []string{"k"}}); err != nil {
			return err
		}
		fmt.Printf("registered %s\n", worker)
		select {}
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
	case "claim-close":
		// Claim one job, then close the Store (which releases its lease
		// and leaves the job in claimed/) at the first line on stdin, and
		// say so; the process lives on until killed.
		j, err := claimOne(ctx, s, worker)
		if err != nil {
			return err
		}
		fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
		if !bufio.NewScanner(os.Stdin).Scan() {
			return errors.New("stdin closed")
		}
		if err := s.Close(); err != nil {
			return err
		}
		fmt.Println("closed")
		select {}
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
	case "cycle":
		return cycleChild(ctx, s, worker)
	case "claim-on-go":
		// For each line on stdin, claim one job, waiting for work with
		// AwaitWork (saying "waiting" before the first wait) and never
		// reading NextRunAt, then complete it.
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			said := false
			for {
				j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
				if err == nil {
					if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
						return err
					}
					fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
					break
				}
				if !errors.Is(err, jobstore.ErrNoJob) {
					return err
				}
				if !said {
					fmt.Println("waiting")
					said = true
				}
				if err := s.AwaitWork(ctx); err != nil {
					return err
				}
			}
		}
	case "list-exact":
		// For each line "<jobs> <probes> <id>" on stdin: List the jobs of
		// kind probeKind and take Stats (Stats first on every other
		// line), then say "ok" if the listing held probes jobs, <id>
		// among them, and Stats counted jobs jobs, of which probes of
		// kind probeKind; else what was wrong.
		in := bufio.NewScanner(os.Stdin)
		for line := 0; in.Scan(); line++ {
			var jobs, probes int
			var id string
			if _, err := fmt.Sscan(in.Text(), &jobs, &probes, &id); err != nil {
				return fmt.Errorf("line %q: %w", in.Text(), err)
			}
			fmt.Println(checkListing(ctx, s, jobs, probes, id, line%2 == 1))
		}
	case "temp-name":
		// Write a temp file in the directory childKey names and print its
		// name.
		name, err := osFS{}.WriteTemp(os.Getenv(childKey), nil, 0o600, false)
		if err != nil {
			return err
		}
		fmt.Println(filepath.Base(name))
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
	var ids []string
	if names == "all" {
		for _, d := range stateDirs {
			ents, err := os.ReadDir(filepath.Join(dir, d))
			if err != nil {
				return err
			}
			for _, e := range ents {
				if id, ok := idFromName(e.Name()); ok {
					ids = append(ids, id)
				}
			}
		}
	} else {
		ids = strings.Split(names, ",")
	}
	var r *rangeLocks
	if _, files := lockFilesIn.Load(dir); !files {
		r = openRangeLocks(filepath.Join(dir, dirLocks, recordLocksName), 0o600)
	}
	for _, id := range ids {
		if r != nil {
			if _, ok, err := r.lock(context.Background(), rangeOffset(id), true, false); err != nil || !ok {
				return fmt.Errorf("lock job %s: held elsewhere (%v)", id, err)
			}
			continue
		}
		fl := flock.New(filepath.Join(dir, dirLocks, id+recordLock), flock.SetFlag(os.O_RDONLY|os.O_CREATE))
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

// startChild starts the test binary as a child in role on the store dir.
func startChild(t *testing.T, dir, role string, env ...string) *testproc.Proc {
	t.Helper()
	if abs, err := filepath.Abs(dir); err == nil {
		if _, files := lockFilesIn.Load(abs); files {
			env = append(env, childLockFiles+"=1")
		}
	}
	return testproc.Start(t, role, &testproc.Options{Env: append([]string{childDir + "=" + dir}, env...)})
}
