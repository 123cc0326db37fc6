package joblog_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sample is a log of two attempts: the first ended its output without a
// newline, the second had output dropped in the middle of a line.
var sample = joblog.Note("job X attempt 1 of 3", true) +
	"line 1\nno newline" +
	joblog.Note("attempt 1 exited with status 1", false) +
	joblog.Note("job X attempt 2 of 3", true) +
	"head\npart" +
	joblog.Note("log limit reached", false) +
	"end\n" +
	joblog.Note("attempt 2 exited with status 0", true)

const sampleRaw = "line 1\nno newline" + "head\npart" + "end\n"

func raw(t *testing.T, chunks ...string) string {
	t.Helper()
	var b strings.Builder
	w := &joblog.RawWriter{W: &b}
	for _, c := range chunks {
		n, err := w.Write([]byte(c))
		require.NoError(t, err)
		require.Equal(t, len(c), n)
	}
	require.NoError(t, w.Flush())
	return b.String()
}

func TestRawWriter(t *testing.T) {
	require.Equal(t, sampleRaw, raw(t, sample))
	// However the log is cut into writes.
	for i := range len(sample) {
		require.Equal(t, sampleRaw, raw(t, sample[:i], sample[i:]), "split at %d", i)
	}
	require.Equal(t, "", raw(t))
	require.Equal(t, "a\n\nb", raw(t, "a\n\nb"), "blank lines and an unfinished last line are the program's")
	require.Equal(t, "x\n", raw(t, "x\n"+joblog.Note("n", true)))
}

func FuzzRawWriter(f *testing.F) {
	f.Add("plain output\n", 3)
	f.Add("no newline", 0)
	f.Add("a\n\n\nb\n", 2)
	f.Fuzz(func(t *testing.T, out string, split int) {
		if strings.Contains(out, joblog.NotePrefix) {
			t.Skip("output that looks like a note is dropped by design")
		}
		// A log as execjob writes it: notes around the output.
		log := joblog.Note("header", true) + out + joblog.Note("footer", out == "" || strings.HasSuffix(out, "\n"))
		split = min(max(split, 0), len(log))
		require.Equal(t, out, raw(t, log[:split], log[split:]))
	})
}

func TestTailWriter(t *testing.T) {
	tail := func(n int, chunks ...string) string {
		var b strings.Builder
		w := &joblog.TailWriter{W: &b, N: n}
		for _, c := range chunks {
			_, err := w.Write([]byte(c))
			require.NoError(t, err)
		}
		require.NoError(t, w.Flush())
		return b.String()
	}
	require.Equal(t, "c\nd\n", tail(2, "a\nb\nc\nd\n"))
	require.Equal(t, "c\nd", tail(2, "a\nb\nc\n", "d"), "an unfinished last line counts")
	require.Equal(t, "a\nb\n", tail(5, "a\n", "b\n"))
	require.Equal(t, "", tail(0, "a\n"))
	require.Equal(t, "7\n8\n9\n", tail(3, strings.Repeat("x\n", 100), "1\n2\n3\n4\n5\n6\n7\n8\n9\n"))
}

func TestOpenOnlyRegularFile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("secret"), 0o600))
	for name, plant := range map[string]func(string) error{
		"symlink":  func(p string) error { return os.Symlink(secret, p) },
		"fifo":     func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"hardlink": func(p string) error { return os.Link(secret, p) },
		"dir":      func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		p := filepath.Join(dir, name+".log")
		require.NoError(t, plant(p))
		_, err := joblog.Open(p)
		require.ErrorIs(t, err, joblog.ErrNotRegular, name)
	}
	_, err := joblog.Open(filepath.Join(dir, "missing.log"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	p := filepath.Join(dir, "ok.log")
	require.NoError(t, os.WriteFile(p, []byte("fine"), 0o600))
	f, err := joblog.Open(p)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestPath(t *testing.T) {
	_, err := joblog.Path("/logs", "../etc/passwd")
	require.ErrorIs(t, err, jobstore.ErrInvalidID)
	p, err := joblog.Path("/logs", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	require.NoError(t, err)
	require.Equal(t, "/logs/01ARZ3NDEKTSV4RRFFQ69G5FAV.log", p)
}

// syncBuffer is a strings.Builder safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCopy(t *testing.T) {
	ctx := t.Context()
	st := memstore.New(nil)
	defer st.Close()
	logDir := t.TempDir()
	j, _, err := st.Submit(ctx, jobstore.Spec{Kind: "exec", MaxAttempts: 1})
	require.NoError(t, err)
	path, err := joblog.Path(logDir, j.ID)
	require.NoError(t, err)

	// No log yet: empty.
	var b strings.Builder
	got, err := joblog.Copy(ctx, &b, st, logDir, j.ID, joblog.Options{})
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
	require.Empty(t, b.String())

	require.NoError(t, os.WriteFile(path, []byte(sample), 0o600))
	for _, tc := range []struct {
		opts joblog.Options
		want string
	}{
		{joblog.Options{}, sample},
		{joblog.Options{Raw: true}, sampleRaw},
		{joblog.Options{Tail: 2}, "end\n" + joblog.Note("attempt 2 exited with status 0", true)},
		{joblog.Options{Raw: true, Tail: 2}, "no newlinehead\npartend\n"}, // the raw lines
	} {
		b.Reset()
		_, err := joblog.Copy(ctx, &b, st, logDir, j.ID, tc.opts)
		require.NoError(t, err)
		require.Equal(t, tc.want, b.String(), "%+v", tc.opts)
	}

	// Following: output appended later is copied, until the job ends.
	c, err := st.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	var out syncBuffer
	type result struct {
		j   jobstore.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		j, err := joblog.Copy(ctx, &out, st, logDir, j.ID, joblog.Options{Raw: true, Tail: 1, Follow: true, Poll: 5 * time.Millisecond})
		done <- result{j, err}
	}()
	require.Eventually(t, func() bool { return out.String() == "partend\n" }, 10*time.Second, time.Millisecond, "the last raw line first")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(joblog.Note("job X attempt 3", true) + "more output\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "more output") }, 10*time.Second, time.Millisecond)
	_, err = f.WriteString("last words\n" + joblog.Note("attempt 3 exited with status 0", true))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = st.Complete(ctx, c.Lease(), jobstore.Succeeded(json.RawMessage(`{}`)))
	require.NoError(t, err)
	final := <-done
	require.NoError(t, final.err)
	require.Equal(t, jobstore.StateSucceeded, final.j.State)
	require.Equal(t, "partend\nmore output\nlast words\n", out.String())

	// Errors: unknown job, a planted link, a ctx that ends.
	_, err = joblog.Copy(ctx, &b, st, logDir, jobstore.NewID(time.Now()), joblog.Options{})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	j2, _, err := st.Submit(ctx, jobstore.Spec{Kind: "exec"})
	require.NoError(t, err)
	p2, _ := joblog.Path(logDir, j2.ID)
	require.NoError(t, os.Symlink(path, p2))
	_, err = joblog.Copy(ctx, &b, st, logDir, j2.ID, joblog.Options{})
	require.ErrorIs(t, err, joblog.ErrNotRegular)
	require.NoError(t, os.Remove(p2))
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = joblog.Copy(cctx, &b, st, logDir, j2.ID, joblog.Options{Follow: true})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}
