package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestListTellsTheTruth: list says when it left jobs out and how many,
// shows the columns people look for (more with -o wide), and prints each
// job with a --format template.
func TestListTellsTheTruth(t *testing.T) {
	dir := newStoreDir(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, submit(t, dir, "--priority", []string{"0", "5", "-3"}[i], "--key", []string{"a", "b", "c"}[i], "--", "echo", "job"))
	}
	r := jdOK(t, dir, "list", "--limit", "2")
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 3)
	require.Equal(t, "1 more; use --limit 0 to list them all, or --limit N\n", r.stderr)
	r = jdOK(t, dir, "list", "--limit", "1", "--state", "queued,running", "--kind", "exec")
	require.Equal(t, "more jobs; use --limit 0 to list them all, or --limit N\n", r.stderr, "the counts cannot tell due jobs from waiting ones")
	r = jdOK(t, dir, "list", "--limit", "1", "--state", "queued,scheduled,retrying,running", "--kind", "exec")
	require.Equal(t, "2 more; use --limit 0 to list them all, or --limit N\n", r.stderr, "every queued job: counted")
	require.Empty(t, jdOK(t, dir, "list", "--limit", "3").stderr, "nothing left out")
	require.Empty(t, jdOK(t, dir, "list").stderr)

	r = jdOK(t, dir, "list", "--oldest-first")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Regexp(t, `^`+ids[1]+`\s+queued\s+exec\s+5\s+b\s+0/3\s+just now\s+echo job$`, lines[2])

	r = jdOK(t, dir, "list", "-o", "wide")
	require.Regexp(t, `^ID\s+STATE\s+KIND\s+PRI\s+KEY\s+ATTEMPT\s+CREATED\s+WORKER\s+DURATION\s+LAST ERROR\s+COMMAND\n`, r.stdout)
	require.Regexp(t, ids[2]+`\s+queued\s+exec\s+-3\s+c\s+0/3\s+just now\s+-\s+-\s+-\s+echo job\n`, r.stdout)

	r = jdOK(t, dir, "list", "--format", "{{.ID}} {{.Priority}} {{.Key}}", "--oldest-first")
	require.Equal(t, ids[0]+" 0 a\n"+ids[1]+" 5 b\n"+ids[2]+" -3 c\n", r.stdout)

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "tall"}, `-o "tall": the only output is wide`},
		{[]string{"--format", "{{.ID"}, "--format:"},
		{[]string{"--format", "{{.ID}}", "--json"}, "--json and --format cannot be used together"},
	} {
		r := jd(t, dir, append([]string{"list"}, tt.args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tt.args, r)
		require.Contains(t, r.stderr, tt.want)
	}
	r = jd(t, dir, "list", "--format", "{{.Nope}}")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "--format:")
	require.Contains(t, r.stderr, "can't evaluate field Nope")
}

func TestStateAtSaysWhenAQueuedJobRuns(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		job  jobstore.Job
		want string
	}{
		{"due", jobstore.Job{State: jobstore.StateQueued, RunAt: now.Add(-time.Minute), MaxAttempts: 3}, "queued"},
		{"delayed", jobstore.Job{State: jobstore.StateQueued, RunAt: now.Add(5 * time.Minute), MaxAttempts: 3}, "scheduled (in 5m)"}, // as the dashboard writes it (humantime)
		{"retrying", jobstore.Job{State: jobstore.StateQueued, RunAt: now.Add(30 * time.Second), Attempt: 1, MaxAttempts: 3}, "retrying (in 30s, attempt 2/3)"},
		{"retry due", jobstore.Job{State: jobstore.StateQueued, RunAt: now, Attempt: 1, MaxAttempts: 3}, "queued"},
		{"canceling", jobstore.Job{State: jobstore.StateRunning, CancelRequested: true}, "running (cancel requested)"},
		{"done", jobstore.Job{State: jobstore.StateSucceeded}, "succeeded"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, stateAt(tt.job, now), tt.name)
	}

	require.Equal(t, "-", runTime(jobstore.Job{State: jobstore.StateQueued}, now))
	require.Equal(t, "1m", runTime(jobstore.Job{State: jobstore.StateRunning, StartedAt: now.Add(-time.Minute)}, now))
	require.Equal(t, "5h 22m", runTime(jobstore.Job{State: jobstore.StateRunning, StartedAt: now.Add(-5*time.Hour - 22*time.Minute)}, now), "as the dashboard writes it")
	require.Equal(t, "2.5s", runTime(jobstore.Job{State: jobstore.StateFailed, StartedAt: now, FinishedAt: now.Add(2500 * time.Millisecond)}, now))
}
