//go:build linux

package execjob_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// TestWithRunner runs exec jobs through a runner: success, a failure that
// ends the job, and a cancel that stops a running program.
func TestWithRunner(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	store := memstore.New(nil)
	defer store.Close()
	logDir := t.TempDir()
	r := runner.New(store, &runner.Options{Concurrency: 4, ShutdownGrace: -1})
	r.Handle(execjob.Kind, execjob.Handler{LogDir: logDir, KillGrace: 10 * time.Second})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	submit := func(maxAttempts int, argv ...string) jobstore.Job {
		spec, err := execjob.NewSpec(execjob.Payload{Argv: argv, Dir: "/"})
		require.NoError(t, err)
		spec.MaxAttempts = maxAttempts
		j, _, err := store.Submit(ctx, spec)
		require.NoError(t, err)
		return j
	}

	ok := submit(1, "true")
	bad := submit(1, "sh", "-c", "echo broken; exit 4")
	missing := submit(3, "no-such-program-jobdir-test")
	ready := filepath.Join(t.TempDir(), "ready")
	long := submit(1, "sh", "-c", "touch "+ready+"; exec sleep 60")

	j, err := store.Wait(ctx, ok.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, j.State)
	require.JSONEq(t, `{"exit_code":0}`, string(j.Result))

	j, err = store.Wait(ctx, bad.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, j.State)
	require.Contains(t, j.LastError, "exit status 4")
	require.Contains(t, j.LastError, "broken")

	j, err = store.Wait(ctx, missing.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, j.State)
	require.Equal(t, 1, j.Attempt, "a missing program is not retried")

	waitFile(t, ready)
	start := time.Now()
	_, err = store.Cancel(ctx, long.ID)
	require.NoError(t, err)
	j, err = store.Wait(ctx, long.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, j.State)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Contains(t, j.LastError, runner.ErrCanceled.Error())

	stop()
	require.NoError(t, <-done)
}

// TestShutdownKillsTreeAndGivesAttemptBack: a worker's graceful shutdown
// stops a running program's whole tree (after the shutdown grace), and the
// attempt is given back: the job, allowed one attempt, is queued again with
// its history saying it was interrupted.
func TestShutdownKillsTreeAndGivesAttemptBack(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	store := memstore.New(nil)
	defer store.Close()
	r := runner.New(store, &runner.Options{ShutdownGrace: 50 * time.Millisecond})
	r.Handle(execjob.Kind, execjob.Handler{KillGrace: 300 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	p, dir := treePayload(t, "all", "sleep", "")
	spec, err := execjob.NewSpec(p)
	require.NoError(t, err)
	spec.MaxAttempts = 1
	j, _, err := store.Submit(ctx, spec)
	require.NoError(t, err)
	waitFor(t, filepath.Join(dir, "ready-1"), time.Minute)

	stop()
	require.NoError(t, <-done)
	requireTreeGone(t, dir, 1)
	j, err = store.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, 2, j.MaxAttempts)
	require.Equal(t, jobstore.EndInterrupted, j.History[0].End)
	require.Contains(t, j.History[0].Error, runner.ErrShutdown.Error())
}
