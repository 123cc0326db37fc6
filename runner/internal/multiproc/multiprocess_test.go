package multiproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// TestMultiProcess runs runners in two child processes that share one
// filestore directory, and checks from the parent what a handler relies on:
// every job runs exactly once, a cancel from another process reaches the
// handler's ctx with ErrCanceled, and SIGTERM lets a running handler finish
// before the worker exits.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	storeDir, marks := filepath.Join(dir, "store"), filepath.Join(dir, "marks")
	require.NoError(t, os.Mkdir(marks, 0o700))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := filestore.Open(ctx, storeDir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()

	var children []*testproc.Proc
	for range 2 {
		children = append(children, testproc.Start(t, "worker", &testproc.Options{Args: []string{dir}}))
	}

	// Every job runs exactly once.
	const jobs = 100
	var ids []string
	for range jobs {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "work"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	workers := map[string]int{}
	for _, id := range ids {
		j, err := s.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State, "job %s: %s", id, j.LastError)
		require.Equal(t, 1, j.Attempt)
		workers[j.Worker]++
		runs, err := filepath.Glob(filepath.Join(marks, id+".*"))
		require.NoError(t, err)
		require.Len(t, runs, 1, "runs of job %s", id)
	}
	t.Logf("jobs per worker: %v", workers)

	// A cancel from this process ends the handler's ctx in a child.
	blocked, _, err := s.Submit(ctx, jobstore.Spec{Kind: "block", MaxAttempts: 5})
	require.NoError(t, err)
	waitRunning(ctx, t, s, blocked.ID)
	_, err = s.Cancel(ctx, blocked.ID)
	require.NoError(t, err)
	blocked, err = s.Wait(ctx, blocked.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, blocked.State)
	require.Equal(t, 1, blocked.Attempt)
	require.Contains(t, blocked.LastError, runner.ErrCanceled.Error())

	// SIGTERM: the children stop claiming, let the running handler finish
	// within the grace period, record its outcome and exit cleanly.
	slow, _, err := s.Submit(ctx, jobstore.Spec{Kind: "slow"})
	require.NoError(t, err)
	waitRunning(ctx, t, s, slow.ID)
	for _, c := range children {
		require.NoError(t, c.Signal(syscall.SIGTERM))
	}
	for _, c := range children {
		require.NoError(t, c.Wait(ctx), "child %d exit:\n%s", c.Pid(), c.Output())
	}
	slow, err = s.Get(ctx, slow.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, slow.State, slow.LastError)
	require.JSONEq(t, `"slept"`, string(slow.Result))
}

func waitRunning(ctx context.Context, t *testing.T, s jobstore.Store, id string) {
	t.Helper()
	for {
		j, err := s.Get(ctx, id)
		require.NoError(t, err)
		if j.State == jobstore.StateRunning {
			return
		}
		require.Equal(t, jobstore.StateQueued, j.State)
		select {
		case <-ctx.Done():
			require.NoError(t, ctx.Err(), "job %s never started", id)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// worker is the worker process of TestMultiProcess: it runs a runner on
// the store in args[0]/store until SIGTERM, marking each run of a "work"
// job with a file in args[0]/marks.
func worker(args []string) int {
	dir := args[0]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s, err := filestore.Open(ctx, filepath.Join(dir, "store"), &filestore.Options{NoSync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	r := runner.New(s, &runner.Options{Concurrency: 4, ShutdownGrace: time.Minute})
	r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		f, err := os.CreateTemp(filepath.Join(dir, "marks"), job.ID+".*")
		if err != nil {
			return nil, err
		}
		return nil, f.Close()
	}))
	r.Handle("block", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("stopped: %w", context.Cause(ctx))
	}))
	r.Handle("slow", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		time.Sleep(time.Second) // ignores ctx: shutdown must wait for it
		return json.RawMessage(`"slept"`), nil
	}))
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}
