package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJobIDsForPeople: wherever a job is named, its ID may be given in
// either case, as a unique prefix of at least four characters, as "last",
// or (get, logs, wait, cancel) by its key; an ambiguous prefix lists the
// jobs it could mean.
func TestJobIDsForPeople(t *testing.T) {
	dir := newStoreDir(t)
	r := jd(t, dir, "get", "last")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "no job in the store "+dir+", so none is the last")

	first := submit(t, dir, "--key", "first", "--", "echo", "one")
	second := submit(t, dir, "--", "echo", "two")
	third := submit(t, dir, "--key", "third", "--", "sleep", "1")

	for _, arg := range []string{second, strings.ToLower(second), second[:25], strings.ToLower(second[:25])} {
		require.Equal(t, second, getJob(t, dir, arg).ID, arg)
	}
	require.Equal(t, third, getJob(t, dir, "last").ID)
	require.Equal(t, third, getJob(t, dir, "LAST").ID)
	require.Contains(t, jdOK(t, dir, "get", "--key", "first").stdout, "ID:         "+first+"\n")

	// Jobs submitted together share the time part of their IDs.
	r = jd(t, dir, "get", strings.ToLower(first[:4]))
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "jobdir: "+first[:4]+" starts the IDs of several jobs; give more of the one you mean:\n")
	for _, id := range []string{first, second, third} {
		require.Regexp(t, "\n  "+id+`  +queued  +\S`, r.stderr)
	}
	require.Contains(t, r.stderr, "echo two")
	require.NotContains(t, r.stderr, "Usage:")

	tests := []struct{ arg, want string }{
		{first[:3], `"` + first[:3] + `" is too short to name a job: give at least 4 characters of its ID`},
		{"7ZZZZZ", "no job whose ID starts with 7ZZZZZ in the store " + dir},
		{"../../etc/passwd", `"../../etc/passwd" is not a job ID: an ID is 26 characters`},
		{"8ZZZ", `"8ZZZ" is not a job ID`},
	}
	for _, cmd := range []string{"get", "logs", "wait", "cancel", "retry"} {
		for _, tt := range tests {
			r := jd(t, dir, cmd, tt.arg)
			require.Equal(t, exitError, r.code, "%s %s: %s", cmd, tt.arg, r)
			require.Contains(t, r.stderr, tt.want, "%s %s", cmd, tt.arg)
		}
	}

	r = jdOK(t, dir, "cancel", "--key", "third")
	require.Equal(t, third+" canceled\n", r.stdout)
	require.Equal(t, "canceled\n", jd(t, dir, "wait", "--key", "third").stdout)
	r = jd(t, dir, "logs", "--key", "nosuch")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, `no job with key "nosuch" in the store `+dir)
	r = jd(t, dir, "get", "--key", "first", first)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "get takes an ID or --key, not both")
	r = jd(t, dir, "get", "--key", "bad\x01key")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "jobdir: --key: key contains control character U+0001\n")
}

func TestNextPrefix(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"01JC", "01JD", true},
		{"01JZ", "01K0", true},
		{"01ZZZ", "02000", true},
		{"0HZZ", "0J00", true}, // I is not a digit
		{"7ZZZ", "", false},    // past the largest ID
	}
	for _, tt := range tests {
		got, ok := nextPrefix(tt.in)
		require.Equal(t, tt.ok, ok, tt.in)
		if ok {
			require.Equal(t, tt.want, got, tt.in)
		}
	}
}

// TestCompletionOffersJobs: the shell completes job IDs with their state
// and command, states and kinds, from the store the command line names,
// and completing never creates a store.
func TestCompletionOffersJobs(t *testing.T) {
	dir := newStoreDir(t)
	older := submit(t, dir, "--", "echo", "older")
	newer := submit(t, dir, "--", "sleep", "5")
	complete := func(args ...string) []string {
		t.Helper()
		r := jdOK(t, "", append([]string{"__complete", "--dir", dir}, args...)...)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Regexp(t, `^:\d+$`, lines[len(lines)-1], "the directive ends the output")
		return lines[:len(lines)-1]
	}
	require.Equal(t, []string{newer + "\tqueued: sleep 5", older + "\tqueued: echo older", "last\tthe newest job"}, complete("logs", ""))
	require.Equal(t, []string{strings.ToLower(older) + "\tqueued: echo older"}, complete("get", strings.ToLower(older[:25])))
	require.Empty(t, complete("cancel", newer, ""), "one ID is enough")
	require.Equal(t, []string{"waiting", "queued", "running", "succeeded", "failed", "canceled"}, complete("list", "--state", ""))
	require.Equal(t, []string{"exec"}, complete("list", "--kind", ""))

	missing := filepath.Join(t.TempDir(), "missing")
	r := jdOK(t, "", "__complete", "--dir", missing, "get", "")
	require.Equal(t, ":36\n", r.stdout, "nothing to offer")
	require.NoDirExists(t, missing)
}
