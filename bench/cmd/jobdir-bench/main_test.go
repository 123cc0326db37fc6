package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary play a child process: multi-process
// workloads re-execute the running binary, which is this one under test.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	os.Exit(m.Run())
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want summary
	}{
		{"empty", nil, summary{}},
		{"one", []float64{3}, summary{N: 1, Median: 3, Min: 3, Max: 3}},
		{"odd", []float64{5, 1, 3}, summary{N: 3, Median: 3, Min: 1, Max: 5}},
		{"even", []float64{4, 1, 3, 2}, summary{N: 4, Median: 2.5, Min: 1, Max: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, summarize(tt.in))
		})
	}
}

func TestPercentile(t *testing.T) {
	vs := make([]float64, 100)
	for i := range vs {
		vs[i] = float64(100 - i) // 100 … 1, unsorted on purpose
	}
	require.Equal(t, 50.0, percentile(vs, 50))
	require.Equal(t, 99.0, percentile(vs, 99))
	require.Equal(t, 100.0, percentile(vs, 100))
	require.Equal(t, 7.0, percentile([]float64{7}, 99))
	require.Zero(t, percentile(nil, 50))
}

func TestFmtNum(t *testing.T) {
	for in, want := range map[float64]string{
		1234567: "1,234,567", 999.6: "1,000", 123.4: "123", 12.34: "12.3", 1.234: "1.23", 0.1234: "0.123",
		0.01234: "0.0123", 0.003339: "0.00334", 0.0001234: "0.000123", 0.00000012: "0.000000", 0: "0.000",
	} {
		require.Equal(t, want, fmtNum(in), "fmtNum(%v)", in)
	}
}

// TestTargets checks the verdicts against synthetic medians: each
// throughput target met or missed against the best durable peer (not the
// faster no-fsync one) or the floor, one not measured, and the latency
// targets listed only when measured.
func TestTargets(t *testing.T) {
	r := newResults()
	// The work-off target is at 100 workers, not the largest count run.
	cfg := &config{Rounds: 1, Workers: []int{100, 200}, ScaleSizes: []int{1000, 100000}}
	wo := workoffMetric(2, 100)
	r.add(wo, "jobdir-file", 2100)
	r.add(wo, "river-full", 1000)
	r.add(wo, "goqite-full", 900)
	r.add(wo, "goqite-normal", 5000) // not durable: not a peer of the durable store
	r.add(workoffMetric(2, 200), "jobdir-file", 1)
	r.add(workoffMetric(2, 200), "river-full", 1000)
	r.add(mInsert1, "jobdir-file", 1000)
	r.add(mInsert1, "goqite-full", 1000)
	r.add(mFloor1, "floor", 1200)
	r.add(mInsert16, "jobdir-file", 2900)
	r.add(mInsert16, "goqite-full", 2000)
	r.add(mInsert16, "river-full", 1000)
	r.add(latencyMetric(false, 50), "jobdir-file", 0.9)
	r.add(mIdleFlush, "floor", 0.6)
	r.add(mIdleWake, "floor", 0.2)
	rp := &report{r: r, systems: allSystems(), cfg: cfg}
	got := map[string]target{}
	var names []string
	for _, tg := range rp.targets(defaultFileSystem) {
		got[tg.Name] = tg
		names = append(names, tg.Name)
	}
	require.Equal(t, []string{
		"durable work-off, 100 workers × 2 processes ≥ 2× the best durable SQLite peer",
		"batch insert, 1,000 per call ≥ 1× the best durable SQLite peer",
		"durable inserts, 1 client ≥ 1× the best durable SQLite peer",
		"durable inserts, 1 client ≥ 0.9× the floor (durable creates, 1 writer)",
		"durable inserts, 16 clients ≥ 1.5× the best durable SQLite peer",
		"submit to handler start, other process, idle, p50 < 1 ms",
	}, names)
	require.Equal(t, target{names[0], "2,100 vs River SQLite FULL 1,000 = 2.10×", "**met**"}, got[names[0]])
	require.Equal(t, target{names[1], "—", "n/a (not measured)"}, got[names[1]])
	require.Equal(t, "**met**", got[names[2]].Met, "1× the peer is met")
	require.Equal(t, target{names[3], "1,000 vs floor 1,200 = 0.83×", "missed"}, got[names[3]])
	require.Equal(t, target{names[4], "2,900 vs goqite SQLite FULL 2,000 = 1.45×", "missed"}, got[names[4]])
	require.Equal(t, target{names[5], "0.900 ms (the disk's idle flush alone: 0.600 ms; a wake-up in another process: 0.200 ms)", "**met**"}, got[names[5]])

	// The SyncFS store has its targets only when it was measured.
	require.Empty(t, rp.targets(syncFSSystem))
	var md strings.Builder
	rp.writeTargets(&md)
	require.Contains(t, md.String(), "### Targets (jobdir file store, durable)")
	require.NotContains(t, md.String(), "SyncFS")
}

