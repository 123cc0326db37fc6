package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
	"github.com/jobdir/jobdir/runner/otelrunner"
)

// idlePoll is how often work --exit-when-idle checks whether it is idle.
const idlePoll = 200 * time.Millisecond

// workerFlags are the flags of the commands that run exec jobs.
type workerFlags struct {
	shutdownGrace time.Duration
	killGrace     time.Duration
	maxLogBytes   int64
	jobTimeout    time.Duration
	quiet         bool
	cleanEnv      bool
	containment   string
	// groupAccess is the global --group-access, which also sets the
	// permissions of the job logs.
	groupAccess bool
	// otel is --otel; tracing is its spans' options, once started (see
	// startTracing).
	otel    bool
	tracing *otelrunner.Options
	// queues is --queue: the queues to take jobs from, none for all.
	queues []string
	// noSchedules is --no-schedules: fire no schedule's ticks.
	noSchedules bool
}

// checkQueues refuses a --queue that is not a queue name.
func (wf *workerFlags) checkQueues() error {
	for _, q := range wf.queues {
		if err := jobstore.ValidateQueue(q); err != nil {
			return usagef("--queue: %v", err)
		}
	}
	return nil
}

func (wf *workerFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	durationVar(f, &wf.shutdownGrace, "shutdown-grace", runner.DefaultShutdownGrace,
		"on SIGINT or SIGTERM, how long running jobs may go on before they are stopped")
	durationVar(f, &wf.killGrace, "kill-grace", execjob.DefaultKillGrace,
		"how long a stopped program has between SIGTERM and SIGKILL")
	byteSizeVar(f, &wf.maxLogBytes, "max-log-bytes", execjob.DefaultMaxLogBytes, "bound on each job's log file, a `SIZE` such as 10MiB, 512K or 1048576")
	durationVar(f, &wf.jobTimeout, "job-timeout", 0, "stop attempts of jobs without a --timeout of their own after this long (default: no limit)")
	f.BoolVarP(&wf.quiet, "quiet", "q", false, "do not print a line per job started and finished")
	f.BoolVar(&wf.cleanEnv, "clean-env", false, "give programs only PATH, HOME, LANG, TZ and USER of this process's environment (and their own env)")
	f.BoolVar(&wf.otel, "otel", false,
		"trace each attempt (and with serve, each HTTP submit) with OpenTelemetry, sent by OTLP over HTTP where OTEL_EXPORTER_OTLP_ENDPOINT says (default http://localhost:4318); an attempt's span is a child of its job's submit, in any process")
	f.BoolVar(&wf.noSchedules, "no-schedules", false, "fire no schedule's ticks and apply no retention policy in this process (by default it does, as every other process does; each tick is one job)")
	f.StringSliceVar(&wf.queues, "queue", nil, "take jobs only from this `QUEUE` (repeatable, or comma-separated; default: every queue that is not paused)")
	f.StringVar(&wf.containment, "containment", "auto",
		"how each job's processes are kept together: auto (a cgroup v2 per job where this process may make one, else a supervisor), cgroup (require a cgroup), or supervisor (never a cgroup)")
}

// handler returns the exec job handler the flags configure for st, and
// how it contains jobs. It fails, in plain words, when the containment
// asked for is not available.
func (wf *workerFlags) handler(st *cliStore) (execjob.Handler, execjob.ContainmentInfo, error) {
	contain, err := execjob.ParseContainment(wf.containment)
	if err != nil {
		return execjob.Handler{}, execjob.ContainmentInfo{}, usagef("--containment: %v", err)
	}
	h := execjob.Handler{LogDir: st.logDir(), GroupAccess: wf.groupAccess, MaxLogBytes: wf.maxLogBytes,
		KillGrace: wf.killGrace, CleanEnv: wf.cleanEnv, Contain: contain}
	if st.pg != nil {
		h.Logs = st.pg.Logs() // in the database, where every machine reads them
	}
	info, err := h.Containment()
	if err != nil {
		return execjob.Handler{}, execjob.ContainmentInfo{}, fmt.Errorf("cannot run jobs: %w", err)
	}
	return h, info, nil
}

// sayContainment logs how jobs are contained when a person needs to know:
// with -v, or when attempts get no cgroup of their own (a program that
// leaves its process group and the supervisor's descendants then escapes).
func (a *app) sayContainment(log *slog.Logger, info execjob.ContainmentInfo) {
	if a.verbose || info.Cgroup == "" {
		log.Info("containment: " + info.String())
	}
}

