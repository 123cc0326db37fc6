package pgstore_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
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
