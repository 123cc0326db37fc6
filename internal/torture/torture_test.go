package torture

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
)

// childArgs makes a re-executed test binary run no test: TestMain sees
// envChild and plays the child instead.
var childArgs = []string{"-test.run=^$"}

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestTortureShort is the CI torture run: about 40 seconds of SIGKILL,
// SIGSTOP (1-5s, then SIGCONT) and restarts of real worker and submitter
// processes on one filestore, with a wait storm (200 Waits at once, every
// one must return), then the drain and every check, and the live-holder
// check on the running jobs sampled meanwhile. An operation of a process
// that was not stopped itself that takes longer than ciMaxStall while
// another process is stopped is a violation: a stopped process delays only
// its own jobs (JOBDIR_TORTURE_MAX_STALL sets another limit).
// JOBDIR_TORTURE_SECONDS lengthens it.
func TestTortureShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the torture run takes about a minute")
	}
	cfg := ShortConfig(t.TempDir(), FileBackend())
	if s := os.Getenv("JOBDIR_TORTURE_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		require.NoError(t, err)
		cfg.Duration = d
	}
	// The even-numbered workers and submitters run on a failing disk
	// (ShortConfig's FaultRate, 2% of file operations fail with EIO or
	// ENOSPC); JOBDIR_TORTURE_FAULT_RATE sets another rate (0 turns it off).
	if s := os.Getenv("JOBDIR_TORTURE_FAULT_RATE"); s != "" {
		rate, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		cfg.FaultRate = rate
	}
	cfg.MaxStall = ciMaxStall
	if s := os.Getenv("JOBDIR_TORTURE_MAX_STALL"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		cfg.MaxStall = d
	}
	cfg.Exe, cfg.Args = os.Args[0], childArgs
	cfg.Log = logWriter{t}
	r, err := Run(t.Context(), cfg)
	if r != nil {
		var b strings.Builder
		_, _ = r.WriteTo(&b)
		t.Logf("torture report:\n%s", b.String())
	}
	require.NoError(t, err)
	require.True(t, r.OK())
	// The run must have been a real attack, or its pass means little.
	require.Positive(t, r.WorkerKills, "no worker was killed")
	require.Positive(t, r.Reruns+r.LostClaims, "no job was re-run after a kill")
	require.Positive(t, r.Retries, "no job was retried")
	require.Positive(t, r.KeyHits, "no key collided")
	require.Positive(t, r.Outcomes[outcomeTimeout], "no attempt timed out")
	require.Positive(t, r.CanceledRunning, "no running job was canceled")
	require.Positive(t, r.CanceledQueued, "no job was canceled while queued")
	require.Positive(t, r.TreeAttempts, "no program left a tree of processes")
	require.Positive(t, r.Stops, "no process was stopped")
	require.Positive(t, r.DuringStops.N, "no operation ran while a process was stopped")
	require.Positive(t, r.Waits, "no Wait was made")
	require.Equal(t, r.Waits, r.WaitsReturned, "some Waits never returned")
	require.Positive(t, r.HolderSamples, "no running job was sampled")
	if cfg.FaultRate > 0 {
		require.Positive(t, r.InjectedFaults["EIO"]+r.InjectedFaults["ENOSPC"], "no I/O error was injected")
	}
	require.Equal(t, "clean", r.Fsck)
}

// ciMaxStall is the longest an operation of a process that is not stopped
// may take, in the CI torture run, while another process is stopped. The
// operations that overlap no stop take up to about 0.9 s on the shared
// 2-core CI machine (fsyncs queued behind other builds' writes, the
// scheduler): the limit is above that noise, and far below a wait for a
// stopped process, which lasts until its SIGCONT, 1 to 5 s later.
const ciMaxStall = 1500 * time.Millisecond

// TestLinearizableFilestore records a history of operations from three
// processes on one filestore and checks it with porcupine.
func TestLinearizableFilestore(t *testing.T) {
	dir := t.TempDir()
	rep, err := RunLinearizability(t.Context(), LinRunConfig{
		Dir:       dir,
		Backend:   FileBackend(),
		Processes: 3,
		Lin:       LinConfig{Clients: 2, Ops: 150, Keys: 6},
		Exe:       os.Args[0],
		Args:      childArgs,
	})
	require.NoError(t, err)
	t.Logf("%d operations on %d jobs: %s", rep.Ops, rep.Partitions, rep.Result)
	for _, p := range rep.Illegal {
		t.Logf("not linearizable:\n%s", p)
	}
	require.Equal(t, string(porcupine.Ok), rep.Result, "not linearizable; see %s", rep.Visualization)
	require.GreaterOrEqual(t, rep.Ops, 3*2*150)
}

