package main

import (
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkerLinesAreOneFormat: everything a worker prints for people is a
// line that starts with the time, in plain words: its own lines, a failed
// attempt and when it is retried, and the store's warnings.
func TestWorkerLinesAreOneFormat(t *testing.T) {
	dir := newStoreDir(t)
	flaky := submit(t, dir, "--max-attempts", "2", "--", "sh", "-c", "exit 1")
	r := jdOK(t, dir, "work", "--exit-when-idle", "-c", "1")
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 4, r.stderr)
	for _, l := range lines {
		require.Regexp(t, `^\d\d:\d\d:\d\d  \S`, l)
		require.NotContains(t, l, "level=")
	}
	require.Regexp(t, `  worker \S+ running up to 1 job from `+regexp.QuoteMeta(dir)+`$`, lines[0])
	require.Regexp(t, regexp.QuoteMeta(flaky)+`  failed after \S+: exit status 1; retrying (now|in \S+) \(attempt 2 of 2\)`, r.stderr)

	var out strings.Builder
	a := &app{stderr: &out, logFormat: logText}
	a.logger(slog.LevelWarn).Warn("filestore: cannot claim a job; trying the next one", "id", "", "err", "disk full")
	require.Regexp(t, `^\d\d:\d\d:\d\d  warning: cannot claim a job; trying the next one \(err=disk full\)\n$`, out.String())
	require.Equal(t, "1 running job", plural(1, "running job"))
	require.Equal(t, "2 running jobs", plural(2, "running job"))
}

// TestLogFormatJSON: with --log-format json, each line a worker prints is a
// JSON object, its events included.
func TestLogFormatJSON(t *testing.T) {
	dir := newStoreDir(t)
	id := submit(t, dir, "--", "true")
	r := jdOK(t, dir, "--log-format", "json", "work", "--exit-when-idle")
	var msgs []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		msgs = append(msgs, rec["msg"].(string))
		if rec["msg"] == "finished" {
			require.Equal(t, id, rec["id"])
			require.Equal(t, "succeeded", rec["state"])
		}
	}
	require.Contains(t, msgs, "started")
	require.Contains(t, msgs, "finished")
	require.Contains(t, msgs, "worker stopped")

	r = jd(t, dir, "--log-format", "xml", "work")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `--log-format "xml": want text or json`)
}

func TestPlainMessage(t *testing.T) {
	require.Equal(t, "program stopped: attempt timed out after 2s", plainMessage("execjob: program stopped: attempt timed out after 2s"))
	require.Equal(t, "get: job X: job not found", plainMessage("filestore: get: job X: job not found"))
	require.Equal(t, "exit status 1", plainMessage("exit status 1"))
}
