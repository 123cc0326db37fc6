package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
)

// The stumbles of a newcomer's first hour, each fixed with the test that
// would have failed before.

// TestHelpExampleTokenIsLongEnough: the token of "jobdir help"'s serve
// example is one serve accepts (it was "secret", which serve refuses as
// too short).
func TestHelpExampleTokenIsLongEnough(t *testing.T) {
	help := jdOK(t, "", "--help").stdout
	m := regexp.MustCompile(`JOBDIR_TOKEN=(\S+)`).FindAllStringSubmatch(help, -1)
	require.NotEmpty(t, m)
	for _, tok := range m {
		if strings.HasPrefix(tok[1], "$(") {
			continue // made at run time, as long as asked
		}
		require.GreaterOrEqual(t, len(tok[1]), httpapi.MinTokenLen, "the example's token %q is too short for serve", tok[1])
	}
}

// TestStoreThatIsAFile: --dir naming a file says so in plain words, not as
// the library's chain of what it was doing.
func TestStoreThatIsAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "afile")
	require.NoError(t, os.WriteFile(f, nil, 0o600))
	r := jd(t, f, "list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, "jobdir: cannot open the store in "+f+": it is a file, not a directory\n"+
		"Give the directory the store is in (or one to make it in) with --dir or $JOBDIR_DIR.\n", r.stderr)
}

// TestRefusedPostgresSaysItOnce: a refused connection's dial error is
// printed once, not once per attempt.
func TestRefusedPostgresSaysItOnce(t *testing.T) {
	r := jd(t, "postgres://jobdir@127.0.0.1:1/none?connect_timeout=5", "list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, 1, strings.Count(r.stderr, "connection refused"), r.stderr)
}

// TestDelayAndAtInThePast: a negative --delay is refused saying that
// negative is the problem; an --at in the past is taken, saying that the
// job is due at once.
func TestDelayAndAtInThePast(t *testing.T) {
	dir := t.TempDir()
	r := jd(t, dir, "submit", "--delay", "-5m", "--", "true")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, `--delay "-5m": must not be negative`)
	r = jdOK(t, dir, "submit", "--at", "2020-01-01T00:00:00Z", "--", "true")
	// The hours are left out when zero: in the first hour of a UTC day.
	require.Regexp(t, `^jobdir: --at 2020-01-01T00:00:00Z is \d+d( \d+h)? in the past: the job is due at once\n`+regexp.QuoteMeta(noWorkerNote)+`$`, r.stderr)
	r = jdOK(t, dir, "submit", "--at", time.Now().Add(time.Hour).Format(time.RFC3339), "--", "true")
	require.Equal(t, noWorkerNote, r.stderr, "a time to come says nothing of it")
}

// TestRetryByKey: retry takes --key, as get, logs, wait, cancel and rerun
// do.
func TestRetryByKey(t *testing.T) {
	dir := t.TempDir()
	id := submit(t, dir, "--key", "nightly", "--", "true")
	jdOK(t, dir, "cancel", "--key", "nightly")
	r := jdOK(t, dir, "retry", "--key", "nightly")
	require.Equal(t, id+" queued (attempt 1 of 3 next)\n", r.stdout)
	r = jd(t, dir, "retry", "--key", "nosuch")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, `no job with key "nosuch"`)
}

// TestLogsOfAJobWithoutLog: logs of a job of a library kind says that such
// jobs keep no log and fails, rather than printing nothing and exiting 0.
func TestLogsOfAJobWithoutLog(t *testing.T) {
	dir := t.TempDir()
	s, err := filestore.Open(context.Background(), dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	j, _, err := s.Submit(context.Background(), jobstore.Spec{Kind: "email.send"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	r := jd(t, dir, "logs", j.ID)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `job `+j.ID+` is of kind "email.send", whose handler keeps no log: only exec jobs`)
}

// TestMaxLogBytesTakesUnits: --max-log-bytes takes the units its help
// speaks of, and refuses what is not a size in words.
func TestMaxLogBytesTakesUnits(t *testing.T) {
	for in, want := range map[string]int64{"10MiB": 10 << 20, "10MB": 10 << 20, "10M": 10 << 20, "512k": 512 << 10, "1G": 1 << 30, "1048576": 1 << 20, "8192B": 8192} {
		n, err := parseByteSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, n, in)
	}
	for _, in := range []string{"", "ten", "-1M", "1.5M", "10TB", "99999999999G"} {
		_, err := parseByteSize(in)
		require.ErrorIs(t, err, errByteSize, in)
	}
	help := jdOK(t, "", "work", "--help").stdout
	require.Contains(t, help, "(default 10MiB)")
	r := jd(t, t.TempDir(), "work", "--exit-when-idle", "--max-log-bytes", "ten")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "want a size such as 10MiB")
}

