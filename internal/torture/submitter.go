package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Job classes a submitter sends. The class is in the payload, so the
// checker knows what each job was meant to do.
const (
	classQuick        = "quick"         // succeeds at once
	classDelayed      = "delayed"       // RunAt in the future, then succeeds
	classFlaky        = "flaky"         // fails its first attempts, then succeeds
	classDoomed       = "doomed"        // fails permanently
	classTimeout      = "timeout"       // outlives its Timeout on every attempt
	classSlow         = "slow"          // long enough to be canceled while running
	classCancelQueued = "cancel-queued" // delayed, and canceled by its submitter at once
	classTree         = "tree"          // runs a program that leaves a tree of processes (runner workers only)
)

// newSpec draws a job to submit. About a third carry a key from a space of
// keys shared by all submitters. Tree jobs are drawn only if trees is set.
func newSpec(rng *rand.Rand, keys int, trees bool) (jobstore.Spec, string) {
	var t task
	spec := jobstore.Spec{Kind: kindTorture}
	now := time.Now()
	switch p := rng.IntN(100); {
	case p < 8 && trees:
		t = task{Class: classTree, SleepMS: 50 + rng.IntN(500)}
		spec.Kind = kindTree
	case p < 38:
		t = task{Class: classQuick, SleepMS: 1 + rng.IntN(20)}
	case p < 48:
		t = task{Class: classDelayed, SleepMS: 1 + rng.IntN(20)}
		spec.RunAt = now.Add(time.Duration(200+rng.IntN(2000)) * time.Millisecond)
	case p < 60:
		t = task{Class: classFlaky, SleepMS: 5, FailAttempts: 1 + rng.IntN(2)}
		spec.MaxAttempts = 5
	case p < 65:
		t = task{Class: classDoomed, SleepMS: 5, FailAttempts: 1000, Permanent: true}
	case p < 70:
		t = task{Class: classTimeout, SleepMS: 2000}
		spec.Timeout = 40 * time.Millisecond
		spec.MaxAttempts = 2
	case p < 85:
		t = task{Class: classSlow, SleepMS: 300 + rng.IntN(900)}
	default:
		t = task{Class: classCancelQueued, SleepMS: 1}
		spec.RunAt = now.Add(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
	}
	spec.Priority = rng.IntN(3)
	if rng.IntN(3) == 0 {
		spec.Key = fmt.Sprintf("k-%d", rng.IntN(max(keys, 1)))
	}
	spec.Payload, _ = json.Marshal(t)
	return spec, t.Class
}

// Submit and cancel log lines, tab-separated:
//
//	S <id> <key> <created> <class> <submitter>
//	C <id> <state> <attempt> <cancel_requested> <canceller>
func submitLine(j jobstore.Job, key string, created bool, class, name string) string {
	return fmt.Sprintf("S\t%s\t%s\t%t\t%s\t%s", j.ID, key, created, class, name)
}

func cancelLine(j jobstore.Job, name string) string {
	return fmt.Sprintf("C\t%s\t%s\t%d\t%t\t%s", j.ID, j.State, j.Attempt, j.CancelRequested, name)
}

// runSubmitter submits jobs until ctx ends or its log holds spec.Budget
// submits (counting earlier incarnations), then idles until ctx ends.
func runSubmitter(ctx context.Context, st jobstore.Client, rec *recorder, spec childSpec) error {
	logPath := filepath.Join(rec.dir, submitDir, fmt.Sprintf("%d.log", spec.Index))
	done, err := countSubmits(logPath)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(spec.Seed), uint64(spec.Index)<<32|uint64(spec.Incarnation)))
	recent := make([]string, 0, 100) // IDs this incarnation submitted, for Get
	for ctx.Err() == nil && (spec.Budget <= 0 || done < spec.Budget) {
		var subs []jobstore.Submitted
		var specs []jobstore.Spec
		var classes []string
		if rng.IntN(batchEvery) == 0 {
			// A batch holds many record locks at once: a SIGSTOP in
			// the middle of one is the hardest on the other processes.
			for range batchMin + rng.IntN(batchMax-batchMin+1) {
				specs = append(specs, quickSpec(rng, spec.Keys))
				classes = append(classes, classQuick)
			}
			err = rec.retry(ctx, "submit batch", func() (err error) {
				subs, err = st.SubmitBatch(ctx, specs)
				return err
			})
		} else {
			s, class := newSpec(rng, spec.Keys, spec.Trees)
			specs, classes = []jobstore.Spec{s}, []string{class}
			err = rec.retry(ctx, "submit", func() error {
				j, created, err := st.Submit(ctx, s)
				subs = []jobstore.Submitted{{Job: j, Created: created}}
				return err
			})
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("submit: %w", err)
		}
		lines := make([]string, len(subs))
		for i, sub := range subs {
			lines[i] = submitLine(sub.Job, specs[i].Key, sub.Created, classes[i], spec.Name)
		}
		if err := appendLine(logPath, strings.Join(lines, "\n")); err != nil {
			return err
		}
		done += len(subs)
		if err := getRecent(ctx, st, rec, rng, recent); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i, sub := range subs {
			j := sub.Job
			if len(recent) < cap(recent) {
				recent = append(recent, j.ID)
			} else {
				recent[rng.IntN(len(recent))] = j.ID
			}
			if classes[i] != classCancelQueued {
				continue
			}
			var c jobstore.Job
			err := rec.retry(ctx, "cancel", func() (err error) {
				c, err = st.Cancel(ctx, j.ID)
				return err
			})
			switch {
			case err == nil:
				if err := appendLine(logPath, cancelLine(c, spec.Name)); err != nil {
					return err
				}
			case errors.Is(err, jobstore.ErrInvalidTransition): // a keyed job that already finished
			case ctx.Err() != nil:
				return nil
			default:
				return fmt.Errorf("cancel %s: %w", j.ID, err)
			}
		}
		sleep(ctx, jitter(rng, spec.SubmitInterval))
	}
	<-ctx.Done()
	return nil
}

