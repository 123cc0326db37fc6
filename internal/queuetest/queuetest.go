// Package queuetest holds what the stores' tests of queues with real
// processes share: the loop of a child process that claims jobs and says
// when each started, and the check of a pause and a resume across
// processes (filestore's and pgstore's TestProcessesPauseAndResume).
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// Store is what the check needs of a store.
type Store interface {
	jobstore.Store
	jobstore.QueueController
}

// Claimer is what a child process needs of its store.
type Claimer interface {
	jobstore.Worker
	jobstore.WorkAwaiter
}

// ClaimStarts is the role of a child process of PauseAndResume: it
// prints "ready", then claims jobs of every queue, waiting for work between
// claims, printing "started ID QUEUE NANOS" (the job's started_at) for
// each and completing it, until it claims a job of kind "stop".
func ClaimStarts(ctx context.Context, s Claimer, worker string) error {
	fmt.Println("ready")
	for {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: worker})
		var nj *jobstore.NoJobError
		if errors.As(err, &nj) {
			if err := s.AwaitWorkSince(ctx, nj); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		fmt.Printf("started %s %s %d\n", j.ID, j.Queue, j.StartedAt.UnixNano())
		if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			return err
		}
		if j.Kind == "stop" {
			return nil
		}
	}
}

// PauseAndResume checks a pause and a resume of s with children, child
// processes that run ClaimStarts on the same store and have said "ready":
// with jobs of queue p submitted all along, no job of p starts (its
// started_at) after PauseQueue returned, while jobs of another queue go on
// starting; after ResumeQueue, the children, which wait for work, start
// p's jobs again. It logs how soon after the resume returned the first one
// started.
func PauseAndResume(t *testing.T, s Store, children []*testproc.Proc) {
	t.Helper()
	ctx := t.Context()
	submitFor := func(queue string, d time.Duration) (last jobstore.Job) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Queue: queue})
			require.NoError(t, err)
			last = j
			time.Sleep(time.Millisecond)
		}
		return last
	}
	submitFor("p", 200*time.Millisecond)
	require.NoError(t, s.PauseQueue(ctx, "p"))
	paused := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { submitFor("other", 300*time.Millisecond) })
	submitFor("p", 300*time.Millisecond)
	wg.Wait()
	resuming := time.Now()
	require.NoError(t, s.ResumeQueue(ctx, "p"))
	resumed := time.Now()
	last := submitFor("p", 50*time.Millisecond)
	_, err := s.Wait(ctx, last.ID)
	require.NoError(t, err)
	for range children {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "stop", Queue: "control"})
		require.NoError(t, err)
	}

	var before, during, after int
	first := time.Duration(-1)
	for _, c := range children {
		for _, l := range c.Lines(t) {
			f := strings.Fields(l)
			require.Len(t, f, 4, "line %q", l)
			ns, err := strconv.ParseInt(f[3], 10, 64)
			require.NoError(t, err)
			at := time.Unix(0, ns)
			switch {
			case f[2] == "other" && at.After(paused) && at.Before(resuming):
				during++
			case f[2] != "p":
			case !at.After(paused):
				before++
			default:
				require.False(t, at.Before(resuming), "job %s of the paused queue started %s after the pause returned", f[1], at.Sub(paused))
				after++
				if d := at.Sub(resumed); first < 0 || d < first {
					first = d
				}
			}
		}
	}
	t.Logf("queue p: %d jobs started before the pause, %d after the resume; the other queue: %d started during the pause; the first start %s after the resume returned",
		before, after, during, first)
	require.Positive(t, before)
	require.Positive(t, during, "the other queue ran while p was paused")
	require.Positive(t, after)
	require.Less(t, first, time.Second, "the workers started the queue's jobs again soon after the resume")
}