// startTracing starts the tracing of --otel, if given, and returns what
// stops it (a no-op without --otel).
func (wf *workerFlags) startTracing(ctx context.Context, log *slog.Logger) (func(), error) {
	if !wf.otel {
		return func() {}, nil
	}
	opts, stop, err := startTracing(ctx, log)
	if err != nil {
		return nil, err
	}
	wf.tracing = opts
	return stop, nil
}

// newRunner returns a runner of exec jobs run by h on st with concurrency
// slots, reporting its attempts to metrics (if not nil), and its events to
// log (unless quiet) and to observe (if not nil). With json, log gets each
// event as a record; else a line for people.
func (wf *workerFlags) newRunner(st *cliStore, h execjob.Handler, concurrency int, log *slog.Logger, json bool, metrics runner.Metrics, observe func(runner.Event)) *runner.Runner {
	var mws []runner.Middleware
	if wf.tracing != nil {
		mws = append(mws, otelrunner.Middleware(wf.tracing))
	}
	logs := &logPruner{st: st}
	r := runner.New(st.Store, &runner.Options{
		Middleware:    mws,
		Metrics:       metrics,
		Schedules:     !wf.noSchedules,
		Concurrency:   concurrency,
		Queues:        wf.queues,
		Version:       version(),
		ShutdownGrace: wf.shutdownGrace,
		JobTimeout:    wf.jobTimeout,
		OnEvent: func(ev runner.Event) {
			if observe != nil {
				observe(ev)
			}
			if ev.Type == runner.EventPruned {
				logs.pruned(context.Background())
			}
			switch {
			case wf.quiet && ev.Type != runner.EventDropped && ev.Type != runner.EventStoreError:
			case json:
				logEvent(log, ev)
			default:
				if line := eventLine(ev); line != "" {
					level := slog.LevelInfo
					if ev.Type == runner.EventDropped || ev.Type == runner.EventStoreError {
						level = slog.LevelWarn
					}
					log.Log(context.Background(), level, line)
				}
			}
		},
	})
	r.Handle(execjob.Kind, h)
	return r
}

// eventLine is the line a worker prints for ev, after the time, or "".
func eventLine(ev runner.Event) string {
	j := ev.Job
	switch ev.Type {
	case runner.EventClaimed:
		used, limit, _ := j.CountedAttempts()
		return fmt.Sprintf("%s  started attempt %d of %d: %s", j.ID, used, limit, oneLine(describeWork(j), 80))
	case runner.EventFinished:
		took := human(ev.RunDuration)
		switch {
		case j.State == jobstore.StateQueued && ev.Outcome.Interrupted:
			return fmt.Sprintf("%s  interrupted by the shutdown after %s: queued again, the attempt not counted", j.ID, took)
		case j.State == jobstore.StateQueued:
			when := "now"
			if d := j.RunAt.Sub(ev.Time); d > 0 {
				when = "in " + human(d)
			}
			used, limit, _ := j.CountedAttempts()
			return fmt.Sprintf("%s  failed after %s: %s; retrying %s (attempt %d of %d)", j.ID, took,
				oneLine(plainMessage(errText(ev)), 100), when, used+1, limit)
		case ev.Err != nil:
			return fmt.Sprintf("%s  %s after %s: %s", j.ID, j.State, took, oneLine(plainMessage(ev.Err.Error()), 100))
		}
		return fmt.Sprintf("%s  %s after %s", j.ID, j.State, took)
	case runner.EventDropped:
		return fmt.Sprintf("%s  outcome not recorded: %s", j.ID, plainMessage(errText(ev)))
	case runner.EventStoreError:
		return fmt.Sprintf("store error (retrying): %s", plainMessage(errText(ev)))
	case runner.EventTickFired:
		return fmt.Sprintf("%s  made by schedule %s for its tick of %s", j.ID, ev.Schedule, ev.Tick.Local().Format("2006-01-02 15:04:05"))
	case runner.EventTicksSkipped:
		return fmt.Sprintf("schedule %s: %s dropped by its catch-up or overlap policy", ev.Schedule, plural(int64(ev.Skipped), "tick"))
	case runner.EventPruned:
		return fmt.Sprintf("pruned %s, as the store's retention policy says (jobdir retention)", plural(int64(ev.Pruned), "finished job"))
	}
	return ""
}

