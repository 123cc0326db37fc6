package torture

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// Backend tells the torture run how to reach the store under test. Every
// process of a run (the driver and each child) calls Open once.
type Backend struct {
	// Open opens the store in dir, creating it if needed. Required.
	Open func(ctx context.Context, dir string) (jobstore.Store, error)
	// Fsck reopens the store in dir once every other process has closed
	// it, then checks it. Nil skips the check, and the Report says so.
	Fsck func(ctx context.Context, dir string) (FsckResult, error)
	// Cut, if set, is a chaos event of its own: it cuts the connections
	// of the live process pid to the store's server (as a network failure
	// would) without stopping the process, and returns how many it cut,
	// once they are gone. A worker whose connections were cut may lose
	// the attempts it runs; the checks allow that, and only that, for
	// attempts claimed before a cut of their worker ended and not ended
	// before it began.
	Cut func(ctx context.Context, dir string, pid int) (int, error)
	// Restart, if set, restarts the store's server; a run calls it every
	// Config.RestartInterval. Every worker counts as cut at that moment.
	Restart func(ctx context.Context) error
	// Transient reports whether an error of the store is one a retry may
	// outlive (a connection cut): the children retry such errors. Nil
	// means none is; every store error ends the child, which is then a
	// violation.
	Transient func(error) bool
	// LeaseLost reports whether an ErrNotHeld from Complete says that the
	// worker's process lost its leases with its connections (not that the
	// store gave the job away while the worker lived). The worker then
	// records the attempt's outcome as lost, which the checks allow only
	// after a cut of its connections. Nil means never.
	LeaseLost func(error) bool
	// OpenFaulty, if set, opens the store as Open does, with its file
	// operations failing as inj says (a failing or full disk). The
	// children that Config.FaultRate names use it. Nil means the store
	// cannot inject faults, and no child runs with them.
	OpenFaulty func(ctx context.Context, dir string, inj *fsfault.Injector) (jobstore.Store, error)
}

// FsckResult is what Backend.Fsck found.
type FsckResult struct {
	// RepairedAtOpen lists what opening the store repaired: the residue of
	// killed processes (temporary files, half-done operations), which the
	// store promises to clean up at open.
	RepairedAtOpen []string
	// Problems lists what the check found after that; the store promises
	// none.
	Problems []string
}

// Config describes a torture run. The zero value of each field but Dir and
// Backend has a default, given in its comment.
type Config struct {
	// Dir is the run's work directory: the store goes in Dir/store and the
	// records in Dir/records. It must be empty or absent. Required.
	Dir string
	// Backend opens and checks the store. Required.
	Backend Backend
	// Workers is the number of worker processes. Zero means 3.
	Workers int
	// WorkerConcurrency is the number of attempts each worker process runs
	// at once. Zero means 2.
	WorkerConcurrency int
	// RunnerWorkers is how many of the workers run jobs with
	// runner.Runner, as production workers do; the others use the run's
	// own minimal claim loop, which exercises the store alone. Zero means
	// none; ShortConfig and LongConfig mix the two.
	RunnerWorkers int
	// Submitters is the number of submitter processes. Zero means 2.
	Submitters int
	// Cancellers is the number of processes that cancel queued and running
	// jobs submitted by others. Zero means 1; negative means none.
	Cancellers int
	// Waiters is the number of wait-storm processes: each keeps Waits
	// Waits going at once on queued and running jobs, and every one must
	// return the job once it ends. They are neither killed nor stopped.
	// Zero means none.
	Waiters int
	// Waits is how many Waits each waiter keeps going. Zero means 200.
	Waits int
	// Duration is how long submitting and chaos last before the drain.
	// Zero means one minute.
	Duration time.Duration
	// Jobs, when positive, stops the submitters once they have recorded
	// this many submits between them, even before Duration is over.
	Jobs int
	// SubmitInterval is each submitter's mean pause between submits. Zero
	// means 25ms.
	SubmitInterval time.Duration
	// Keys is the size of the idempotency-key space that all submitters
	// draw from, so that their keys collide. Zero means 40.
	Keys int
	// ChaosInterval is the mean time between chaos events (a SIGKILL and
	// restart, or a cut of a worker's connections). Zero means 1s;
	// negative disables chaos, SIGSTOPs included.
	ChaosInterval time.Duration
	// StopInterval is the mean time between SIGSTOPs of a worker or
	// submitter, which is continued (SIGCONT) MinStop to MaxStop later; one
	// process is stopped at a time. Zero means 4s; negative means none.
	StopInterval time.Duration
	// MinStop and MaxStop bound how long a process stays stopped. Zero
	// means 1s and 5s.
	MinStop, MaxStop time.Duration
	// StallLimit is how long an operation of a process that is not
	// stopped may take, while another is, before the Report counts it as a
	// stall (Report.Stalls). Zero means 1s.
	StallLimit time.Duration
	// MaxStall, when positive, makes every such operation that takes
	// longer a violation. Zero counts and reports stalls only.
	MaxStall time.Duration
	// CutPercent is the share of chaos events, in percent, that cut a
	// worker's connections instead, when the Backend can (Backend.Cut).
	// Zero means 20; negative means none.
	CutPercent int
	// RestartInterval, when positive and the Backend can restart its
	// server (Backend.Restart), restarts it that often during the chaos.
	RestartInterval time.Duration
	// FaultRate is the share of file operations (writes, renames, links,
	// removals, fsyncs) that fail with EIO or ENOSPC in the workers and
	// submitters with an even index, when the Backend can inject faults
	// (Backend.OpenFaulty). Those children retry the failed calls; every
	// check must hold all the same. Zero means none.
	FaultRate float64
	// HolderBound is how long a job may be seen running after its worker
	// was killed, or after its live worker (not stopped since) ended the
	// attempt, before it is a violation: no live process holds its lease.
	// Zero means 15s (a killed worker's job is normally running again in
	// about a second; an exec job's processes have 5s to exit).
	HolderBound time.Duration
	// DrainTimeout bounds the wait, after chaos stops, for every job to
	// reach a terminal state. Zero means two minutes.
	DrainTimeout time.Duration
	// Seed seeds every random choice of the run; zero picks one from the
	// clock. The Report records it.
	Seed int64
	// Exe and Args start a child: Exe is run with Args and the child's role
	// in its environment, and must call ChildMain when IsChild reports
	// true. Zero Exe means os.Executable().
	Exe  string
	Args []string
	// Log receives progress lines. Nil means io.Discard.
	Log io.Writer
}

