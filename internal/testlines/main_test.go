package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	passing = `{"Time":"2026-01-01T10:00:00Z","Action":"start","Package":"x/a"}
{"Time":"2026-01-01T10:00:01Z","Action":"run","Package":"x/a","Test":"TestOK"}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"x/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"x/a","Test":"TestOK","Output":"    chatter of a passing test\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"pass","Package":"x/a","Test":"TestOK","Elapsed":0.5}
{"Time":"2026-01-01T10:00:02Z","Action":"output","Package":"x/a","Output":"ok  \tx/a\t2.0s\n"}
{"Time":"2026-01-01T10:00:02Z","Action":"pass","Package":"x/a","Elapsed":2.04}
{"Time":"2026-01-01T10:00:02Z","Action":"start","Package":"x/empty"}
{"Time":"2026-01-01T10:00:02Z","Action":"output","Package":"x/empty","Output":"?   \tx/empty\t[no test files]\n"}
{"Time":"2026-01-01T10:00:02Z","Action":"skip","Package":"x/empty","Elapsed":0}
`
	failing = `{"Time":"2026-01-01T10:00:00Z","Action":"start","Package":"x/b"}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"x/b","Test":"TestOK","Output":"    fine\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"pass","Package":"x/b","Test":"TestOK","Elapsed":0.1}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"x/b","Test":"TestBad/case","Output":"    bad_test.go:9: want 1, got 2\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"fail","Package":"x/b","Test":"TestBad/case","Elapsed":0.1}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"x/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.10s)\n"}
{"Time":"2026-01-01T10:00:01Z","Action":"fail","Package":"x/b","Test":"TestBad","Elapsed":0.1}
{"Time":"2026-01-01T10:00:02Z","Action":"output","Package":"x/b","Output":"FAIL\tx/b\t1.0s\n"}
{"Time":"2026-01-01T10:00:02Z","Action":"fail","Package":"x/b","Elapsed":1.0}
`
)

func run(t *testing.T, in string) (string, bool) {
	t.Helper()
	var out strings.Builder
	ok := filter(strings.NewReader(in), &out, nil)
	return out.String(), ok
}

func TestPassingRunIsALineAPackage(t *testing.T) {
	out, ok := run(t, passing)
	require.True(t, ok)
	require.Equal(t, "start x/a\nok    x/a 2.0s\nstart x/empty\n-     x/empty [no tests]\n", out)
}

func TestFailureOutputIsWhole(t *testing.T) {
	out, ok := run(t, failing)
	require.False(t, ok)
	require.Contains(t, out, "start x/b\n")
	require.Contains(t, out, "bad_test.go:9: want 1, got 2\n")
	require.Contains(t, out, "--- FAIL: TestBad (0.10s)\n")
	require.Contains(t, out, "FAIL\tx/b\t1.0s\n")
	require.Contains(t, out, "FAIL  x/b 1.0s\n")
	require.NotContains(t, out, "fine", "a passing test's output is dropped")
}

func TestBuildFailureAndPlainLinesFail(t *testing.T) {
	out, ok := run(t, `{"ImportPath":"x/c [x/c.test]","Action":"build-output","Output":"c.go:3:1: syntax error\n"}
{"ImportPath":"x/c [x/c.test]","Action":"build-fail"}
go: some message of the go command
`)
	require.False(t, ok)
	require.Contains(t, out, "c.go:3:1: syntax error\n")
	require.Contains(t, out, "FAIL  x/c [x/c.test] [build failed]\n")
	require.Contains(t, out, "go: some message of the go command\n")
}

func TestPackageWithoutResultFails(t *testing.T) {
	out, ok := run(t, `{"Time":"2026-01-01T10:00:00Z","Action":"start","Package":"x/d"}
{"Time":"2026-01-01T10:00:01Z","Action":"output","Package":"x/d","Output":"panic: test timed out after 10m0s\n"}
`)
	require.False(t, ok)
	require.Contains(t, out, "FAIL  x/d (no result)\npanic: test timed out after 10m0s\n")
}

// writes is a writer that hands each write to a channel.
type writes chan string

func (w writes) Write(p []byte) (int, error) { w <- string(p); return len(p), nil }

func TestQuietRunNamesRunningPackages(t *testing.T) {
	pr, pw := io.Pipe()
	out := make(writes, 16)
	tick := make(chan time.Time)
	done := make(chan bool)
	go func() { done <- filter(pr, out, tick) }()
	_, err := pw.Write([]byte(`{"Time":"2026-01-01T10:00:00Z","Action":"start","Package":"x/slow"}` + "\n"))
	require.NoError(t, err)
	require.Equal(t, "start x/slow\n", <-out)
	// The first tick after a line only notes that the output went quiet;
	// the next one, with nothing printed between them, speaks.
	tick <- time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC)
	tick <- time.Date(2026, 1, 1, 10, 1, 0, 0, time.UTC)
	require.Equal(t, "      still running: x/slow (1m0s)\n", <-out)
	_, err = pw.Write([]byte(`{"Time":"2026-01-01T10:02:00Z","Action":"pass","Package":"x/slow","Elapsed":120}` + "\n"))
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.True(t, <-done)
	require.Equal(t, "ok    x/slow 120.0s\n", <-out)
}