// TestBestPeer checks that the durable store is compared with durable peers
// only, that lower wins for a latency, and that the file store's targets
// take the SQLite peers alone.
func TestBestPeer(t *testing.T) {
	r := newResults()
	r.add(mInsert1, "river-full", 100)
	r.add(mInsert1, "goqite-normal", 900)
	lat := latencyMetric(false, 50)
	r.add(lat, "river-full", 30)
	r.add(lat, "goqite-full", 60)
	rp := &report{r: r, systems: allSystems(), cfg: &config{Rounds: 1}}

	v, name, ok := rp.bestPeer(mInsert1, true)
	require.True(t, ok)
	require.Equal(t, 100.0, v)
	require.Equal(t, "River SQLite FULL", name)
	v, _, _ = rp.bestPeer(mInsert1, false)
	require.Equal(t, 900.0, v)
	v, name, _ = rp.bestPeer(lat, true)
	require.Equal(t, 30.0, v)
	require.Equal(t, "River SQLite FULL", name)

	// The file store's targets are against the SQLite peers, even where a
	// peer on PostgreSQL does better.
	r.add(mInsert1, "river-pg-tuned", 5000)
	v, name, _ = rp.bestPeer(mInsert1, true)
	require.Equal(t, "River PG (tuned fetch)", name)
	v, name, ok = rp.bestSQLitePeer(mInsert1)
	require.True(t, ok)
	require.Equal(t, 100.0, v)
	require.Equal(t, "River SQLite FULL", name)
}

// TestRunSmoke runs the command end to end on small figures: the in-process
// store and one SQLite peer, in one and in two real processes, and checks
// the files it writes.
func TestRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real workloads for several seconds")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	err := Run(ctx, []string{
		"-quick", "-systems", "memstore,goqite-normal", "-only", "insert,batch,workoff,floor",
		"-jobs", "200", "-dir", t.TempDir(), "-out", out,
	}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())

	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	require.NoError(t, err)
	require.Equal(t, stdout.String(), string(md))
	for _, want := range []string{"insert, 1 client", "work off, 100 worker(s) × 2 process(es)", "durable file creates, 4 writers", "jobdir memstore", "goqite SQLite NORMAL", "### CPU per 1,000 jobs (lower is better)"} {
		require.Contains(t, string(md), want)
	}
	require.NotContains(t, string(md), "failed for", "a workload failed:\n%s", md)

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res struct {
		Series []series `json:"series"`
	}
	require.NoError(t, json.Unmarshal(raw, &res))
	found := map[string]bool{}
	for _, s := range res.Series {
		require.NotEmpty(t, s.Values, "%s/%s", s.Metric, s.System)
		for _, v := range s.Values {
			require.Positive(t, v, "%s/%s", s.Metric, s.System)
		}
		found[s.Metric+"/"+s.System] = true
	}
	require.True(t, found["workoff-2p-100w/goqite-normal"], "two-process work-off missing: %v", found)
	// The floor of the idle latency figures: a flush and a wake-up in
	// another process.
	require.True(t, found["floor-idle-flush/floor"], "idle flush missing: %v", found)
	require.True(t, found["floor-idle-wake/floor"], "idle wake missing: %v", found)
	require.True(t, found["workoff-1p-100w/memstore"])
	require.False(t, found["workoff-2p-100w/memstore"], "memstore cannot be shared by processes")
	// Every throughput figure has its CPU figure, the two-process work-off's
	// from the child processes.
	for _, id := range []string{"insert-1", "insert-16", "batch", "workoff-1p-100w", "workoff-2p-100w"} {
		require.True(t, found["cpu-"+id+"/goqite-normal"], "no CPU figure of %s: %v", id, found)
	}
	require.True(t, found["cpu-insert-1/memstore"])
	// The benchmark's own process, which only polls in a 2-process
	// work-off, is recorded apart.
	require.True(t, found["cpu-parent-workoff-2p-100w/goqite-normal"])
	require.False(t, found["cpu-parent-workoff-1p-100w/goqite-normal"])

	svg, err := os.ReadFile(filepath.Join(out, "workoff.svg"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(svg), "<svg"))
	require.Contains(t, string(svg), "<polyline")

	// -from writes the same report again from the raw figures.
	again := t.TempDir()
	var md2 bytes.Buffer
	require.NoError(t, Run(ctx, []string{"-from", filepath.Join(out, "results.json"), "-out", again}, &md2, &stderr))
	require.Equal(t, string(md), md2.String())
}