// errText is the error of ev, or of its job.
func errText(ev runner.Event) string {
	if ev.Err != nil {
		return ev.Err.Error()
	}
	return ev.Job.LastError
}

func (a *app) workCommand() *cobra.Command {
	var (
		wf          workerFlags
		concurrency int
		exitIdle    bool
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:         "work",
		Annotations: map[string]string{createsStore: "yes"},
		Short:       "Run exec jobs until interrupted",
		Long: `Run exec jobs from the store, up to --concurrency at once, until SIGINT or
SIGTERM. Any number of workers, in any number of processes, may work on one
store: each job runs in exactly one of them. Each also fires the ticks of the
store's schedules (see jobdir schedule), unless --no-schedules: a tick is one
job however many processes fire it.

Each program runs with JOBDIR_JOB_ID and JOBDIR_ATTEMPT in its environment;
its stdout and stderr go to the job's log (see jobdir logs). Exit status 0
makes the job succeeded; anything else fails the attempt, and it is retried
with backoff while attempts remain.

Environment: a program gets this worker's environment except every JOBDIR_
variable but JOBDIR_DIR (so never JOBDIR_TOKEN) and systemd's NOTIFY_SOCKET,
LISTEN_* and WATCHDOG_*; with --clean-env, only PATH, HOME, LANG, TZ and USER
of it. Then the job's own env, and JOBDIR_JOB_ID and JOBDIR_ATTEMPT.

Processes: each program runs under a supervisor (this binary, in a hidden
mode) that keeps every process the program starts as its descendant, even
those that call setsid or double-fork, and, where this worker may make one,
in a cgroup v2 of its own (--containment; the start-up line says which is in
force). What is killed, and when:
  - the program exits: every process it left running gets SIGKILL;
  - the job is canceled or its --timeout passes: every process of the job
    gets SIGTERM, and SIGKILL after --kill-grace;
  - this worker is stopped (SIGINT, SIGTERM): it stops claiming, lets running
    jobs finish for --shutdown-grace, then stops them as above; they are
    queued again at once, and the interrupted attempt does not count;
  - this worker dies (even by SIGKILL): every process of its jobs gets SIGKILL
    at once.
Another worker runs a job again only once every process of its previous
attempt is gone. A second SIGINT or SIGTERM ends this worker at once, by that
signal (as PID 1 of a container, with exit status 128+signal), and its jobs
run again elsewhere as after a kill. As PID 1 it also reaps every orphan
process handed to it.

With --queue, it takes jobs only from the queues named; without it, from every
queue. It never takes a job of a paused queue (see jobdir queue).

With --exit-when-idle, it exits once no job it could take is due and none of
its jobs runs.

Whoever can write a store chooses the programs its workers run, so work
refuses a store that is not private to this user, like ssh's StrictModes: the
store directory, each directory in it and each directory above it must be
owned by this user or root and writable by no one else (a directory above it
may be writable by all if it has the sticky bit, as /tmp has). With
--group-access, the store's group may write it too, if the group is one of
this process's groups (a supplementary group counts, as a Kubernetes fsGroup
is one; no /etc/group entry is needed), and another user may own it, unless
it sits in a directory every user can write: then every member of the group
can run programs as every worker's user. A
store in PostgreSQL is trusted as the database's permissions say: whoever
may write its schema chooses the programs its workers run.`,
		Example: `  jobdir work
  jobdir work --concurrency 8
  jobdir work --queue deploys,reports
  jobdir work --exit-when-idle   # drain the queue, then exit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if concurrency < 1 {
				return usagef("--concurrency must be at least 1")
			}
			if err := wf.checkQueues(); err != nil {
				return err
			}
			defer reapOrphans()()
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				if err := checkTrust(st); err != nil {
					return err
				}
				var active, claims atomic.Int64
				wf.groupAccess = a.groupAccess
				h, contained, err := wf.handler(st)
				if err != nil {
					return err
				}
				log := a.logger(slog.LevelInfo)
				stopTracing, err := wf.startTracing(ctx, log)
				if err != nil {
					return err
				}
				defer stopTracing()
				var observed runner.Metrics
				var metrics *http.Server
				if metricsAddr != "" {
					var err error
					if metrics, observed, err = serveWorkerMetrics(st, metricsAddr); err != nil {
						return err
					}
					defer metrics.Close()
					if !wf.quiet {
						log.Info("metrics at http://" + metrics.Addr + "/metrics")
					}
				}
				r := wf.newRunner(st, h, concurrency, log, a.logFormat == logJSON, observed, func(ev runner.Event) {
					switch ev.Type {
					case runner.EventClaimed:
						claims.Add(1)
						active.Add(1)
					case runner.EventFinished, runner.EventDropped:
						active.Add(-1)
					}
				})
				runCtx, stop := context.WithCancel(ctx)
				defer stop()
				if exitIdle {
					go func() {
						if waitIdle(runCtx, st.Store, wf.queues, &active, &claims) == nil {
							stop()
						}
					}()
				}
				if !wf.quiet {
					log.Info(fmt.Sprintf("worker %s running up to %s from %s", r.Worker(), plural(int64(concurrency), "job"), st.name))
					a.sayContainment(log, contained)
				}
				go func() {
					<-runCtx.Done()
					if n := active.Load(); ctx.Err() != nil && !wf.quiet && n > 0 {
						log.Info(fmt.Sprintf("stopping: waiting up to %s for %s", human(wf.shutdownGrace), plural(n, "running job")))
					}
				}()
				err = r.Run(runCtx)
				if err == nil && !wf.quiet {
					log.Info("worker stopped")
				}
				return err
			})
		},
	}
	cmd.Flags().IntVarP(&concurrency, "concurrency", "c", runtime.NumCPU(), "`N` jobs to run at once")
	cmd.Flags().BoolVar(&exitIdle, "exit-when-idle", false, "exit once no job is due and none is running here")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics (host:port; port 0 picks one), without a token: bind it where only the scraper reaches it")
	wf.register(cmd)
	return cmd
}

// serveWorkerMetrics serves GET /metrics of a worker at addr: the store's
// counts and the runner's claims, outcomes and times, which the returned
// runner.Metrics takes (as runner.Options.Metrics). The server's Addr is
// the address it listens on.
func serveWorkerMetrics(st *cliStore, addr string) (*http.Server, runner.Metrics, error) {
	api, err := httpapi.New(st.Store, &httpapi.Options{InsecureNoAuth: true, AllowedKinds: []string{execjob.Kind}})
	if err != nil {
		return nil, nil, err
	}
	api.KnownKinds(execjob.Kind)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, usagef("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", api.MetricsHandler())
	srv := httpapi.NewHTTPServer(ln.Addr().String(), mux)
	go func() { _ = srv.Serve(ln) }()
	return srv, api, nil
}

// hasDueJob reports whether st holds a queued job that is due, of one of
// queues (any if none) that is not paused. It reads only queued jobs
// (Stats would read finished ones too) and stops at the first due one.
func hasDueJob(ctx context.Context, st jobstore.Client, queues []string) (bool, error) {
	opts := jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Order: jobstore.OldestFirst, Limit: jobstore.MaxListLimit}
	paused := map[string]bool{}
	if qc, ok := st.(jobstore.QueueController); ok {
		qs, err := qc.Queues(ctx)
		if err != nil {
			return false, err
		}
		for _, q := range qs {
			paused[q.Queue] = q.Paused
		}
	}
	req := jobstore.ClaimRequest{Queues: queues}
	now := time.Now()
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			return false, err
		}
		for _, j := range page.Jobs {
			if j.Due(now) && req.AcceptsQueue(j.Queue) && !paused[j.Queue] {
				return true, nil
			}
		}
		if page.Next == "" {
			return false, nil
		}
		opts.Cursor = page.Next
	}
}

// waitIdle returns nil once the store has no due job and this process runs
// none, on two checks in a row with no claim between them (a claim is
// reported just after the store records it).
func waitIdle(ctx context.Context, st jobstore.Client, queues []string, active, claims *atomic.Int64) error {
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	quiet, last := 0, claims.Load()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		c := claims.Load()
		if c != last {
			last, quiet = c, 0
		}
		idle := active.Load() == 0
		if idle {
			due, err := hasDueJob(ctx, st, queues)
			idle = err == nil && !due
		}
		if !idle || claims.Load() != c || active.Load() != 0 {
			quiet = 0
			continue
		}
		if quiet++; quiet >= 2 {
			return nil
		}
	}
}
