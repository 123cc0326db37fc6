package filestore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// fullFS is a file system that fills up when told: while full is set,
// every operation that needs space fails with ENOSPC, as on a full disk.
// Removals and fsyncs still work.
type fullFS struct {
	fileOps
	full atomic.Bool
}

func (f *fullFS) check(op string) error {
	if f.full.Load() {
		return &os.PathError{Op: op, Path: "(full disk)", Err: syscall.ENOSPC}
	}
	return nil
}

func (f *fullFS) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	if err := f.check("write"); err != nil {
		return err
	}
	return f.fileOps.WriteFile(path, tmpDir, data, perm, sync)
}

func (f *fullFS) WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error) {
	if err := f.check("write"); err != nil {
		return "", err
	}
	return f.fileOps.WriteTemp(tmpDir, data, perm, sync)
}

func (f *fullFS) WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error) {
	if err := f.check("write"); err != nil {
		return nil, err
	}
	return f.fileOps.WriteNew(path, tmpDir, data, perm)
}

func (f *fullFS) PlaceNew(nf *newFile) error {
	if err := f.check("link"); err != nil {
		f.fileOps.DropNew(nf)
		return err
	}
	return f.fileOps.PlaceNew(nf)
}

func (f *fullFS) Link(o, n string) error {
	if err := f.check("link"); err != nil {
		return err
	}
	return f.fileOps.Link(o, n)
}

func (f *fullFS) Rename(o, n string) error {
	if err := f.check("rename"); err != nil {
		return err
	}
	return f.fileOps.Rename(o, n)
}

func (f *fullFS) Overwrite(p string, data []byte) error {
	if err := f.check("write"); err != nil {
		return err
	}
	return f.fileOps.Overwrite(p, data)
}

func (f *fullFS) Mkdir(d string, perm os.FileMode) error {
	if err := f.check("mkdir"); err != nil {
		return err
	}
	return f.fileOps.Mkdir(d, perm)
}

// logBuffer collects log lines, safe for concurrent use.
type logBuffer struct {
	mu    sync.Mutex
	lines []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, p...)
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.lines)
}

// TestDroppedOutcomeReleasesLease: a worker whose disk is full cannot
// record its outcome (Complete fails until CompleteTimeout) nor give the
// attempt back (Release fails too). The runner drops the outcome and says
// so, and the store lets the lease go all the same: another store's
// recovery takes the job over within its usual time while the worker
// lives on, and Wait returns. Both stores share only the directory and the
// flock(2) locks, as two processes do.
func TestDroppedOutcomeReleasesLease(t *testing.T) {
	dir := t.TempDir()
	full := &fullFS{fileOps: osFS{}}
	worker := openAtFS(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond}, full)
	other := openAt(t, dir, &Options{NoSync: true, RecoverInterval: 50 * time.Millisecond})

	logs := &logBuffer{}
	ran := make(chan jobstore.Job, 1)
	r := runner.New(worker, &runner.Options{
		CompleteTimeout: 300 * time.Millisecond, ShutdownGrace: -1,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	r.Handle("work", runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		full.full.Store(true) // the disk fills up while the job runs
		ran <- j
		return json.RawMessage(`"done"`), nil
	}))
	ctx, stop := context.WithCancel(t.Context())
	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(ctx) }()
	defer func() {
		stop()
		require.NoError(t, <-runErr)
	}()

	j, _, err := other.Submit(t.Context(), jobstore.Spec{Kind: "work", MaxAttempts: 1})
	require.NoError(t, err)
	c := <-ran
	require.Equal(t, j.ID, c.ID)

	wctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got, err := other.Wait(wctx, j.ID)
	require.NoError(t, err, "the job stayed running while its worker lives")
	require.Equal(t, jobstore.StateFailed, got.State)
	require.Equal(t, jobstore.EndWorkerLost, got.History[len(got.History)-1].End)
	require.Contains(t, logs.String(), "outcome dropped: complete failed")
	require.Contains(t, logs.String(), "could not give the job back")
	select {
	case err := <-runErr:
		t.Fatalf("the worker stopped: %v", err)
	default:
	}
	full.full.Store(false)
}

// TestReleasedJobClaimedByWaitingProcess: a job that a worker gives back
// with Release is claimed by another process waiting for work with Claim
// and AwaitWork alone (no NextRunAt, no poll: its PollInterval is an
// hour), round after round. The waiting process sees the job appear in
// queued/ before the releasing process lets its lease go, so its first
// Claim may skip the job as busy; its AwaitWork must then return soon to
// claim again, not wait for a poll.
func TestReleasedJobClaimedByWaitingProcess(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{PollInterval: time.Hour})
	ctx := t.Context()
	c := startChild(t, dir, "claim-on-go", childPoll+"=1h")
	feed := c.Stdin()
	t.Cleanup(func() { _ = feed.Close() })
	for range 20 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", MaxAttempts: 3})
		require.NoError(t, err)
		held, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "releaser"})
		require.NoError(t, err)
		require.Equal(t, j.ID, held.ID)
		_, err = io.WriteString(feed, "go\n")
		require.NoError(t, err)
		require.Equal(t, "waiting", c.Next(t), "the job is held here: the child waits for work")
		require.NoError(t, s.Release(ctx, held.Lease()))
		require.Equal(t, fmt.Sprintf("claimed %s 2", j.ID), c.Next(t), "the released job was not claimed by the waiting process")
	}
}