func TestMetricByID(t *testing.T) {
	get, _, _, _, rss := scaleMetrics(1500)
	for _, m := range []metric{cliMetric("get", 100_000), cliMetric("submit", 1500), mInsert1, mKill, mIdleFlush, mIdleWake, workoffMetric(2, 100), latencyMetric(true, 99), get, rss, cpuMetric(mBatch), cpuMetric(workoffMetric(2, 100)), cpuParentMetric(workoffMetric(2, 100))} {
		got, ok := metricByID(m.ID)
		require.True(t, ok, m.ID)
		require.Equal(t, m, got)
	}
	for _, id := range []string{"nonsense", "cli-nonsense-1k", "cli-get-", "cpu-kill", "cpu-cpu-batch", "cpu-", "cpu-parent-batch", "cpu-parent-cpu-workoff-2p-10w"} {
		_, ok := metricByID(id)
		require.False(t, ok, id)
	}
}

// TestRunFailsWhenNothingMeasured: a run whose every figure failed (here:
// no PostgreSQL where -postgres points) exits with an error, so that a
// script or CI does not take it for a result.
func TestRunFailsWhenNothingMeasured(t *testing.T) {
	var stderr bytes.Buffer
	err := Run(t.Context(), []string{"-only", "batch", "-systems", "jobdir-pg", "-rounds", "1",
		"-postgres", "host=" + t.TempDir() + " dbname=none connect_timeout=2", "-dir", t.TempDir(), "-out", t.TempDir()}, &bytes.Buffer{}, &stderr)
	require.ErrorContains(t, err, "every figure failed")
}

// TestCLIFigures runs the cli figures on small file stores: each command,
// a whole process of the jobdir binary built from this module, gets a
// positive figure at each size, and the targets compare the sizes.
func TestCLIFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jobdir and runs it 25 times per store")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	require.NoError(t, Run(t.Context(), []string{"-only", "cli", "-systems", "jobdir-file", "-rounds", "1",
		"-cli-scale", "20,200", "-dir", t.TempDir(), "-out", out}, &stdout, &stderr), stderr.String())
	md := stdout.String()
	require.NotContains(t, md, "failed for", md)
	for _, cmd := range cliCommands {
		for _, n := range []int{20, 200} {
			require.Contains(t, md, cliMetric(cmd, n).Title)
		}
		require.Contains(t, md, "jobdir "+cmd+" (whole process) at 200 jobs within 1.5× of 20")
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-only", "nonsense"},
		{"-systems", "postgres"},
		{"-workers", "0"},
		{"-rounds", "0"},
	} {
		var stderr bytes.Buffer
		err := Run(t.Context(), append(args, "-out", t.TempDir()), &bytes.Buffer{}, &stderr)
		require.Error(t, err, "%v", args)
	}
}

