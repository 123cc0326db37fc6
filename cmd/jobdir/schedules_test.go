package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestScheduleCommands: schedule add, list (and --json), run, pause,
// resume and rm on a file store and in PostgreSQL, with their refusals in
// words; a bad spec or zone changes nothing.
func TestScheduleCommands(t *testing.T) {
	t.Run("file", func(t *testing.T) { testScheduleCommands(t, newStoreDir(t)) })
	t.Run("postgres", func(t *testing.T) { testScheduleCommands(t, pgStore(t)) })
}

func testScheduleCommands(t *testing.T, dir string) {
	t.Chdir(t.TempDir())
	require.Contains(t, jdOK(t, dir, "schedule", "list").stdout, "No schedules yet.")
	r := jdOK(t, dir, "schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--tag", "nightly",
		"--max-attempts", "1", "--", "sh", "-c", "echo backup")
	require.Contains(t, r.stdout, "schedule nightly added; its next tick is ")
	jdOK(t, dir, "schedule", "add", "sync", "--cron", "@every 1h", "--kind", "crm.sync", "--payload", `{"full":false}`, "--overlap", "skip", "--catch-up", "all")

	r = jd(t, dir, "schedule", "add", "nightly", "--cron", "@daily", "--", "true")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "a schedule named nightly exists: give --replace to replace it")
	for _, bad := range [][]string{
		{"schedule", "add", "x", "--cron", "61 * * * *", "--", "true"},
		{"schedule", "add", "x", "--cron", "@daily", "--tz", "Mars/Olympus", "--", "true"},
		{"schedule", "add", "x", "--cron", "@every 1500ms", "--", "true"},
		{"schedule", "add", "x", "--cron", "@daily", "--catch-up", "some", "--", "true"},
		{"schedule", "add", "x:y", "--cron", "@daily", "--", "true"},
		{"schedule", "add", "x", "--", "true"},
		{"schedule", "add", "x", "--cron", "@daily"},
		{"schedule", "add", "x", "--cron", "@daily", "--kind", "k", "--", "true"},
	} {
		r := jd(t, dir, bad...)
		require.Equal(t, exitUsage, r.code, "%v: %s", bad, r)
		require.NotContains(t, r.stderr, "cron:", "%v", bad)
	}
	r = jdOK(t, dir, "schedule", "list")
	require.Regexp(t, `(?m)^NAME\s+SPEC\s+TZ\s+NEXT\s+LAST\s+LAST JOB\s+STATE$`, r.stdout)
	require.Regexp(t, `(?m)^nightly\s+0 3 \* \* \*\s+Europe/Berlin\s+in \S+.*\s+-\s+-\s+active$`, r.stdout)
	var views []map[string]any
	require.NoError(t, json.Unmarshal([]byte(jdOK(t, dir, "schedule", "list", "--json").stdout), &views))
	require.Len(t, views, 2, "a refused add added a schedule")
	require.Equal(t, "nightly", views[0]["name"])
	require.Equal(t, "Europe/Berlin", views[0]["tz"])
	require.Nil(t, views[0]["last"])
	require.NotNil(t, views[0]["next"])
	require.Equal(t, "crm.sync", views[1]["job"].(map[string]any)["kind"])
	require.Equal(t, "all", views[1]["catch_up"])
	require.Equal(t, "skip", views[1]["overlap"])

	// run: the job now, keyed as a tick of this second.
	id := strings.TrimSpace(jdOK(t, dir, "schedule", "run", "nightly").stdout)
	j := getJob(t, dir, id)
	require.True(t, strings.HasPrefix(j.Key, "schedule:nightly:"), j.Key)
	require.Equal(t, []string{"nightly"}, j.Tags)
	require.Equal(t, 1, j.MaxAttempts)

	require.Equal(t, "schedule nightly paused\n", jdOK(t, dir, "schedule", "pause", "nightly").stdout)
	require.Regexp(t, `(?m)^nightly\s.*\s+-\s+-\s+-\s+paused$`, jdOK(t, dir, "schedule", "list").stdout)
	require.Equal(t, "schedule nightly resumed\n", jdOK(t, dir, "schedule", "resume", "nightly").stdout)
	require.Equal(t, "schedule nightly removed\n", jdOK(t, dir, "schedule", "rm", "nightly").stdout)
	r = jd(t, dir, "schedule", "rm", "nightly")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "no schedule is named nightly")
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, id).State, "rm leaves the jobs of the ticks")
}

// TestE2EScheduleTicksOnceAcrossProcesses: three jobdir work processes
// fire an @every 1s schedule while one is SIGKILLed and started again
// every 3 s and another is SIGSTOPped for 3 s: every tick from the first
// to the last is one job, made within a second of its tick; on a file
// store and in PostgreSQL, side by side, for 30 s (JOBDIR_LONG: 5
// minutes).
func TestE2EScheduleTicksOnceAcrossProcesses(t *testing.T) {
	onFileAndPostgres(t, testScheduleTicksOnce)
}

func testScheduleTicksOnce(t *testing.T, dir string) {
	run := 30 * time.Second
	if os.Getenv("JOBDIR_LONG") != "" {
		run = 5 * time.Minute
	}
	wd := t.TempDir()
	jdOK(t, dir, "schedule", "add", "beat", "--cron", "@every 1s", "--", "true")
	startWorker := func() *proc { return start(t, jobdirCmd(dir, wd, "work", "-q", "--concurrency", "4")) }
	workers := []*proc{startWorker(), startWorker(), startWorker()}
	begin := time.Now()
	deadline := begin.Add(run)
	lastKill, kills, stopped := begin, 0, false
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		el := time.Since(begin)
		if time.Since(lastKill) > 3*time.Second {
			lastKill = time.Now()
			kills++
			require.NoError(t, workers[0].cmd.Process.Signal(syscall.SIGKILL))
			<-workers[0].done
			workers[0] = startWorker()
		}
		if !stopped && el > run/2 {
			stopped = true
			require.NoError(t, workers[1].cmd.Process.Signal(syscall.SIGSTOP))
			go func() {
				time.Sleep(3 * time.Second)
				_ = workers[1].cmd.Process.Signal(syscall.SIGCONT)
			}()
		}
	}
	time.Sleep(3 * time.Second) // the SIGCONT
	for _, w := range workers {
		w.stop(t)
	}

	byTick := map[time.Time]jobstore.Job{}
	for _, j := range listAll(t, dir) {
		at, ok := strings.CutPrefix(j.Key, "schedule:beat:")
		if !ok {
			continue
		}
		tick, err := time.Parse(time.RFC3339, at)
		require.NoError(t, err)
		require.NotContains(t, byTick, tick, "two jobs of the tick %s", at)
		byTick[tick] = j
	}
	require.Greater(t, len(byTick), int(run/time.Second)-2)
	var first, last time.Time
	for tick := range byTick {
		if first.IsZero() || tick.Before(first) {
			first = tick
		}
		if tick.After(last) {
			last = tick
		}
	}
	var lags []time.Duration
	for tick := first; !tick.After(last); tick = tick.Add(time.Second) {
		j, ok := byTick[tick]
		require.True(t, ok, "no job of the tick %s (first %s, last %s)", tick, first, last)
		lag := j.CreatedAt.Sub(tick)
		lags = append(lags, lag)
		require.Less(t, lag, time.Second, "the tick %s's job was made %s after it", tick, lag)
	}
	slices.Sort(lags)
	t.Logf("%d ticks, each one job, through %d SIGKILLs and a SIGSTOP; a tick's job made %s after it (median), %s at most",
		len(byTick), kills, lags[len(lags)/2], lags[len(lags)-1])
}