// TestStateWordsOfQueuedJobs: --state takes the words the table shows
// (scheduled, retrying), and --state queued means the jobs due now: a
// cancel of the queued jobs no longer cancels the scheduled ones too
// (30 were lost that way). Without --state, cancel still takes every
// queued job, waiting or not.
func TestStateWordsOfQueuedJobs(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := filestore.Open(ctx, dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	due, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	later, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	flaky, _, err := s.Submit(ctx, jobstore.Spec{Kind: "flaky", MaxAttempts: 3})
	require.NoError(t, err)
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"flaky"}})
	require.NoError(t, err)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "boom", RetryAfter: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	ids := func(r result) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	list := func(state string) []string {
		return ids(jdOK(t, dir, "list", "--state", state, "--format", "{{.ID}}"))
	}
	require.Equal(t, []string{due.ID}, list("queued"))
	require.Equal(t, []string{later.ID}, list("scheduled"))
	require.Equal(t, []string{flaky.ID}, list("retrying"))
	require.ElementsMatch(t, []string{later.ID, flaky.ID}, list("scheduled,retrying"))
	r := jd(t, dir, "list", "--state", "sleeping")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown state "sleeping": want one of waiting, queued, scheduled, retrying, running, succeeded, failed, canceled`)

	r = jdOK(t, dir, "cancel", "--state", "queued", "--yes")
	require.Equal(t, "canceled 1 job\n", r.stdout)
	require.Equal(t, []string{later.ID}, list("scheduled"), "a scheduled job is not a queued one")
	require.Equal(t, []string{flaky.ID}, list("retrying"))
	r = jd(t, dir, "cancel", "--state", "scheduled")
	require.Contains(t, r.stderr, "Cancel 1 scheduled job in the store")
	r = jd(t, dir, "retry", "--state", "scheduled")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--state scheduled: only failed or canceled jobs can be retried")
	r = jdOK(t, dir, "cancel", "--kind", "flaky", "--yes")
	require.Equal(t, "canceled 1 job\n", r.stdout, "without --state, every queued job of the kind")
	require.Empty(t, list("retrying"))
}

// TestSetupFlagsOnlyWhereTheyMatter: --syncfs, --group-access and
// --allow-unsafe-filesystem are in jobdir's own help and in the help of
// the commands that create a store, not in every command's; every command
// still takes them.
func TestSetupFlagsOnlyWhereTheyMatter(t *testing.T) {
	for _, cmd := range [][]string{{"--help"}, {"submit", "--help"}, {"work", "--help"}, {"serve", "--help"}} {
		help := jdOK(t, "", cmd...).stdout
		for _, f := range setupFlags {
			require.Contains(t, help, "--"+f, "jobdir %v", cmd)
		}
	}
	for _, cmd := range []string{"list", "get", "cancel", "logs", "stats"} {
		help := jdOK(t, "", cmd, "--help").stdout
		for _, f := range setupFlags {
			require.NotContains(t, help, "--"+f, "jobdir %s --help", cmd)
		}
	}
	jdOK(t, newStoreDir(t), "--syncfs", "list")
}

// TestGetWritesTimesAsTheDashboard: get writes a job's times from now in
// the words the list and the dashboard use ("in 5h 22m"), not Go's
// "5h22m0s".
func TestGetWritesTimesAsTheDashboard(t *testing.T) {
	dir := newStoreDir(t)
	t.Chdir(t.TempDir())
	id := strings.TrimSpace(jdOK(t, dir, "submit", "--delay", "5h22m30s", "--", "true").stdout)
	out := jdOK(t, dir, "get", id).stdout
	require.Regexp(t, `\(in 5h 2[12]m\)`, out)
	require.NotRegexp(t, `\d+h\d+m\d+s`, out)
	require.Regexp(t, `scheduled \(in 5h 2[12]m\)`, jdOK(t, dir, "list").stdout, "list says the same")
}

// TestMaxAttemptsDefaultSaysWhy: exec jobs keep the default of 3 attempts,
// and submit's help says why and when to give 1, as a shell command that
// must never run twice needs.
func TestMaxAttemptsDefaultSaysWhy(t *testing.T) {
	help := jdOK(t, "", "submit", "--help").stdout
	help = strings.Join(strings.Fields(help), " ")
	require.Contains(t, help, "attempts before the job fails for good (default 3: an attempt also ends when its worker dies")
	require.Contains(t, help, "give 1 for a program that must never run twice")
	dir := newStoreDir(t)
	t.Chdir(t.TempDir())
	id := strings.TrimSpace(jdOK(t, dir, "submit", "--", "true").stdout)
	require.Contains(t, jdOK(t, dir, "get", "--json", id).stdout, `"max_attempts": 3`)
}
