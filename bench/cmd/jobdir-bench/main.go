package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "jobdir-bench:", err)
		}
		os.Exit(1)
	}
}

// childMain runs this process as a child of a multi-process workload.
func childMain(specJSON string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "jobdir-bench child:", err)
		return 2
	}
	if err := runChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobdir-bench child:", err)
		return 1
	}
	return 0
}

// Run parses args, runs the benchmark and writes its results: the table to
// stdout and to -out/results.md, the raw figures to -out/results.json and
// the chart to -out/workoff.svg. Progress goes to stderr.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobdir-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		rounds  = fs.Int("rounds", 3, "rounds of every workload; the table shows the median and range")
		jobs    = fs.Int("jobs", 2000, "no-op jobs per work-off")
		workers = fs.String("workers", "1,10,100", "comma-separated worker counts for the work-off (per process)")
		outDir  = fs.String("out", "bench-results", "directory for results.md, results.json and workoff.svg")
		only    = fs.String("only", "", "comma-separated workloads to run (default all): "+strings.Join(workloadNames, ","))
		systems = fs.String("systems", "", "comma-separated systems to run (default all but the -limit, -partition and -rate variants of jobdir-file and jobdir-pg): "+systemNames())
		quick   = fs.Bool("quick", false, "a smoke run of a minute or two: 1 round, 1,000 jobs, 100 workers (× 1 and × 2 processes), fewer samples, small stores")
		dir     = fs.String("dir", os.TempDir(), "directory for the stores under test (every system on the same disk)")
		limit   = fs.Duration("workoff-limit", 15*time.Second, "longest a work-off may run; a slower system reports its rate so far")
		scale   = fs.String("scale", "1000,10000,100000", "comma-separated store sizes for the scaling figures")
		load    = fs.Int("load-rate", 50, "background jobs/s submitted during the loaded latency figures")
		from    = fs.String("from", "", "write the report of an earlier run again from its results.json, without running anything")
		cliSize = fs.String("cli-scale", "1000,100000", "comma-separated store sizes for the cli figures (jobdir's commands, each a whole process)")
		bin     = fs.String("jobdir", "", "the jobdir command for the cli figures (default: built from the module the bench uses)")
		keep    = fs.Bool("keep-scale", false, "keep the seeded scaling stores under -dir and reuse them in later runs")
		pgDSNf  = fs.String("postgres", pgDSN(), "the PostgreSQL server of the pgstore and River PG systems (a DSN); each store gets a schema of its own, dropped after")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jobdir-bench [flags]\n\nRuns jobdir's stores, River and goqite side by side on one disk and prints a table of medians.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from != "" {
		return rerender(*from, *outDir, stdout)
	}
	// The children inherit the environment.
	if err := os.Setenv(envPostgres, *pgDSNf); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// A -dir that does not exist yet (a subdirectory of a fresh mount) is
	// made, rather than failing every figure of the run one by one.
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("-dir: %w", err)
	}

	c := &config{
		Rounds:        *rounds,
		Jobs:          *jobs,
		Dir:           *dir,
		InsertFor:     2 * time.Second,
		WorkoffLimit:  *limit,
		LatencyN:      100,
		LoadRate:      *load,
		KeepScale:     *keep,
		JobdirBin:     *bin,
		CancelN:       30,
		KillN:         10,
		FloorFor:      2 * time.Second,
		Log:           stderr,
		LatencyWorker: latencyWorkers(*load),
	}
	var err error
	if c.Workers, err = parseInts(*workers); err != nil {
		return fmt.Errorf("-workers: %w", err)
	}
	if c.ScaleSizes, err = parseInts(*scale); err != nil {
		return fmt.Errorf("-scale: %w", err)
	}
	if c.CLISizes, err = parseInts(*cliSize); err != nil {
		return fmt.Errorf("-cli-scale: %w", err)
	}
	if *quick {
		c.InsertFor, c.FloorFor = 500*time.Millisecond, 500*time.Millisecond
		c.LatencyN, c.CancelN, c.KillN = 20, 5, 2
		if !set["rounds"] {
			c.Rounds = 1
		}
		if !set["jobs"] {
			c.Jobs = 1000
		}
		// The work-off targets are about 100 workers per process.
		if !set["workers"] {
			c.Workers = []int{targetWorkers}
		}
		if !set["workoff-limit"] {
			c.WorkoffLimit = 5 * time.Second
		}
		if !set["scale"] {
			c.ScaleSizes = []int{300, 1500}
		}
		if !set["cli-scale"] {
			c.CLISizes = []int{300, 3000}
		}
	}
	if c.Rounds < 1 || c.Jobs < 1 || len(c.Workers) == 0 || c.LoadRate < 1 {
		return errors.New("-rounds, -jobs, -workers and -load-rate must be positive")
	}
	if *only != "" {
		c.Only = map[string]bool{}
		for _, w := range strings.Split(*only, ",") {
			w = strings.TrimSpace(w)
			if !contains(workloadNames, w) {
				return fmt.Errorf("-only: unknown workload %q (want %s)", w, strings.Join(workloadNames, ","))
			}
			c.Only[w] = true
		}
	}
	if c.Systems, err = selectSystems(*systems); err != nil {
		return fmt.Errorf("-systems: %w", err)
	}
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return err
	}

	r := newResults()
	started := time.Now()
	runAll(ctx, c, r)
	c.emptyTrash()
	if ctx.Err() != nil {
		r.remark("interrupted: the figures are partial")
	}
	r.remark(fmt.Sprintf("total run time %s", time.Since(started).Round(time.Second)))

	rp := &report{r: r, systems: c.Systems, cfg: c, Machine: describeMachine(c.Dir), Command: "jobdir-bench " + strings.Join(args, " ")}
	if err := rp.render(*outDir, stdout); err != nil {
		return err
	}
	if r.empty() && ctx.Err() == nil {
		// A run that measured nothing (no PostgreSQL, a -dir that cannot
		// be written) must not look like a success to a script or CI.
		return errors.New("every figure failed; see the notes above")
	}
	return nil
}

