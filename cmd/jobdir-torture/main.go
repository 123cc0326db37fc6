// Command jobdir-torture attacks a store (a filestore, or pgstore with
// -postgres) with worker, submitter and canceller processes that it
// SIGKILLs, stops (SIGSTOP, then SIGCONT 1-5s later) and restarts at
// random, then checks every promise of the store against records kept
// outside it and prints the figures. It exits 1 if a promise was broken.
//
// Usage:
//
//	jobdir-torture [-duration 1m] [-workers 3] [-submitters 2] [-dir DIR] [-seed N]
//	jobdir-torture -postgres DSN [-pg-restart CMD -restart-every 2m] ...
//	jobdir-torture -lin [-processes 3] [-ops 150] [-postgres DSN]
//
// -long selects the long setting (more processes and keys, a chaos event
// every 1.5s). On a filestore, 2% of the file operations of the
// even-numbered workers and submitters fail with EIO or ENOSPC
// (-fault-rate). The report gives the latency of the store operations of
// processes that were not stopped while another was; -max-stall makes any
// such operation slower than its value a violation. With -postgres the
// store is a new schema of that database (left there for inspection), chaos
// also cuts the connections of worker processes (pg_terminate_backend), and
// -pg-restart names a shell command that restarts the server, run every
// -restart-every. The children are this same binary, re-executed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/internal/torture"
)

func main() {
	if torture.IsChild() {
		os.Exit(torture.ChildMain(torture.BackendFromEnv()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobdir-torture:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobdir-torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		dir        = fs.String("dir", "", "work directory, empty or absent (default: a new temporary directory, kept)")
		long       = fs.Bool("long", false, "the long setting: more processes and keys, a chaos event every 1.5s")
		duration   = fs.Duration("duration", 0, "how long chaos lasts (default 40s, or 20m with -long)")
		workers    = fs.Int("workers", 0, "worker processes (default 3, or 4 with -long)")
		runners    = fs.Int("runner-workers", -1, "how many workers use runner.Runner (default 1, or 2 with -long)")
		submitters = fs.Int("submitters", 0, "submitter processes (default 2, or 3 with -long)")
		waiters    = fs.Int("waiters", -1, "wait-storm processes (default 1, or 2 with -long)")
		waits      = fs.Int("waits", 0, "Waits each wait-storm process keeps going at once (default 200, or 1000 with -long)")
		jobs       = fs.Int("jobs", 0, "stop submitting after this many submits (default: no limit)")
		chaos      = fs.Duration("chaos", 0, "mean time between chaos events; negative disables chaos")
		stopEvery  = fs.Duration("stop-every", 0, "mean time between SIGSTOPs of a worker or submitter (default 4s); negative disables them")
		maxStop    = fs.Duration("max-stop", 0, "the longest a process stays stopped (default 5s; at least 1s)")
		stall      = fs.Duration("stall", 0, "count an operation of another process as a stall past this (default 1s)")
		maxStall   = fs.Duration("max-stall", 0, "make an operation of another process that takes longer than this while one is stopped a violation (default: counted only)")
		faultRate  = fs.Float64("fault-rate", -1, "share of file operations that fail with EIO or ENOSPC in the even-numbered workers and submitters (default 0.02; 0 for none)")
		seed       = fs.Int64("seed", 0, "random seed (default: from the clock)")
		lin        = fs.Bool("lin", false, "run the linearizability check instead of the torture run")
		processes  = fs.Int("processes", 3, "with -lin: client processes")
		ops        = fs.Int("ops", 150, "with -lin: operations per client")
		postgres   = fs.String("postgres", "", "run on pgstore in a new schema of this database (a DSN) instead of a filestore")
		pgRestart  = fs.String("pg-restart", "", "with -postgres: a shell command that restarts the PostgreSQL server")
		restartInt = fs.Duration("restart-every", 2*time.Minute, "with -pg-restart: how often to restart the server")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "jobdir-torture-")
		if err != nil {
			return err
		}
		*dir = d
	}
	fmt.Fprintf(stdout, "work directory: %s\n", *dir)
	backend := torture.FileBackend()
	if *postgres != "" {
		// The children inherit the environment: they open the same store.
		if err := os.Setenv(torture.EnvPostgres, *postgres); err != nil {
			return err
		}
		backend = torture.PGBackend(*postgres, *pgRestart)
		defer func() {
			fmt.Fprintf(stdout, "postgres schema: %s\n", torture.PGSchema(*dir+"/store"))
		}()
	}
	if *lin {
		return runLin(ctx, *dir, backend, *processes, *ops, *seed, stdout)
	}

	cfg := torture.ShortConfig(*dir, backend)
	if *long {
		cfg = torture.LongConfig(*dir, backend, 20*time.Minute)
	}
	if *pgRestart != "" {
		cfg.RestartInterval = *restartInt
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *workers > 0 {
		cfg.Workers = *workers
	}
	if *runners >= 0 {
		cfg.RunnerWorkers = *runners
	}
	if *submitters > 0 {
		cfg.Submitters = *submitters
	}
	if *chaos != 0 {
		cfg.ChaosInterval = *chaos
	}
	if *stopEvery != 0 {
		cfg.StopInterval = *stopEvery
	}
	cfg.MaxStop, cfg.StallLimit, cfg.MaxStall = *maxStop, *stall, *maxStall
	if *waiters >= 0 {
		cfg.Waiters = *waiters
	}
	if *waits > 0 {
		cfg.Waits = *waits
	}
	if *faultRate >= 0 {
		cfg.FaultRate = *faultRate
	}
	cfg.Jobs, cfg.Seed, cfg.Log = *jobs, *seed, stderr
	r, err := torture.Run(ctx, cfg)
	if r != nil {
		if _, werr := r.WriteTo(stdout); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func runLin(ctx context.Context, dir string, backend torture.Backend, processes, ops int, seed int64, stdout io.Writer) error {
	rep, err := torture.RunLinearizability(ctx, torture.LinRunConfig{
		Dir:       dir,
		Backend:   backend,
		Processes: processes,
		Lin:       torture.LinConfig{Ops: ops, Seed: seed},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d operations on %d jobs from %d processes: %s\n", rep.Ops, rep.Partitions, processes, rep.Result)
	for _, p := range rep.Illegal {
		fmt.Fprintf(stdout, "not linearizable:\n%s", p)
	}
	if !rep.Linearizable {
		if rep.Visualization != "" {
			fmt.Fprintf(stdout, "visualization: %s\n", rep.Visualization)
		}
		return errors.New("history not linearizable")
	}
	return nil
}
