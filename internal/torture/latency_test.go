package torture

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCheckLatencies shows which operations count as slowed down by a
// stopped process, and that MaxStall turns a stall into a violation.
func TestCheckLatencies(t *testing.T) {
	ms := int64(time.Millisecond)
	stops := map[string][]pause{"worker-0.0": {{from: 1000 * ms, to: 4000 * ms}}}
	ops := []opRec{
		{op: opClaim, proc: "worker-1.0", start: 1500 * ms, end: 3900 * ms},  // stalled 2.4s by worker-0's stop
		{op: opGet, proc: "submitter-0.0", start: 2000 * ms, end: 2010 * ms}, // during the stop, quick
		{op: opClaim, proc: "worker-0.0", start: 900 * ms, end: 4100 * ms},   // its own stop: left out
		{op: opSubmit, proc: "submitter-0.0", start: 5000 * ms, end: 5300 * ms},
	}
	var r Report
	checkLatencies(&r, ops, stops, time.Second, 0)
	require.True(t, r.OK(), "stalls are counted, not violations, without MaxStall: %v", r.Violations)
	require.Equal(t, 4, r.TimedOps)
	require.Equal(t, Latency{N: 2, P99: 2400 * time.Millisecond, Max: 2400 * time.Millisecond}, r.DuringStops)
	require.Equal(t, "claim by worker-1.0", r.WorstDuringStops)
	require.Equal(t, 1, r.Stalls)
	require.Equal(t, 1, r.OpsDuringStops[opClaim].N)
	require.Equal(t, 10*time.Millisecond, r.OpsDuringStops[opGet].Max)
	require.Equal(t, Latency{N: 1, P99: 300 * time.Millisecond, Max: 300 * time.Millisecond}, r.OpsOutsideStops[opSubmit])

	var strict Report
	checkLatencies(&strict, ops, stops, time.Second, 2*time.Second)
	require.Equal(t, 1, strict.NViolations)
	require.Contains(t, strict.Violations[0], "claim by worker-1.0 took 2.4s")

	// A Cancel, or a Submit that found its key's job, may have waited for
	// a job of the stopped process: a stall, not a violation.
	own := []opRec{
		{op: opCancel, proc: "canceller-0.0", start: 1500 * ms, end: 3900 * ms},
		{op: opKeyHit, proc: "submitter-0.0", start: 1500 * ms, end: 3900 * ms},
	}
	var lenient Report
	checkLatencies(&lenient, own, stops, time.Second, 2*time.Second)
	require.True(t, lenient.OK(), "%v", lenient.Violations)
	require.Equal(t, 2, lenient.Stalls)

	// A pause not yet ended (to == 0) covers everything after it.
	var open Report
	checkLatencies(&open, ops[:1], map[string][]pause{"worker-0.0": {{from: 1000 * ms}}}, time.Second, 0)
	require.Equal(t, 1, open.DuringStops.N)
}

// TestLatencyLogRoundTrip writes operations through timedStore's log and
// reads them back as the driver does, a torn last line included.
func TestLatencyLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, makeRecordDirs(dir))
	l, err := openLatencyLog(dir, "worker-2.1")
	require.NoError(t, err)
	start := monoNow()
	l.record(opClaim, start)
	l.record(opComplete, start)
	require.NoError(t, l.Close())
	f, err := os.OpenFile(filepath.Join(dir, latencyDir, "worker-2.1.log"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("get\t12")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	ops, err := readLatencies(dir)
	require.NoError(t, err)
	require.Len(t, ops, 2)
	require.Equal(t, opClaim, ops[0].op)
	require.Equal(t, "worker-2.1", ops[0].proc)
	require.Equal(t, start, ops[0].start)
	require.GreaterOrEqual(t, ops[1].end, ops[1].start)
}
