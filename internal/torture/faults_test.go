package torture

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
)

// TestInjectorRecordsEachFault shows that every failure the injector of a
// faulty child returns is in its fault log, which the report counts.
func TestInjectorRecordsEachFault(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, makeRecordDirs(dir))
	spec := childSpec{Role: roleWorker, Index: 0, Name: "worker-0.0", RecordDir: dir, Seed: 7}
	inj := newInjector(spec, 0.3)
	failed := map[string]int{}
	for range 1000 {
		err := inj.Check(fsfault.Rename, "/store/queued/x.json")
		switch {
		case err == nil:
		case injectedError(err) && errors.Is(err, syscall.EIO):
			failed["EIO"]++
		case injectedError(err) && errors.Is(err, syscall.ENOSPC):
			failed["ENOSPC"]++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	require.InDelta(t, 300, failed["EIO"]+failed["ENOSPC"], 60)
	require.Positive(t, failed["EIO"])
	require.Positive(t, failed["ENOSPC"])
	byErrno, procs, err := countFaults(dir)
	require.NoError(t, err)
	require.Equal(t, failed, byErrno)
	require.Equal(t, 1, procs)

	require.True(t, faulty(roleWorker, 0))
	require.True(t, faulty(roleSubmitter, 2))
	require.False(t, faulty(roleWorker, 1))
	require.False(t, faulty(roleCanceller, 0))
}

// TestCheckWaits shows that a Wait that found its job gone is a violation
// only if a Submit had returned that job's ID, and how wake-ups split by
// stops.
func TestCheckWaits(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, makeRecordDirs(dir))
	ms := int64(time.Millisecond)
	log := "N\t" + idA + "\nN\t" + idB + "\nN\t" + idB + "\n" +
		"K\t1000000000\t1005000000\nK\t2000000000\t2700000000\nW\t10\t9\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, waitDir, "waiter-0.0.log"), []byte(log), 0o600))
	w, err := readWaits(dir)
	require.NoError(t, err)
	require.Equal(t, []string{idA, idB}, w.notFound)
	require.Len(t, w.wakes, 2)
	var r Report
	checkWaits(&r, w, map[string]bool{idB: true}, map[string][]pause{"worker-0.0": {{from: 1900 * ms, to: 2100 * ms}}})
	require.Equal(t, 10, r.Waits)
	require.Equal(t, 9, r.WaitsReturned)
	require.Equal(t, Latency{N: 2, P99: 700 * time.Millisecond, Max: 700 * time.Millisecond}, r.WaitWake)
	require.Equal(t, Latency{N: 1, P99: 700 * time.Millisecond, Max: 700 * time.Millisecond}, r.WaitWakeDuringStops)
	require.Equal(t, Latency{N: 1, P99: 5 * time.Millisecond, Max: 5 * time.Millisecond}, r.WaitWakeOutsideStops)
	require.Equal(t, 1, r.VanishedJobs)
	require.Equal(t, 1, r.NViolations)
	require.Contains(t, r.Violations[0], idB)
}