// render writes the table to stdout and -out/results.md, the chart to
// -out/workoff.svg and the raw figures to -out/results.json.
func (rp *report) render(outDir string, stdout io.Writer) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	rp.writeMarkdown(&md)
	fmt.Fprint(stdout, md.String())
	if err := os.WriteFile(filepath.Join(outDir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	var svg strings.Builder
	rp.writeSVG(&svg)
	if err := os.WriteFile(filepath.Join(outDir, "workoff.svg"), []byte(svg.String()), 0o644); err != nil {
		return err
	}
	raw, err := rp.json()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(outDir, "results.json"), raw, 0o644)
}

// rerender reads the raw figures of an earlier run and writes its report
// again, with this version's tables and chart.
func rerender(path, outDir string, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var in rawResults
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	r := newResults()
	byID := map[string]metric{}
	for _, m := range in.Metrics {
		if known, ok := metricByID(m.ID); ok {
			m.Order = known.Order
		}
		byID[m.ID] = m
	}
	for _, se := range in.Series {
		m, ok := byID[se.Metric]
		if !ok {
			return fmt.Errorf("%s: series of unknown metric %q", path, se.Metric)
		}
		for _, v := range se.Values {
			r.add(m, se.System, v)
		}
		for _, n := range se.Notes {
			r.note(m, se.System, n)
		}
	}
	for _, n := range in.Notes {
		r.remark(n)
	}
	c := &config{Rounds: in.Rounds, Jobs: in.Jobs, Workers: in.Workers, ScaleSizes: in.ScaleSizes}
	if len(c.ScaleSizes) == 0 {
		c.ScaleSizes = scaleSizesOf(in.Metrics)
	}
	var systems []*system
	for _, name := range in.Systems {
		s, err := findSystem(name)
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}
	rp := &report{r: r, systems: systems, cfg: c, Machine: in.Machine, Command: in.Command}
	return rp.render(outDir, stdout)
}

// scaleSizesOf returns the store sizes the scale metrics of ms measured,
// smallest first.
func scaleSizesOf(ms []metric) []int {
	var sizes []int
	for _, m := range ms {
		if rest, ok := strings.CutPrefix(m.ID, "scale-get-"); ok {
			if n, ok := parseSize(rest); ok {
				sizes = append(sizes, n)
			}
		}
	}
	slices.Sort(sizes)
	return sizes
}

