package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// listAll returns every job of store as list --json prints them, oldest
// first, with times cut to the microsecond that every store keeps.
func listAll(t *testing.T, store string) []jobstore.Job {
	t.Helper()
	var jobs []jobstore.Job
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, store, "list", "--json", "--limit", "0", "--oldest-first").stdout), &jobs))
	for i := range jobs {
		j := &jobs[i]
		for _, tm := range []*time.Time{&j.RunAt, &j.CreatedAt, &j.UpdatedAt, &j.StartedAt, &j.FinishedAt} {
			*tm = tm.Truncate(time.Microsecond).UTC()
		}
		for k := range j.History {
			h := &j.History[k]
			h.StartedAt, h.FinishedAt = h.StartedAt.Truncate(time.Microsecond).UTC(), h.FinishedAt.Truncate(time.Microsecond).UTC()
		}
	}
	return jobs
}

// TestCopyBetweenStores: copy moves every job from a directory into
// PostgreSQL and back, as it is; a second copy copies nothing; the keys
// and queued jobs work in the new store.
func TestCopyBetweenStores(t *testing.T) {
	dir, pg, back := newStoreDir(t), pgStore(t), newStoreDir(t)
	t.Chdir(t.TempDir())
	ok := submit(t, dir, "--key", "report", "--", "echo", "copied output")
	bad := submit(t, dir, "--max-attempts", "1", "--", "sh", "-c", "echo broke >&2; exit 3")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	later := submit(t, dir, "--delay", "1h", "--key", "later", "--priority", "9", "--", "true")
	gone := submit(t, dir, "--delay", "1h", "--", "true")
	jdOK(t, dir, "cancel", gone)
	want := listAll(t, dir)
	require.Len(t, want, 4)

	okLog, badLog := jdOK(t, dir, "logs", ok).stdout, jdOK(t, dir, "logs", bad).stdout
	require.Contains(t, okLog, "copied output")

	r := jdOK(t, "", "copy", "--from", dir, "--to", pg)
	require.Contains(t, r.stdout, "copied 4 jobs and 2 logs from "+dir+" to postgres://")
	require.Contains(t, r.stdout, "; 0 jobs were there already")
	require.Equal(t, want, listAll(t, pg), "every field of every job")
	require.Equal(t, okLog, jdOK(t, pg, "logs", ok).stdout, "the logs, byte for byte")
	require.Equal(t, badLog, jdOK(t, pg, "logs", bad).stdout)

	r = jdOK(t, "", "copy", "--from", dir, "--to", pg)
	require.Contains(t, r.stdout, "copied 0 jobs and 0 logs")
	require.Contains(t, r.stdout, "4 jobs were there already")
	require.Equal(t, want, listAll(t, pg))
	require.Equal(t, okLog, jdOK(t, pg, "logs", ok).stdout, "nothing twice")

	r = jdOK(t, "", "copy", "--from", pg, "--to", "file://"+back)
	require.Contains(t, r.stdout, "copied 4 jobs and 2 logs")
	require.Equal(t, want, listAll(t, back), "and back")
	require.Equal(t, okLog, jdOK(t, back, "logs", ok).stdout)

	// The copy is a store like any other: its keys hold, its queued job
	// runs there.
	r = jdOK(t, pg, "submit", "--key", "report", "--", "false")
	require.Equal(t, ok+"\n", r.stdout)
	require.Equal(t, jobstore.StateFailed, getJob(t, pg, bad).State)
	jdOK(t, pg, "retry", gone)
	jdOK(t, pg, "work", "--exit-when-idle", "-q")
	require.Equal(t, jobstore.StateSucceeded, getJob(t, pg, gone).State)
	require.Equal(t, jobstore.StateCanceled, getJob(t, dir, gone).State, "the source is left as it was")
	require.Equal(t, jobstore.StateQueued, getJob(t, pg, later).State)

	// A key that names another job in the target stops the copy.
	other := newStoreDir(t)
	submit(t, other, "--key", "report", "--", "true")
	r = jd(t, "", "copy", "--from", other, "--to", pg)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, `key "report" belongs to job `+ok)
}

// TestCopyRefusesRunningJobs: while a worker holds a job of the source,
// copy copies nothing and says why, unless --skip-running, which copies the
// rest and says what it left.
func TestCopyRefusesRunningJobs(t *testing.T) {
	dir, to := newStoreDir(t), newStoreDir(t)
	first := submit(t, dir, "--", "true")
	second := submit(t, dir, "--", "true")
	st, err := filestore.Open(t.Context(), dir, nil)
	require.NoError(t, err)
	defer st.Close()
	held, err := st.Claim(t.Context(), jobstore.ClaimRequest{Worker: "elsewhere"})
	require.NoError(t, err)
	require.Equal(t, first, held.ID)

	r := jd(t, "", "copy", "--from", dir, "--to", to)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "1 jobs run in "+dir+" (for example "+first+", by worker elsewhere): nothing copied")
	require.Contains(t, r.stderr, "--skip-running")
	require.NoFileExists(t, filepath.Join(to, "queued", second+".json"))

	r = jdOK(t, "", "copy", "--from", dir, "--to", to, "--skip-running")
	require.Contains(t, r.stdout, "copied 1 jobs and 0 logs")
	require.Contains(t, r.stdout, "not copied: 1 running jobs")
	require.Equal(t, jobstore.StateQueued, getJob(t, to, second).State)
	require.Equal(t, exitError, jd(t, to, "get", first).code)

	_, err = st.Complete(t.Context(), held.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	r = jdOK(t, "", "copy", "--from", dir, "--to", to)
	require.Contains(t, r.stdout, "copied 1 jobs")
	require.Equal(t, jobstore.StateSucceeded, getJob(t, to, first).State)
}

func TestCopyUsage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	r := jd(t, "", "copy", "--from", dir, "--to", newStoreDir(t))
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "--from "+dir+": there is no store there")
	require.NoDirExists(t, dir, "copy makes no empty store to copy from")

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no to":      {[]string{"copy", "--from", dir}, "copy needs --from STORE and --to STORE"},
		"same store": {[]string{"copy", "--from", dir, "--to", "file://" + dir}, "--from and --to name the same store"},
		"bad url":    {[]string{"copy", "--from", dir, "--to", "redis://x"}, "--to: store"},
	} {
		t.Run(name, func(t *testing.T) {
			r := jd(t, "", tc.args...)
			require.Equal(t, exitUsage, r.code, "%s", r)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}