// One submit in batchEvery is a SubmitBatch of batchMin to batchMax quick
// jobs.
const (
	batchEvery = 25
	batchMin   = 10
	batchMax   = 40
)

// quickSpec draws a quick job, keyed a third of the time, for a batch.
func quickSpec(rng *rand.Rand, keys int) jobstore.Spec {
	t := task{Class: classQuick, SleepMS: 1 + rng.IntN(20)}
	spec := jobstore.Spec{Kind: kindTorture, Priority: rng.IntN(3)}
	if rng.IntN(3) == 0 {
		spec.Key = fmt.Sprintf("k-%d", rng.IntN(max(keys, 1)))
	}
	spec.Payload, _ = json.Marshal(t)
	return spec
}

// getRecent reads back one of the jobs this submitter submitted, as a
// client polling its jobs does: it must exist.
func getRecent(ctx context.Context, st jobstore.Client, rec *recorder, rng *rand.Rand, recent []string) error {
	if len(recent) == 0 {
		return nil
	}
	id := recent[rng.IntN(len(recent))]
	err := rec.retry(ctx, "get", func() error {
		_, err := st.Get(ctx, id)
		return err
	})
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		rec.violation("job %s: Submit returned it, but Get does not find it: %v", id, err)
	case err != nil:
		return fmt.Errorf("get %s: %w", id, err)
	}
	return nil
}

// countSubmits counts the whole submit lines in the log at path.
func countSubmits(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(line, "S\t") && strings.HasSuffix(line, "\n") {
			n++
		}
	}
	return n, nil
}

// runCanceller cancels, from its own process, some slow jobs while they run
// and some queued jobs before they start.
func runCanceller(ctx context.Context, st jobstore.Client, rec *recorder, spec childSpec) error {
	logPath := filepath.Join(rec.dir, cancelDir, spec.Name+".log")
	rng := rand.New(rand.NewPCG(uint64(spec.Seed), 1<<40|uint64(spec.Incarnation)))
	for ctx.Err() == nil {
		for _, pick := range []struct {
			state jobstore.State
			p     float64
		}{{jobstore.StateRunning, 0.25}, {jobstore.StateQueued, 0.04}} {
			var page jobstore.Page
			err := rec.retry(ctx, "list", func() (err error) {
				page, err = st.List(ctx, jobstore.ListOptions{States: []jobstore.State{pick.state}, Limit: 200})
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("list %s: %w", pick.state, err)
			}
			for _, j := range page.Jobs {
				if rng.Float64() >= pick.p || (pick.state == jobstore.StateRunning && !isSlow(j)) {
					continue
				}
				var c jobstore.Job
				err := rec.retry(ctx, "cancel", func() (err error) {
					c, err = st.Cancel(ctx, j.ID)
					return err
				})
				switch {
				case err == nil:
					if err := appendLine(logPath, cancelLine(c, spec.Name)); err != nil {
						return err
					}
				case errors.Is(err, jobstore.ErrInvalidTransition): // finished since the listing
				case errors.Is(err, jobstore.ErrNotFound) && pick.state == jobstore.StateQueued:
					// A List may show a job whose Submit is under way
					// and then fails and takes it back; a job that a
					// Submit returned never vanishes: the final check
					// finds each of them in the store.
				case ctx.Err() != nil:
					return nil
				default:
					return fmt.Errorf("cancel %s: %w", j.ID, err)
				}
			}
		}
		sleep(ctx, jitter(rng, 150*time.Millisecond))
	}
	return nil
}

func isSlow(j jobstore.Job) bool {
	var t task
	return json.Unmarshal(j.Payload, &t) == nil && t.Class == classSlow
}

// jitter returns d spread uniformly over [d/2, 3d/2).
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rng.Int64N(int64(d)))
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
