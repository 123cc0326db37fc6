package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/joblog/logstest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

func openLogStore(t *testing.T) *pgstore.Store {
	t.Helper()
	pool := pgtest.Pool(t, 4)
	s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestLogs: the logs in the database behave as log files do
// (logstest.Run).
func TestLogs(t *testing.T) {
	s := openLogStore(t)
	logstest.Run(t, s.Logs(), func(t *testing.T) string {
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "exec"})
		require.NoError(t, err)
		return j.ID
	})
}

// TestLogsGoWithTheirJob: a log is pruned with its job, and a job that
// does not exist has no log to write to.
func TestLogsGoWithTheirJob(t *testing.T) {
	s := openLogStore(t)
	ctx := t.Context()
	logs := s.Logs()
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "exec"})
	require.NoError(t, err)
	a, err := logs.Append(ctx, j.ID)
	require.NoError(t, err)
	_, err = a.Write([]byte("output\n"))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	_, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond)
	n, err := s.Prune(ctx, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	size, err := logs.Size(ctx, j.ID)
	require.NoError(t, err)
	require.Zero(t, size, "the log went with its job")

	a, err = logs.Append(ctx, jobstore.NewID(time.Now()))
	require.NoError(t, err)
	_, _ = a.Write([]byte("nobody reads this"))
	require.ErrorIs(t, a.Close(), jobstore.ErrNotFound)
	var b bytes.Buffer
	_, err = logs.CopyFrom(ctx, &b, j.ID, 0)
	require.NoError(t, err)
	require.Empty(t, b.String())
}

// TestFollowWakesOnNotify: a follower (joblog.CopyLogs with Follow) sees a
// line that another process writes to the log by the notification its
// chunk sends, not by a poll: the follower's store polls only every hour
// (PollInterval), and so does CopyLogs (Poll). The job's end, recorded by
// another store, ends the follow with the job as it ended.
func TestFollowWakesOnNotify(t *testing.T) {
	schema := pgtest.Schema(t)
	ctx := t.Context()
	follower, err := pgstore.Open(ctx, pgtest.Pool(t, 4), &pgstore.Options{Schema: schema, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = follower.Close() })
	worker, err := pgstore.Open(ctx, pgtest.Pool(t, 4), &pgstore.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = worker.Close() })
	_, _, err = worker.Submit(ctx, jobstore.Spec{Kind: "exec"})
	require.NoError(t, err)
	j, err := worker.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)

	pr, pw := io.Pipe()
	type result struct {
		job jobstore.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		final, err := joblog.CopyLogs(ctx, pw, follower, follower.Logs(), j.ID, joblog.Options{Follow: true, Poll: time.Hour})
		pw.CloseWithError(err)
		done <- result{final, err}
	}()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the follow ended early: %v", (<-done).err)
			}
			return l
		case <-time.After(time.Minute):
			t.Fatal("the follower saw no new line: it was not woken")
			return ""
		}
	}
	// The first line may reach the follower by its first read; once it
	// has it, the follower waits, and only a wake-up brings the second.
	startChild(t, schema, "append-log", childKey+"="+j.ID+" one").Lines(t)
	require.Equal(t, "one", next())
	startChild(t, schema, "append-log", childKey+"="+j.ID+" two").Lines(t)
	require.Equal(t, "two", next())

	_, err = worker.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, jobstore.StateSucceeded, r.job.State, "the follow ends with the job")
	case <-time.After(time.Minute):
		t.Fatal("the job's end did not end the follow")
	}
	_, ok := <-lines
	require.False(t, ok, "nothing more")
}

// TestWatchLogNotFound: WatchLog of a job that does not exist fails with
// ErrNotFound.
func TestWatchLogNotFound(t *testing.T) {
	s := openLogStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := s.Logs().WatchLog(ctx, jobstore.NewID(time.Now()))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}