// TestLatencyWorkersKeepRiverAhead checks the sizing of the latency child:
// River with its defaults starts at most one handler's worth of jobs per
// FetchCooldown, so the child must have enough handlers for twice the
// background load (the loaded figure of River PG failed with 4).
func TestLatencyWorkersKeepRiverAhead(t *testing.T) {
	perSecond := int(time.Second / river.FetchCooldownDefault)
	for _, rate := range []int{1, 20, 50, 51, 100, 333} {
		w := latencyWorkers(rate)
		require.GreaterOrEqual(t, w, 4, "rate %d", rate)
		require.GreaterOrEqual(t, w*perSecond, 2*rate, "rate %d: %d workers", rate, w)
	}
	require.Equal(t, 10, latencyWorkers(50))
	require.Equal(t, 4, latencyWorkers(20))
}

// TestBacklog checks that the loaded latency run tells a child that keeps up
// from one whose queue grows, and says by how much.
func TestBacklog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var steady, growing backlog
	for i := range 11 {
		now := t0.Add(time.Duration(i) * time.Second)
		sub := int64(60 * i)
		steady.sample(now, sub+5, sub+2)        // 3 in flight throughout
		growing.sample(now, sub+5, int64(40*i)) // 40 of 60 jobs/s started
	}
	require.False(t, steady.fellBehind(50))
	require.True(t, growing.fellBehind(50))
	require.Equal(t, "the child started 40 jobs/s of the 60/s submitted (background load 50/s and the samples); 205 jobs waited at the last sample, 5 at the first",
		growing.describe(50))

	var none backlog
	require.False(t, none.fellBehind(50))
	require.Equal(t, "no sample had come back under load", none.describe(50))
}

// TestSampleGapSpreadsOverFetchCooldown checks that the latency samples are
// submitted at every point of River's default fetch period rather than at
// one: a fixed gap after each sample charged River nearly the whole period.
func TestSampleGapSpreadsOverFetchCooldown(t *testing.T) {
	const buckets = 10
	period := river.FetchCooldownDefault
	hit := make([]int, buckets)
	for i := 1; i <= 100; i++ {
		g := sampleGap(i)
		require.GreaterOrEqual(t, g, 7*time.Millisecond)
		require.Less(t, g, 7*time.Millisecond+period+10*time.Millisecond)
		hit[int((g%period)*buckets/period)]++
	}
	for b, n := range hit {
		require.GreaterOrEqual(t, n, 8, "few samples land in tenth %d of the fetch period: %v", b, hit)
	}
}

// TestLatencyRiverPGKeepsUp runs the latency figures of River PG with its
// defaults end to end (a real child process, the PostgreSQL server of
// -postgres) and checks that the loaded figure is one of River, not of a
// growing queue: no note that the child fell behind, and a p99 within
// River's 1 s poll. With the 4 workers the child had before, River started
// 40 of the 50 jobs/s and this run's loaded p99 was about 20 s.
func TestLatencyRiverPGKeepsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs River against PostgreSQL for about half a minute")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		t.Skipf("no PostgreSQL at %q: %v", pgDSN(), err)
	}
	require.NoError(t, conn.Close(ctx))

	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err = Run(ctx, []string{"-quick", "-systems", riverPGSystemName, "-only", "latency", "-dir", t.TempDir(), "-out", out}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	require.NotContains(t, stdout.String(), "failed for", "%s", stdout.String())

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res struct {
		Series []series `json:"series"`
	}
	require.NoError(t, json.Unmarshal(raw, &res))
	got := map[string]series{}
	for _, s := range res.Series {
		got[s.Metric] = s
	}
	p99 := got[latencyMetric(true, 99).ID]
	require.Len(t, p99.Values, 1, "no loaded p99 in %s", raw)
	require.Empty(t, p99.Notes, "the child fell behind the load")
	require.Less(t, p99.Values[0], 1000.0, "loaded p99 (ms) beyond River's 1 s poll")
}
