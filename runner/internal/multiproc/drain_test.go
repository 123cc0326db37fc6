package multiproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// TestProcessesRunnersDrain: two processes running the runner drain a
// backlog of 5,000 jobs with no job run twice.
func TestProcessesRunnersDrain(t *testing.T) {
	t.Parallel()
	n := 5000
	if testing.Short() {
		n = 300
	}
	dir := t.TempDir()
	s, err := filestore.Open(t.Context(), dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		requireConsistent(t, dir)
	})
	for range n {
		_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "drain"})
		require.NoError(t, err)
	}
	start := time.Now()
	kids := []*testproc.Proc{
		testproc.Start(t, "drain", &testproc.Options{Args: []string{dir}}),
		testproc.Start(t, "drain", &testproc.Options{Args: []string{dir}}),
	}
	ran := map[string]int{}
	var per []int
	for _, c := range kids {
		lines := c.Lines(t)
		per = append(per, len(lines))
		for _, l := range lines {
			f := strings.Fields(l)
			require.Equal(t, "ran", f[0])
			require.Equal(t, "1", f[2], "job %s ran at attempt %s", f[1], f[2])
			ran[f[1]]++
		}
	}
	t.Logf("%d jobs drained by two runner processes in %v (%v each)", n, time.Since(start), per)
	require.Len(t, ran, n)
	for id, k := range ran {
		require.Equal(t, 1, k, "job %s ran %d times", id, k)
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, n, st.Counts[jobstore.StateSucceeded])
}

// requireConsistent reopens the store in dir (which repairs what a crash
// leaves) and requires Fsck to find nothing else wrong.
func requireConsistent(t *testing.T, dir string) {
	t.Helper()
	s, err := filestore.Open(context.Background(), dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Fsck(context.Background(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "fsck: %v", r.Problems)
}

// drain is the worker process of TestProcessesRunnersDrain: it runs a
// runner on the store in args[0] that prints each job it runs, until no
// job is queued or running.
func drain(args []string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := filestore.Open(ctx, args[0], &filestore.Options{RecoverInterval: 100 * time.Millisecond, NoSync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	var mu sync.Mutex
	r := runner.New(s, &runner.Options{Concurrency: 4, Worker: "child-" + strconv.Itoa(os.Getpid())})
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
		fmt.Fprintln(os.Stderr, "drain:", err)
		return 1
	}
	return 0
}