func TestRunRejectsBadConfig(t *testing.T) {
	_, err := Run(t.Context(), Config{})
	require.Error(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/x", nil, 0o600))
	_, err = Run(t.Context(), Config{Dir: dir, Backend: FileBackend()})
	require.ErrorContains(t, err, "not empty")
	require.False(t, errors.Is(err, ErrViolations))
}

// TestTortureCatchesBrokenStore runs a short, chaos-free torture run
// against a store that forgets idempotency keys, and requires the run to
// say so.
func TestTortureCatchesBrokenStore(t *testing.T) {
	if testing.Short() {
		t.Skip("a torture run")
	}
	t.Setenv(envBroken, "keyloss") // inherited by the children
	cfg := Config{
		Dir: t.TempDir(), Backend: testBackend(),
		Workers: 1, Submitters: 2, Cancellers: -1, Keys: 3,
		Duration: 3 * time.Second, ChaosInterval: -1,
		Exe: os.Args[0], Args: childArgs,
	}
	r, err := Run(t.Context(), cfg)
	require.ErrorIs(t, err, ErrViolations)
	found := false
	for _, v := range r.Violations {
		found = found || strings.Contains(v, "Submit returned") || strings.Contains(v, "the store holds")
	}
	require.True(t, found, "violations: %q", r.Violations)
}

// TestTorturePostgres is the CI torture run on pgstore: about 15 seconds of
// SIGKILLs, SIGSTOPs and restarts of worker and submitter processes, each
// with its own pool, and cuts of every connection of a worker process
// (pg_terminate_backend), then the drain and every check: nothing lost,
// one job per key, no overlapping attempts, every job finished, and an
// attempt that lost its lease only after its worker's connections were
// cut. JOBDIR_TORTURE_SECONDS lengthens it; JOBDIR_TORTURE_DIR keeps its
// directory (see envTortureDir).
func TestTorturePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a torture run")
	}
	dsn := pgtest.Require(t)
	t.Setenv(EnvPostgres, dsn) // the children's backend
	dir := t.TempDir()
	if d := os.Getenv(envTortureDir); d != "" {
		dir = d // kept for reading after the run
	}
	cfg := ShortConfig(dir, PGBackend(dsn, ""))
	cfg.Duration = 15 * time.Second
	cfg.ChaosInterval = 500 * time.Millisecond
	cfg.CutPercent = 30
	if s := os.Getenv("JOBDIR_TORTURE_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		require.NoError(t, err)
		cfg.Duration = d
	}
	cfg.Exe, cfg.Args = os.Args[0], childArgs
	cfg.Log = logWriter{t}
	r, err := Run(t.Context(), cfg)
	if os.Getenv(envTortureDir) == "" {
		t.Cleanup(func() { pgtest.Drop(t, PGSchema(filepath.Join(dir, "store"))) })
	}
	if r != nil {
		var b strings.Builder
		_, _ = r.WriteTo(&b)
		t.Logf("torture report:\n%s", b.String())
	}
	require.NoError(t, err)
	require.True(t, r.OK())
	require.Positive(t, r.WorkerKills, "no worker was killed")
	require.Positive(t, r.Cuts, "no worker's connections were cut")
	require.Positive(t, r.Reruns+r.LostClaims+r.LeaseLosses, "no job was re-run after a kill or a cut")
	require.Positive(t, r.KeyHits, "no key collided")
	require.Positive(t, r.CanceledQueued, "no job was canceled while queued")
	require.Equal(t, "skipped", r.Fsck)
}

// TestLinearizablePostgres records a history of operations from three
// processes, each with its own pool, on one pgstore schema and checks it
// with porcupine.
func TestLinearizablePostgres(t *testing.T) {
	dsn := pgtest.Require(t)
	t.Setenv(EnvPostgres, dsn)
	dir := t.TempDir()
	rep, err := RunLinearizability(t.Context(), LinRunConfig{
		Dir:       dir,
		Backend:   PGBackend(dsn, ""),
		Processes: 3,
		Lin:       LinConfig{Clients: 2, Ops: 150, Keys: 6},
		Exe:       os.Args[0],
		Args:      childArgs,
	})
	t.Cleanup(func() { pgtest.Drop(t, PGSchema(filepath.Join(dir, "store"))) })
	require.NoError(t, err)
	t.Logf("%d operations on %d jobs: %s", rep.Ops, rep.Partitions, rep.Result)
	for _, p := range rep.Illegal {
		t.Logf("not linearizable:\n%s", p)
	}
	require.Equal(t, string(porcupine.Ok), rep.Result, "not linearizable; see %s", rep.Visualization)
	require.GreaterOrEqual(t, rep.Ops, 3*2*150)
}