// parseSize reads a sizeLabel.
func parseSize(s string) (int, bool) {
	mult := 1.0
	if t, ok := strings.CutSuffix(s, "k"); ok {
		s, mult = t, 1000
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return int(f * mult), true
}

// metricByID returns the definition of a metric from its ID.
func metricByID(id string) (metric, bool) {
	for _, m := range []metric{mInsert1, mInsert16, mBatch, mFloor1, mFloor4, mIdleFlush, mIdleWake, mCancel50, mCancel99, mKill} {
		if m.ID == id {
			return m, true
		}
	}
	if rest, ok := strings.CutPrefix(id, "cpu-parent-"); ok {
		if m, ok := metricByID(rest); ok && strings.HasPrefix(m.ID, "workoff-") {
			return cpuParentMetric(m), true
		}
		return metric{}, false
	}
	if rest, ok := strings.CutPrefix(id, "cpu-"); ok {
		if m, ok := metricByID(rest); ok && m.Group == "throughput" {
			return cpuMetric(m), true
		}
		return metric{}, false
	}
	var procs, workers int
	if _, err := fmt.Sscanf(id, "workoff-%dp-%dw", &procs, &workers); err == nil {
		return workoffMetric(procs, workers), true
	}
	for _, loaded := range []bool{false, true} {
		for _, p := range []int{50, 99} {
			if m := latencyMetric(loaded, p); m.ID == id {
				return m, true
			}
		}
	}
	if rest, ok := strings.CutPrefix(id, "cli-"); ok {
		if cmd, size, ok := strings.Cut(rest, "-"); ok && contains(cliCommands, cmd) {
			if n, ok := parseSize(size); ok {
				return cliMetric(cmd, n), true
			}
		}
	}
	if rest, ok := strings.CutPrefix(id, "scale-"); ok {
		if _, size, ok := strings.Cut(rest, "-"); ok {
			if n, ok := parseSize(size); ok {
				get, cc, list, open, rss := scaleMetrics(n)
				for _, m := range []metric{get, cc, list, open, rss} {
					if m.ID == id {
						return m, true
					}
				}
			}
		}
	}
	return metric{}, false
}

// runAll runs every selected workload for every selected system, round
// after round. A workload that fails is noted and the run goes on.
func runAll(ctx context.Context, c *config, r *results) {
	fail := func(what string, s *system, err error) {
		name := "floor"
		if s != nil {
			name = s.name
		}
		msg := fmt.Sprintf("%s failed for %s: %v", what, name, err)
		r.remark(msg)
		c.logf("%s", msg)
	}
	var seeded []*seededStore
	defer func() { removeSeeded(c, seeded) }()
	if c.want("scale") && hasFileStore(c.Systems) {
		for _, n := range c.ScaleSizes {
			c.logf("seeding a store of %d jobs for the scaling figures", n)
			st, err := seedScale(ctx, c, n)
			if err != nil {
				fail(fmt.Sprintf("seeding %d jobs", n), nil, err)
				continue
			}
			seeded = append(seeded, st)
		}
	}
	var cli []*cliStore
	defer func() {
		for _, st := range cli {
			teardownCLI(context.WithoutCancel(ctx), c, st)
		}
	}()
	if c.want("cli") {
		for _, s := range c.Systems {
			if !cliSystem(s) {
				continue
			}
			for _, n := range c.CLISizes {
				c.logf("seeding a store of %d jobs for %s's cli figures", n, s.name)
				st, err := seedCLI(ctx, c, s, n)
				if err != nil {
					fail(fmt.Sprintf("seeding %d jobs for the cli figures", n), s, err)
					continue
				}
				cli = append(cli, st)
			}
		}
	}
	for round := 1; round <= c.Rounds && ctx.Err() == nil; round++ {
		c.logf("round %d of %d", round, c.Rounds)
		if c.want("floor") {
			if err := runFloor(ctx, c, r); err != nil {
				fail("floor", nil, err)
			}
		}
		for _, s := range c.Systems {
			if ctx.Err() != nil {
				return
			}
			if c.want("insert") {
				if err := runInsert(ctx, c, r, s); err != nil {
					fail("insert", s, err)
				}
			}
			if c.want("batch") {
				if err := runBatch(ctx, c, r, s); err != nil {
					fail("batch", s, err)
				}
			}
			if c.want("workoff") {
				for _, w := range c.Workers {
					for _, procs := range []int{1, 2} {
						if procs > 1 && s.inProcess {
							continue
						}
						if err := runWorkoff(ctx, c, r, s, w, procs); err != nil {
							fail(fmt.Sprintf("work-off (%d workers, %d processes)", w, procs), s, err)
						}
					}
				}
			}
			if c.want("latency") && !s.inProcess {
				if err := runLatency(ctx, c, r, s); err != nil {
					fail("latency", s, err)
				}
			}
			fileStore := s.jobdir && !s.inProcess
			if c.want("cancel") && fileStore {
				if err := runCancel(ctx, c, r, s); err != nil {
					fail("cancel", s, err)
				}
			}
			if c.want("kill") && fileStore {
				if err := runKill(ctx, c, r, s); err != nil {
					fail("kill", s, err)
				}
			}
			if c.want("cli") && cliSystem(s) {
				for _, st := range cli {
					if st.system != s.name {
						continue
					}
					if err := runCLI(ctx, c, r, st); err != nil {
						fail(fmt.Sprintf("cli (%d jobs)", st.n), s, err)
					}
				}
			}
			// The scaling figures read and claim; SyncFS changes only how
			// writes are flushed, so its store is not scaled again.
			if c.want("scale") && fileStore && !s.pg && s.name != syncFSSystem {
				for _, st := range seeded {
					if err := runScale(ctx, c, r, s, st); err != nil {
						fail(fmt.Sprintf("scale (%d jobs)", st.n), s, err)
					}
				}
			}
		}
	}
}

func hasFileStore(ss []*system) bool {
	for _, s := range ss {
		if s.jobdir && !s.inProcess {
			return true
		}
	}
	return false
}

// rawResults is the JSON form of a run's figures.
type rawResults struct {
	Machine    string    `json:"machine"`
	Command    string    `json:"command"`
	Rounds     int       `json:"rounds"`
	Jobs       int       `json:"jobs"`
	Workers    []int     `json:"workers"`
	ScaleSizes []int     `json:"scale_sizes,omitempty"`
	Systems    []string  `json:"systems"`
	Metrics    []metric  `json:"metrics"`
	Series     []*series `json:"series"`
	Targets    []target  `json:"targets"`
	// TargetsSyncFS are the same targets for the durable file store with
	// Options.SyncFS (the scaling ones use the default store's figures).
	TargetsSyncFS []target `json:"targets_syncfs,omitempty"`
	// TargetsPG are issue 13's targets for pgstore against River PG.
	TargetsPG []target  `json:"targets_pg,omitempty"`
	Notes     []string  `json:"notes,omitempty"`
	Finished  time.Time `json:"finished"`
}

// json returns the raw figures.
func (rp *report) json() ([]byte, error) {
	o := rawResults{Machine: rp.Machine, Command: rp.Command, Rounds: rp.cfg.Rounds, Jobs: rp.cfg.Jobs, Workers: rp.cfg.Workers, ScaleSizes: rp.cfg.ScaleSizes, Targets: rp.targets(defaultFileSystem), TargetsSyncFS: rp.targets(syncFSSystem), TargetsPG: rp.pgTargets(), Finished: time.Now().UTC()}
	for _, s := range rp.systems {
		o.Systems = append(o.Systems, s.name)
	}
	for _, g := range []string{"throughput", "cpu", "latency", "scale", "floor"} {
		for _, m := range rp.r.sortedMetrics(g) {
			o.Metrics = append(o.Metrics, m)
			for _, s := range append(rp.systems, &system{name: "floor"}) {
				if se := rp.r.get(m.ID, s.name); se != nil {
					o.Series = append(o.Series, se)
				}
			}
		}
	}
	rp.r.mu.Lock()
	o.Notes = append(o.Notes, rp.r.notes...)
	rp.r.mu.Unlock()
	return json.MarshalIndent(o, "", "  ")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func systemNames() string {
	var n []string
	for _, s := range allSystems() {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

// describeMachine says what the figures were measured on: CPUs, CPU model,
// memory, kernel, the file system of dir, and the Go version.
func describeMachine(dir string) string {
	parts := []string{fmt.Sprintf("%d CPUs", runtime.NumCPU())}
	if m := firstMatch("/proc/cpuinfo", "model name"); m != "" {
		parts = append(parts, m)
	}
	if m := firstMatch("/proc/meminfo", "MemTotal"); m != "" {
		if kb, err := strconv.Atoi(strings.Fields(m)[0]); err == nil {
			parts = append(parts, fmt.Sprintf("%.0f GiB RAM", float64(kb)/(1<<20)))
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		parts = append(parts, "Linux "+utsString(u.Release[:]))
	}
	parts = append(parts, fmt.Sprintf("store directory %s on %s", dir, fsType(dir)))
	parts = append(parts, runtime.Version())
	return strings.Join(parts, ", ")
}

func firstMatch(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// fsType names the file system of dir from statfs(2)'s f_type.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown file system"
	}
	names := map[int64]string{
		0xEF53: "ext2/3/4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
		0x794c7630: "overlayfs", 0x6969: "nfs", 0x65735546: "fuse", 0x2FC12FC1: "zfs",
	}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("file system type 0x%x", st.Type)
}
