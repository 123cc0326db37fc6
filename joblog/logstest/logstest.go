// Package logstest is the conformance suite of joblog.Logs: every place
// that keeps job logs runs it, so the behaviour is specified once.
package logstest

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
)

// eventually bounds how long a reader may wait for what an Appender wrote
// to be readable while it is still open.
const eventually = 10 * time.Second

// Run checks logs. newJob returns the ID of a job whose log is empty (a
// job the store behind logs holds, if it needs one).
func Run(t *testing.T, logs joblog.Logs, newJob func(t *testing.T) string) {
	t.Run("Empty", func(t *testing.T) {
		id := newJob(t)
		n, err := logs.Size(t.Context(), id)
		require.NoError(t, err)
		require.Zero(t, n)
		var b bytes.Buffer
		n, err = logs.CopyFrom(t.Context(), &b, id, 0)
		require.NoError(t, err)
		require.Zero(t, n)
	})
	t.Run("AppendsAndReadsFromAnyOffset", func(t *testing.T) {
		id := newJob(t)
		a := open(t, logs, id)
		require.Zero(t, a.Size())
		require.True(t, a.AtLineStart())
		write(t, a, "abc")
		require.NoError(t, a.Close())

		a = open(t, logs, id)
		require.EqualValues(t, 3, a.Size())
		require.False(t, a.AtLineStart(), "the log ends without a newline")
		write(t, a, "\nxyz\n")
		require.NoError(t, a.Close())
		a = open(t, logs, id)
		require.True(t, a.AtLineStart())
		require.NoError(t, a.Close())

		for off, want := range map[int64]string{0: "abc\nxyz\n", 2: "c\nxyz\n", 4: "xyz\n", 8: ""} {
			require.Equal(t, want, read(t, logs, id, off), "from %d", off)
		}
		n, err := logs.Size(t.Context(), id)
		require.NoError(t, err)
		require.EqualValues(t, 8, n)
	})
	t.Run("LargeOutput", func(t *testing.T) {
		id := newJob(t)
		a := open(t, logs, id)
		var all strings.Builder
		for i := range 3000 {
			line := strings.Repeat(string(rune('a'+i%26)), i%97) + "\n"
			all.WriteString(line)
			write(t, a, line)
		}
		require.NoError(t, a.Close())
		want := all.String()
		require.Equal(t, want, read(t, logs, id, 0))
		for _, off := range []int64{1, 4095, 65535, 65536, 65537, int64(len(want)) - 1} {
			require.Equal(t, want[off:], read(t, logs, id, off), "from %d", off)
		}
	})
	t.Run("ReadableWhileOpen", func(t *testing.T) {
		id := newJob(t)
		a := open(t, logs, id)
		defer a.Close()
		write(t, a, "first\n")
		deadline := time.Now().Add(eventually)
		for read(t, logs, id, 0) != "first\n" {
			require.True(t, time.Now().Before(deadline), "output written %s ago is not readable", eventually)
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("InvalidID", func(t *testing.T) {
		_, err := logs.Append(t.Context(), "../../etc/passwd")
		require.ErrorIs(t, err, jobstore.ErrInvalidID)
		_, err = logs.CopyFrom(t.Context(), io.Discard, "../x", 0)
		require.ErrorIs(t, err, jobstore.ErrInvalidID)
		_, err = logs.Size(t.Context(), "")
		require.ErrorIs(t, err, jobstore.ErrInvalidID)
	})
}

func open(t *testing.T, logs joblog.Logs, id string) joblog.Appender {
	t.Helper()
	a, err := logs.Append(t.Context(), id)
	require.NoError(t, err)
	return a
}

func write(t *testing.T, a joblog.Appender, s string) {
	t.Helper()
	n, err := a.Write([]byte(s))
	require.NoError(t, err)
	require.Equal(t, len(s), n)
}

func read(t *testing.T, logs joblog.Logs, id string, off int64) string {
	t.Helper()
	var b bytes.Buffer
	n, err := logs.CopyFrom(t.Context(), &b, id, off)
	require.NoError(t, err)
	require.EqualValues(t, b.Len(), n)
	return b.String()
}
