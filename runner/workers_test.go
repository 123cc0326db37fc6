package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

func noop(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil }

// TestRunListsTheWorker: while Run runs, the store lists the runner as a
// live worker, with its name, process, kinds, concurrency and version;
// once Run returns it is gone.
func TestRunListsTheWorker(t *testing.T) {
	s := newStore(t, nil)
	r := runner.New(s, &runner.Options{Worker: "w1", Concurrency: 3, Version: "v9", PollInterval: 10 * time.Millisecond})
	r.Handle("b", runner.HandlerFunc(noop))
	r.Handle("a", runner.HandlerFunc(noop))
	stop := start(t, r)
	var ws []jobstore.WorkerInfo
	require.Eventually(t, func() bool {
		var err error
		ws, err = s.Workers(t.Context())
		require.NoError(t, err)
		return len(ws) == 1
	}, 5*time.Second, 5*time.Millisecond, "the running runner is not listed")
	w := ws[0]
	require.Equal(t, "w1", w.ID)
	require.Equal(t, os.Getpid(), w.PID)
	require.Equal(t, []string{"a", "b"}, w.Kinds)
	require.Equal(t, 3, w.Concurrency)
	require.Equal(t, "v9", w.Version)
	host, _ := os.Hostname()
	require.Equal(t, host, w.Host)
	require.WithinDuration(t, time.Now(), w.StartedAt, time.Minute)

	require.NoError(t, stop())
	ws, err := s.Workers(t.Context())
	require.NoError(t, err)
	require.Empty(t, ws, "a runner that returned is still listed")
}

// TestRunWithATakenNameRunsUnlisted: a runner whose worker name a live
// worker holds warns and runs its jobs all the same.
func TestRunWithATakenNameRunsUnlisted(t *testing.T) {
	s := newStore(t, nil)
	unregister, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "taken", Host: "elsewhere", Concurrency: 1})
	require.NoError(t, err)
	defer unregister()
	var logs bytes.Buffer
	r := runner.New(s, &runner.Options{Worker: "taken", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r.Handle("k", runner.HandlerFunc(noop))
	stop := start(t, r)
	j := submit(t, s, jobstore.Spec{Kind: "k"})
	require.Equal(t, jobstore.StateSucceeded, wait(t, s, j.ID).State)
	require.NoError(t, stop())
	require.Contains(t, logs.String(), "another live worker has this worker name")
	ws, err := s.Workers(t.Context())
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, "elsewhere", ws[0].Host, "the runner took over or removed the other worker's entry")
}
