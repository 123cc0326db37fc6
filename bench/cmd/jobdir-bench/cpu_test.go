package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCPUPerThousand(t *testing.T) {
	u := cpuUsage{User: 300 * time.Millisecond, Sys: 900 * time.Millisecond}
	v, ok := cpuPerThousand(u, 2000)
	require.True(t, ok)
	require.InDelta(t, 0.6, v, 1e-12, "1.2 s of CPU for 2,000 jobs is 0.6 s per 1,000")
	v, ok = cpuPerThousand(cpuUsage{Sys: 5 * time.Microsecond}, 1)
	require.True(t, ok)
	require.InDelta(t, 0.005, v, 1e-12)
	for _, jobs := range []float64{0, -1} {
		_, ok := cpuPerThousand(u, jobs)
		require.False(t, ok, "no figure for %v jobs", jobs)
	}
}

func TestCPUUsageArithmetic(t *testing.T) {
	before := cpuUsage{User: time.Second, Sys: 2 * time.Second}
	after := cpuUsage{User: 1500 * time.Millisecond, Sys: 2250 * time.Millisecond}
	d := after.sub(before)
	require.Equal(t, cpuUsage{User: 500 * time.Millisecond, Sys: 250 * time.Millisecond}, d)
	require.Equal(t, 750*time.Millisecond, d.total())
	require.Equal(t, cpuUsage{User: time.Second, Sys: 500 * time.Millisecond}, d.add(d))
}

// TestCPULine checks the child protocol's CPU report round trip and that a
// malformed line is an error, not a zero.
func TestCPULine(t *testing.T) {
	u := cpuUsage{User: 1234567 * time.Nanosecond, Sys: 89 * time.Millisecond}
	line := cpuLine(u, 1000)
	require.Equal(t, "cpu 1234567 89000000 1000", line)
	f := strings.Fields(line)
	require.Equal(t, "cpu", f[0])
	got, n, err := parseCPULine(f[1:])
	require.NoError(t, err)
	require.Equal(t, u, got)
	require.Equal(t, int64(1000), n)
	for _, bad := range [][]string{nil, {"1", "2"}, {"1", "2", "x"}, {"1", "-2", "3"}, {"1", "2", "3", "4"}} {
		_, _, err := parseCPULine(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestSelfCPUAdvances(t *testing.T) {
	u0, err := selfCPU()
	require.NoError(t, err)
	deadline := time.Now().Add(20 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	u1, err := selfCPU()
	require.NoError(t, err)
	require.Positive(t, u1.sub(u0).total())
}

// TestRatiosShowCPU checks the CPU columns of the ratio table: jobdir's CPU
// per 1,000 jobs against the same best peer as the throughput, not the
// peer with the lowest CPU, and dashes where there is none.
func TestRatiosShowCPU(t *testing.T) {
	r := newResults()
	r.add(mInsert16, "jobdir-file", 3000)
	r.add(mInsert16, "goqite-full", 2000)
	r.add(mInsert16, "river-full", 1000)
	r.add(cpuMetric(mInsert16), "jobdir-file", 0.9)
	r.add(cpuMetric(mInsert16), "goqite-full", 0.6)
	r.add(cpuMetric(mInsert16), "river-full", 0.1)
	r.add(mBatch, "jobdir-file", 9000)
	r.add(mBatch, "river-full", 15000)
	r.add(latencyMetric(false, 50), "jobdir-file", 1.5)
	rp := &report{r: r, systems: allSystems(), cfg: &config{Rounds: 1}}
	var md strings.Builder
	rp.writeRatios(&md, rp.systems)
	out := md.String()
	require.Contains(t, out, "| CPU/1k jobs | peer CPU/1k jobs | × peer CPU |")
	require.Contains(t, out, "| insert, 16 concurrent clients (jobs/s) | jobdir file (durable) | 3,000 | goqite SQLite FULL | 2,000 | 1.50 | — | — | 0.900 | 0.600 | 1.50 |")
	require.Contains(t, out, "| batch insert, 1,000 per call (jobs/s) | jobdir file (durable) | 9,000 | River SQLite FULL | 15,000 | 0.60 | — | — | — | — | — |")
	require.Contains(t, out, "| submit to handler start, other process, idle, p50 (ms) | jobdir file (durable) | 1.50 | — | — | — | — | — | — | — | — |")

	rp.writeGroupIntro(&md, "cpu", "CPU per 1,000 jobs (lower is better)", cpuIntro, rp.systems)
	require.Contains(t, md.String(), "| insert, 16 concurrent clients | CPU s per 1,000 jobs | 0.900 |")
}

// TestCPURowsOrder checks that the CPU table follows the throughput table's
// order, with the benchmark process's row right after its work-off's.
func TestCPURowsOrder(t *testing.T) {
	r := newResults()
	w1, w2, w2big := workoffMetric(1, 100), workoffMetric(2, 100), workoffMetric(2, 101)
	for _, m := range []metric{cpuParentMetric(w2), cpuMetric(w2big), cpuMetric(w2), cpuMetric(w1), cpuMetric(mBatch), cpuMetric(mInsert1)} {
		r.add(m, "jobdir-file", 1)
	}
	var ids []string
	for _, m := range r.sortedMetrics("cpu") {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{"cpu-insert-1", "cpu-batch", "cpu-workoff-1p-100w", "cpu-workoff-2p-100w", "cpu-parent-workoff-2p-100w", "cpu-workoff-2p-101w"}, ids)
}
