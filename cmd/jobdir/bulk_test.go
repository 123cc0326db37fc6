package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// jdIn runs jobdir with stdin.
func jdIn(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), append([]string{"--dir", dir}, args...), strings.NewReader(stdin), &out, &errb)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// TestBulkCancelAndRetry: cancel and retry act on every job a filter
// selects, after saying how many and asking (--yes does not ask), and say
// how many they changed.
func TestBulkCancelAndRetry(t *testing.T) {
	dir := newStoreDir(t)
	var ids []string
	for range 3 {
		ids = append(ids, submit(t, dir, "--delay", "1h", "--", "true"))
	}
	done := submit(t, dir, "--", "true")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")

	// No answer (stdin is not a terminal, or empty) is a no.
	r := jdIn(t, dir, "", "cancel", "--state", "scheduled")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, "Cancel 3 scheduled jobs in the store "+dir+"? [y/N] \njobdir: nothing done: not confirmed (pass --yes to skip the question)\n", r.stderr)
	r = jdIn(t, dir, "n\n", "cancel", "--state", "scheduled")
	require.Equal(t, exitError, r.code)
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, ids[0]).State)

	r = jdIn(t, dir, "y\n", "cancel", "--kind", "exec")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, "Cancel 3 waiting, queued or running jobs of kind exec in the store "+dir+"? [y/N] ", r.stderr)
	require.Equal(t, "canceled 3 jobs\n", r.stdout)
	for _, id := range ids {
		require.Equal(t, jobstore.StateCanceled, getJob(t, dir, id).State)
	}
	require.Equal(t, jobstore.StateSucceeded, getJob(t, dir, done).State, "a finished job is not selected")

	r = jdOK(t, dir, "cancel", "--state", "queued", "--yes")
	require.Equal(t, "no queued jobs in the store "+dir+": nothing to cancel\n", r.stdout)

	r = jdOK(t, dir, "retry", "--state", "canceled,failed", "--kind", "exec", "-y")
	require.Equal(t, "queued again 3 jobs\n", r.stdout)
	require.Empty(t, r.stderr, "--yes does not ask")
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, ids[2]).State)

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"cancel", "--state", "succeeded"}, "--state succeeded: only waiting, queued or running jobs can be canceled"},
		{[]string{"retry", "--state", "queued"}, "--state queued: only failed or canceled jobs can be retried"},
		{[]string{"cancel", "--state", "queued", ids[0]}, "cancel takes an ID, or --state and --kind, not both"},
		{[]string{"retry", "--kind", "a b"}, "--kind:"},
	} {
		r := jd(t, dir, tt.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tt.args, r)
		require.Contains(t, r.stderr, tt.want)
	}
}

// TestRerunCopiesAJob: rerun submits a new job like another, which stays
// as it was.
func TestRerunCopiesAJob(t *testing.T) {
	dir := newStoreDir(t)
	orig := submit(t, dir, "--key", "report", "--priority", "4", "--max-attempts", "2", "--timeout", "1m", "--env", "A=1", "--", "echo", "hi")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")

	copyID := strings.TrimSpace(jdOK(t, dir, "rerun", "--key", "report").stdout)
	require.NotEqual(t, orig, copyID)
	o, c := getJob(t, dir, orig), getJob(t, dir, copyID)
	require.Equal(t, jobstore.StateSucceeded, o.State)
	require.Equal(t, jobstore.StateQueued, c.State)
	require.Empty(t, c.Key, "a key names one job")
	require.JSONEq(t, string(o.Payload), string(c.Payload))
	require.Equal(t, []any{o.Kind, o.Priority, o.MaxAttempts, o.Timeout}, []any{c.Kind, c.Priority, c.MaxAttempts, c.Timeout})
	require.Equal(t, copyID, getJob(t, dir, "last").ID)
}

// TestPruneByState: prune --state deletes only the finished jobs in those
// states.
func TestPruneByState(t *testing.T) {
	dir := newStoreDir(t)
	ok := submit(t, dir, "--", "true")
	bad := submit(t, dir, "--max-attempts", "1", "--", "false")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")

	r := jdOK(t, dir, "prune", "--older-than", "0", "--state", "succeeded")
	require.Equal(t, "pruned 1 job and 1 log\n", r.stdout)
	require.Equal(t, exitError, jd(t, dir, "get", ok).code)
	require.Equal(t, jobstore.StateFailed, getJob(t, dir, bad).State)

	r = jd(t, dir, "prune", "--older-than", "0", "--state", "running")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--state running: only succeeded, failed or canceled jobs are pruned")
}