// ShortConfig returns the setting CI runs: about 40 seconds of chaos on a
// small fleet, with 2% of the file operations of some processes failing
// and 200 Waits going at once, finishing in about a minute.
func ShortConfig(dir string, b Backend) Config {
	return Config{
		Dir:           dir,
		Backend:       b,
		Workers:       3,
		RunnerWorkers: 1,
		Submitters:    2,
		Duration:      40 * time.Second,
		ChaosInterval: 700 * time.Millisecond,
		FaultRate:     0.02,
		Waiters:       1,
		Waits:         200,
	}
}

// LongConfig returns the setting for a long run of duration d: more
// processes, a chaos event every 1.5s on average (about 500 kills in 20
// minutes), 2% of the file operations of some processes failing, and 2,000
// Waits going at once.
func LongConfig(dir string, b Backend, d time.Duration) Config {
	return Config{
		Dir:           dir,
		Backend:       b,
		Workers:       4,
		RunnerWorkers: 2,
		Submitters:    3,
		Cancellers:    1,
		Duration:      d,
		Keys:          200,
		ChaosInterval: 1500 * time.Millisecond,
		FaultRate:     0.02,
		Waiters:       2,
		Waits:         1000,
	}
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, fmt.Errorf("torture: Config.Dir is required")
	}
	if c.Backend.Open == nil {
		return c, fmt.Errorf("torture: Config.Backend.Open is required")
	}
	setDefault(&c.Workers, 3)
	setDefault(&c.WorkerConcurrency, 2)
	setDefault(&c.Submitters, 2)
	setDefault(&c.Cancellers, 1)
	if c.Cancellers < 0 {
		c.Cancellers = 0
	}
	setDefault(&c.Waits, 200)
	setDefault(&c.Duration, time.Minute)
	setDefault(&c.SubmitInterval, 25*time.Millisecond)
	setDefault(&c.Keys, 40)
	setDefault(&c.ChaosInterval, time.Second)
	setDefault(&c.StopInterval, 4*time.Second)
	if c.StopInterval < 0 || c.ChaosInterval < 0 {
		c.StopInterval = 0
	}
	setDefault(&c.MinStop, time.Second)
	setDefault(&c.MaxStop, 5*time.Second)
	c.MaxStop = max(c.MaxStop, c.MinStop)
	setDefault(&c.StallLimit, time.Second)
	setDefault(&c.CutPercent, 20)
	if c.CutPercent < 0 {
		c.CutPercent = 0
	}
	setDefault(&c.HolderBound, 15*time.Second)
	setDefault(&c.DrainTimeout, 2*time.Minute)
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c, nil
}

func setDefault[T int | time.Duration](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}
