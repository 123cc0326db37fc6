package main

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
	"github.com/jobdir/jobdir/storeurl"
)

// listAll returns every job of store as list --json prints them, oldest
// first, with times cut to the microsecond that every store keeps.
func listAll(t *testing.T, store string) []jobstore.Job {
	t.Helper()
	jobs := wireJobs(t, jdOK(t, store, "list", "--json", "--limit", "0", "--oldest-first").stdout)
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
// PostgreSQL and back, as it is, with its queues and their pauses; a
// second copy copies nothing; the keys and queued jobs work in the new
// store.
func TestCopyBetweenStores(t *testing.T) {
	dir, pg, back := newStoreDir(t), pgStore(t), newStoreDir(t)
	t.Chdir(t.TempDir())
	ok := submit(t, dir, "--key", "report", "--", "echo", "copied output")
	bad := submit(t, dir, "--max-attempts", "1", "--", "sh", "-c", "echo broke >&2; exit 3")
	jdOK(t, dir, "work", "--exit-when-idle", "-q")
	later := submit(t, dir, "--delay", "1h", "--key", "later", "--priority", "9", "--tag", "nightly,team=ops", "--meta", "ticket=OPS-7", "--", "true")
	gone := submit(t, dir, "--delay", "1h", "--", "true")
	jdOK(t, dir, "cancel", gone)
	mail := submit(t, dir, "--queue", "mail", "--", "true")
	jdOK(t, dir, "queue", "pause", "mail")
	jdOK(t, dir, "schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--kind", "report.build", "--payload", `{"b":1,"a":[1,2]}`)
	want := listAll(t, dir)
	require.Len(t, want, 5)

	okLog, badLog := jdOK(t, dir, "logs", ok).stdout, jdOK(t, dir, "logs", bad).stdout
	require.Contains(t, okLog, "copied output")

	r := jdOK(t, "", "copy", "--from", dir, "--to", pg)
	require.Contains(t, r.stdout, "copied 5 jobs and 2 logs from "+dir+" to postgres://")
	require.Contains(t, r.stdout, "; 0 jobs were there already")
	require.Contains(t, r.stdout, "\npaused in postgres://")
	require.Contains(t, r.stdout, " too: mail\n")
	require.Contains(t, r.stdout, "\nschedules in postgres://")
	require.Contains(t, r.stdout, " too: nightly\n")
	require.Equal(t, want, listAll(t, pg), "every field of every job")
	require.Equal(t, okLog, jdOK(t, pg, "logs", ok).stdout, "the logs, byte for byte")
	require.Equal(t, badLog, jdOK(t, pg, "logs", bad).stdout)

	r = jdOK(t, "", "copy", "--from", dir, "--to", pg)
	require.Contains(t, r.stdout, "copied 0 jobs and 0 logs")
	require.Contains(t, r.stdout, "5 jobs were there already")
	require.Equal(t, want, listAll(t, pg))
	require.Equal(t, okLog, jdOK(t, pg, "logs", ok).stdout, "nothing twice")

	r = jdOK(t, "", "copy", "--from", pg, "--to", "file://"+back)
	require.Contains(t, r.stdout, "copied 5 jobs and 2 logs")
	require.Contains(t, jdOK(t, back, "schedule", "list").stdout, "nightly", "schedules go there and back")
	r = jdOK(t, "", "copy", "--from", back, "--to", pg)
	require.NotContains(t, r.stdout, "schedules in", "a schedule there already, the same, is left alone")
	require.Equal(t, want, listAll(t, back), "and back")
	require.Contains(t, jdOK(t, back, "queue", "list").stdout, "paused")
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
	require.Equal(t, []string{"nightly", "team=ops"}, getJob(t, back, later).Tags, "tags and metadata are copied")
	require.Equal(t, map[string]string{"ticket": "OPS-7"}, getJob(t, back, later).Meta)
	require.Equal(t, jobstore.StateQueued, getJob(t, pg, mail).State, "the queue is paused in the copy too")

	// A schedule of the same name, defined otherwise, stops the copy.
	clash := newStoreDir(t)
	jdOK(t, clash, "schedule", "add", "nightly", "--cron", "@hourly", "--", "true")
	r = jd(t, "", "copy", "--from", clash, "--to", pg)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "a schedule named nightly is in both stores, defined differently: nothing copied")

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

// TestCopyRefusesMissingSource: copy opens the store it reads from as it
// is: a directory or a PostgreSQL schema without a store (or a schema of
// an older version) is refused in plain words, and neither that store nor
// the target is created or upgraded.
func TestCopyRefusesMissingSource(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		from, to := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "target")
		r := jd(t, "", "copy", "--from", from, "--to", to)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "--from "+from+": there is no store there")
		require.NoDirExists(t, from)
		require.NoDirExists(t, to, "nothing is copied, so no target is made")
	})
	t.Run("empty directory", func(t *testing.T) {
		from, to := t.TempDir(), filepath.Join(t.TempDir(), "target")
		r := jd(t, "", "copy", "--from", from, "--to", to)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "--from "+from+": there is no store there")
		names, err := os.ReadDir(from)
		require.NoError(t, err)
		require.Empty(t, names, "the directory is left empty")
		require.NoDirExists(t, to)
	})
	t.Run("missing schema", func(t *testing.T) {
		from, to := pgStore(t), filepath.Join(t.TempDir(), "target")
		u, err := url.Parse(from)
		require.NoError(t, err)
		schema := u.Query().Get(storeurl.SchemaParam)
		r := jd(t, "", "copy", "--from", from, "--to", to)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "--from postgres://")
		require.Contains(t, r.stderr, "(schema "+schema+"): there is no store there")
		require.NotContains(t, r.stderr, "pgstore:", "plain words")
		require.False(t, schemaExists(t, schema), "copy does not create the schema it reads from")
		require.NoDirExists(t, to)
	})
	t.Run("older schema", func(t *testing.T) {
		from, to := pgStore(t), filepath.Join(t.TempDir(), "target")
		u, err := url.Parse(from)
		require.NoError(t, err)
		schema := u.Query().Get(storeurl.SchemaParam)
		jdOK(t, from, "stats")
		pool := pgtest.Pool(t, 1)
		old := pgstore.SchemaVersion() - 1
		_, err = pool.Exec(t.Context(), `DELETE FROM `+schema+`.migrations WHERE version > $1`, old)
		require.NoError(t, err)
		r := jd(t, "", "copy", "--from", from, "--to", to)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "the store was written by an older jobdir, and copy does not upgrade the store it reads")
		var v int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT max(version) FROM `+schema+`.migrations`).Scan(&v))
		require.Equal(t, old, v, "not upgraded")
		require.NoDirExists(t, to)
	})
}

// schemaExists reports whether the test database has the schema.
func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t, 1).QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
	return n == 1
}

// TestCopyCarriesLimits: a queue's limit, per-partition limit and rate are set in
// the store copied into, a file store or a store in PostgreSQL, with its
// jobs' partitions.
func TestCopyCarriesLimits(t *testing.T) {
	dir, into := newStoreDir(t), newStoreDir(t)
	t.Chdir(t.TempDir())
	id := submit(t, dir, "--queue", "mail", "--partition", "customer-1", "--", "true")
	jdOK(t, dir, "queue", "limit", "mail", "3", "--per-partition", "1")
	jdOK(t, dir, "queue", "limit", "deploys", "2")
	jdOK(t, dir, "queue", "limit", "reports", "--rate", "100/1m")

	for _, to := range []string{into, pgStore(t)} {
		r := jdOK(t, "", "copy", "--from", dir, "--to", to)
		require.Regexp(t, `(?m)^limited in .+ too: deploys \(at most 2\), mail \(at most 3, 1 per partition\), reports \(rate 100/1m\)$`, r.stdout)
		var qs []jobstore.QueueInfo
		require.NoError(t, json.Unmarshal([]byte(jdOK(t, to, "queue", "list", "--json").stdout), &qs))
		byName := map[string]jobstore.QueueInfo{}
		for _, q := range qs {
			byName[q.Queue] = q
		}
		require.Equal(t, 2, byName["deploys"].Limit, to)
		require.Equal(t, 3, byName["mail"].Limit, to)
		require.Equal(t, 1, byName["mail"].PerPartition, to)
		require.Equal(t, jobstore.Rate{N: 100, Per: time.Minute}, byName["reports"].Rate, to)
		require.Equal(t, "customer-1", getJob(t, to, id).Partition, to)
	}
}
