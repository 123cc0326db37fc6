package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// ErrViolations is returned by Run when the run found a broken promise; the
// Report lists them.
var ErrViolations = errors.New("torture: violations found")

// proc is one incarnation of a child process.
type proc struct {
	role        string
	index       int
	incarnation int
	name        string
	cmd         *exec.Cmd
	done        chan struct{} // closed once the process has exited
	ready       chan struct{} // closed once it handles SIGTERM, or has exited
	waitErr     error
	expected    bool      // the driver ended it
	stoppedTill time.Time // non-zero while SIGSTOPped
}

// fleet is the driver's view of the children.
type fleet struct {
	cfg      Config
	exe      string
	storeDir string
	recDir   string
	rng      *rand.Rand
	procs    []*proc
	kills    map[string]int64 // worker name -> CLOCK_MONOTONIC before its SIGKILL
	stops    map[string][]pause
	cuts     map[string][]pause // worker name -> the cuts of its connections, from before to after each
	holders  []holderSample     // the running jobs the sampler saw
	r        *Report
}

// Run performs the torture run cfg describes and returns its Report. The
// error is ErrViolations if the run found a broken promise, or what kept the
// run from finishing. Run starts children by executing cfg.Exe; that binary
// must call ChildMain when IsChild reports true.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &fleet{
		cfg:      cfg,
		exe:      cfg.Exe,
		storeDir: filepath.Join(cfg.Dir, "store"),
		recDir:   filepath.Join(cfg.Dir, "records"),
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x70725475)),
		kills:    map[string]int64{},
		stops:    map[string][]pause{},
		cuts:     map[string][]pause{},
		r: &Report{Seed: cfg.Seed, Workers: cfg.Workers, Submitters: cfg.Submitters,
			Cancellers: cfg.Cancellers, Waiters: cfg.Waiters, RunnerWorkers: min(cfg.RunnerWorkers, cfg.Workers)},
	}
	if f.exe == "" {
		if f.exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("torture: %w", err)
		}
	}
	if ents, err := os.ReadDir(cfg.Dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("torture: work directory %s is not empty", cfg.Dir)
	}
	if err := os.MkdirAll(f.storeDir, 0o700); err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	if err := makeRecordDirs(f.recDir); err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	st, err := cfg.Backend.Open(ctx, f.storeDir)
	if err != nil {
		return nil, fmt.Errorf("torture: open store: %w", err)
	}
	defer f.killAll()
	err = f.run(ctx, st)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("torture: close store: %w", cerr)
	}
	if err != nil {
		return f.r, err
	}
	f.logf("checking")
	if err := f.check(ctx); err != nil {
		return f.r, err
	}
	if !f.r.OK() {
		return f.r, ErrViolations
	}
	return f.r, nil
}

func (f *fleet) logf(format string, args ...any) {
	fmt.Fprintf(f.cfg.Log, "torture: "+format+"\n", args...)
}

func (f *fleet) run(ctx context.Context, st jobstore.Store) error {
	cfg := f.cfg
	for i := range cfg.Workers {
		if err := f.start(roleWorker, i, 0); err != nil {
			return err
		}
	}
	for i := range cfg.Cancellers {
		if err := f.start(roleCanceller, i, 0); err != nil {
			return err
		}
	}
	for i := range cfg.Submitters {
		if err := f.start(roleSubmitter, i, 0); err != nil {
			return err
		}
	}
	for i := range cfg.Waiters {
		if err := f.start(roleWaiter, i, 0); err != nil {
			return err
		}
	}
	f.logf("started %d workers (%d with runner.Runner), %d submitters, %d cancellers, %d waiters; chaos for %s (seed %d)",
		cfg.Workers, min(cfg.RunnerWorkers, cfg.Workers), cfg.Submitters, cfg.Cancellers, cfg.Waiters, cfg.Duration, cfg.Seed)

	sctx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	samples := sampleRunning(sctx, st, time.Second)
	defer func() {
		stopSampler()
		f.holders = samples()
	}()

	begin := time.Now()
	deadline := begin.Add(cfg.Duration)
	next := begin.Add(jitter(f.rng, cfg.ChaosInterval))
	nextStop := begin.Add(jitter(f.rng, cfg.StopInterval))
	nextRestart := time.Time{}
	if cfg.RestartInterval > 0 && cfg.Backend.Restart != nil {
		nextRestart = begin.Add(cfg.RestartInterval)
	}
	lastCount, lastLog := begin, begin
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if err := f.reap(); err != nil {
			return err
		}
		f.resume(now, false)
		if cfg.ChaosInterval > 0 && now.After(next) {
			if err := f.chaos(); err != nil {
				return err
			}
			next = now.Add(jitter(f.rng, cfg.ChaosInterval))
		}
		if cfg.StopInterval > 0 && now.After(nextStop) {
			if err := f.stop(now); err != nil {
				return err
			}
			nextStop = now.Add(jitter(f.rng, cfg.StopInterval))
		}
		if !nextRestart.IsZero() && now.After(nextRestart) {
			if err := f.restartServer(ctx); err != nil {
				return err
			}
			nextRestart = time.Now().Add(cfg.RestartInterval)
		}
		if now.Sub(lastLog) >= 10*time.Second {
			lastLog = now
			f.logf("%s: %d kills, %d stops, %d cuts", now.Sub(begin).Round(time.Second), f.r.Kills, f.r.Stops, f.r.Cuts)
		}
		if cfg.Jobs > 0 && now.Sub(lastCount) >= time.Second {
			lastCount = now
			if n := f.countSubmits(); n >= cfg.Jobs {
				f.logf("%d jobs submitted", n)
				break
			}
		}
	}
	f.r.Chaos = time.Since(begin)
	f.resume(time.Time{}, true)
	f.logf("chaos over after %s: %d kills, %d stops; stopping submitters and cancellers",
		f.r.Chaos.Round(time.Second), f.r.Kills, f.r.Stops)
	if err := f.terminate(roleSubmitter, roleCanceller); err != nil {
		return err
	}

	drainStart := time.Now()
	drainEnd := drainStart.Add(cfg.DrainTimeout)
	for {
		if err := f.reap(); err != nil {
			return err
		}
		s, err := st.Stats(ctx)
		if err != nil && f.transient(err) {
			f.logf("stats: transient error, retrying: %v", err)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("torture: stats: %w", err)
		}
		open := s.Counts[jobstore.StateQueued] + s.Counts[jobstore.StateRunning]
		if open == 0 {
			break
		}
		if time.Now().After(drainEnd) {
			f.r.violate("drain: %d jobs queued and %d running after %s", s.Counts[jobstore.StateQueued],
				s.Counts[jobstore.StateRunning], cfg.DrainTimeout)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	f.r.Drain = time.Since(drainStart)
	f.logf("drained in %s; stopping waiters, then workers", f.r.Drain.Round(time.Millisecond))
	stopSampler()
	f.holders = samples()
	if err := f.terminate(roleWaiter); err != nil {
		return err
	}
	return f.terminate(roleWorker)
}

// start launches incarnation inc of child index of role.
func (f *fleet) start(role string, index, inc int) error {
	name := fmt.Sprintf("%s-%d.%d", role, index, inc)
	spec := childSpec{
		Role: role, Index: index, Incarnation: inc, Name: name,
		StoreDir: f.storeDir, RecordDir: f.recDir, Seed: f.cfg.Seed,
		Concurrency: f.cfg.WorkerConcurrency, Runner: role == roleWorker && index < f.cfg.RunnerWorkers, SubmitInterval: f.cfg.SubmitInterval,
		Keys: f.cfg.Keys, Waits: f.cfg.Waits, Exe: f.exe, Args: f.cfg.Args, Trees: min(f.cfg.RunnerWorkers, f.cfg.Workers) > 0,
	}
	if f.cfg.FaultRate > 0 && f.cfg.Backend.OpenFaulty != nil && faulty(role, index) {
		spec.FaultRate = f.cfg.FaultRate
	}
	if role == roleSubmitter && f.cfg.Jobs > 0 {
		spec.Budget = (f.cfg.Jobs + f.cfg.Submitters - 1) / f.cfg.Submitters
	}
	p, err := startChild(f.exe, f.cfg.Args, spec, filepath.Join(f.recDir, outDir, name+".log"))
	if err != nil {
		return fmt.Errorf("torture: start %s: %w", name, err)
	}
	p.role, p.index, p.incarnation = role, index, inc
	for i, q := range f.procs {
		if q.role == role && q.index == index {
			f.procs[i] = p
			return nil
		}
	}
	f.procs = append(f.procs, p)
	return nil
}

func startChild(exe string, args []string, spec childSpec, outPath string) (*proc, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	// The child writes to readyW once it handles SIGTERM (see ChildMain):
	// a SIGTERM sent before that, while a loaded machine is still starting
	// the binary, would kill it as a failure.
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyW.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envChild+"="+string(js), envReadyFD+"=3")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = readyR.Close()
		return nil, err
	}
	p := &proc{name: spec.Name, cmd: cmd, done: make(chan struct{}), ready: make(chan struct{})}
	go func() {
		defer readyR.Close()
		_, _ = readyR.Read(make([]byte, 1)) // a byte, or EOF once it exits
		close(p.ready)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// reap restarts children that exited on their own, which is a violation: a
// child only stops when the driver says so.
func (f *fleet) reap() error {
	for _, p := range f.procs {
		if p.expected || !exited(p) {
			continue
		}
		f.r.violate("%s exited unexpectedly (%v): %s", p.name, p.waitErr,
			tail(filepath.Join(f.recDir, outDir, p.name+".log"), 600))
		f.r.Restarts++
		if err := f.start(p.role, p.index, p.incarnation+1); err != nil {
			return err
		}
	}
	return nil
}

// chaos kills one child and starts it again, or cuts a worker's
// connections.
func (f *fleet) chaos() error {
	var running, workers []*proc
	for _, p := range f.procs {
		if p.role == roleCanceller || p.role == roleWaiter || exited(p) || !p.stoppedTill.IsZero() {
			continue
		}
		running = append(running, p)
		if p.role == roleWorker {
			workers = append(workers, p)
		}
	}
	if len(running) == 0 {
		return nil
	}
	if f.cfg.Backend.Cut != nil && len(workers) > 0 && f.rng.IntN(100) < f.cfg.CutPercent {
		p := workers[f.rng.IntN(len(workers))]
		from := monoNow()
		n, err := f.cfg.Backend.Cut(context.Background(), f.storeDir, p.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("torture: cut %s: %w", p.name, err)
		}
		f.cuts[p.name] = append(f.cuts[p.name], pause{from: from, to: monoNow()})
		f.r.Cuts++
		f.r.CutConnections += n
		return nil
	}
	p := running[f.rng.IntN(len(running))]
	if len(workers) > 0 && f.rng.IntN(100) < 70 {
		p = workers[f.rng.IntN(len(workers))]
	}
	p.expected = true
	before := monoNow()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("torture: kill %s: %w", p.name, err)
	}
	<-p.done
	f.r.Kills++
	if p.role == roleWorker {
		f.r.WorkerKills++
		f.kills[p.name] = before
	}
	time.Sleep(time.Duration(f.rng.Int64N(int64(200 * time.Millisecond))))
	f.r.Restarts++
	return f.start(p.role, p.index, p.incarnation+1)
}

// stop pauses a worker or submitter with SIGSTOP for MinStop to MaxStop,
// unless a child is stopped already: one at a time, so that the others'
// operations show what a stopped process does to them.
func (f *fleet) stop(now time.Time) error {
	var cand []*proc
	for _, p := range f.procs {
		if !p.stoppedTill.IsZero() {
			return nil
		}
		if (p.role == roleWorker || p.role == roleSubmitter) && !exited(p) {
			cand = append(cand, p)
		}
	}
	if len(cand) == 0 {
		return nil
	}
	p := cand[f.rng.IntN(len(cand))]
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("torture: stop %s: %w", p.name, err)
	}
	p.stoppedTill = now.Add(f.cfg.MinStop + time.Duration(f.rng.Int64N(int64(f.cfg.MaxStop-f.cfg.MinStop)+1)))
	f.stops[p.name] = append(f.stops[p.name], pause{from: monoNow()})
	f.r.Stops++
	return nil
}

// restartServer restarts the store's server; every live worker counts as
// cut for as long as the restart took.
func (f *fleet) restartServer(ctx context.Context) error {
	from := monoNow()
	f.logf("restarting the server")
	if err := f.cfg.Backend.Restart(ctx); err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	cut := pause{from: from, to: monoNow()}
	for _, p := range f.procs {
		if p.role == roleWorker && !exited(p) {
			f.cuts[p.name] = append(f.cuts[p.name], cut)
		}
	}
	f.r.ServerRestarts++
	return nil
}

// transient reports whether err is a store error a retry may outlive.
func (f *fleet) transient(err error) bool {
	return f.cfg.Backend.Transient != nil && f.cfg.Backend.Transient(err)
}

// resume continues stopped children whose pause is over, or all of them.
func (f *fleet) resume(now time.Time, all bool) {
	for _, p := range f.procs {
		if p.stoppedTill.IsZero() || (!all && now.Before(p.stoppedTill)) {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // fails only if it already exited
		p.stoppedTill = time.Time{}
		if ps := f.stops[p.name]; len(ps) > 0 {
			ps[len(ps)-1].to = monoNow()
		}
	}
}

// terminate stops the children of the given roles gracefully: SIGTERM,
// then SIGKILL after 30s (a violation: a child must finish its attempt and
// exit).
func (f *fleet) terminate(roles ...string) error {
	var ps []*proc
	for _, p := range f.procs {
		for _, r := range roles {
			if p.role == r && !exited(p) {
				p.expected = true
				ps = append(ps, p)
			}
		}
	}
	limit := time.After(30 * time.Second)
	for _, p := range ps {
		select {
		case <-p.ready:
		case <-limit:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		select {
		case <-p.done:
			if p.waitErr != nil {
				f.r.violate("%s failed at exit (%v): %s", p.name, p.waitErr,
					tail(filepath.Join(f.recDir, outDir, p.name+".log"), 600))
			}
		case <-limit:
			f.r.violate("%s did not exit within 30s of SIGTERM", p.name)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	return f.reap()
}

func (f *fleet) killAll() {
	for _, p := range f.procs {
		if !exited(p) {
			p.expected = true
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (f *fleet) countSubmits() int {
	n := 0
	for i := range f.cfg.Submitters {
		c, _ := countSubmits(filepath.Join(f.recDir, submitDir, fmt.Sprintf("%d.log", i)))
		n += c
	}
	return n
}

// check reopens the store once every child has exited and compares it with
// the records.
func (f *fleet) check(ctx context.Context) error {
	st, err := f.cfg.Backend.Open(ctx, f.storeDir)
	if err != nil {
		f.r.violate("the store does not reopen: %v", err)
		return nil
	}
	jobs := map[string]jobstore.Job{}
	opts := jobstore.ListOptions{Limit: jobstore.MaxListLimit, Order: jobstore.OldestFirst}
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			st.Close()
			return fmt.Errorf("torture: list: %w", err)
		}
		for _, e := range page.Errors {
			f.r.violate("list reports a bad record: %v", e)
		}
		for _, j := range page.Jobs {
			jobs[j.ID] = j
		}
		if page.Next == "" {
			break
		}
		opts.Cursor = page.Next
	}
	rec, err := readRecords(f.recDir)
	if err != nil {
		st.Close()
		return fmt.Errorf("torture: read records: %w", err)
	}
	f.r.TransientErrors = countLines(filepath.Join(f.recDir, outDir), transientPrefix)
	for _, s := range rec.submits {
		if _, ok := jobs[s.ID]; ok {
			continue
		}
		// Not listed: Get must agree that it is gone.
		j, err := st.Get(ctx, s.ID)
		if err == nil {
			f.r.violate("job %s: Get finds it but List does not", s.ID)
			jobs[s.ID] = j
		} else if !errors.Is(err, jobstore.ErrNotFound) {
			f.r.violate("job %s: Get: %v", s.ID, err)
		}
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("torture: close store: %w", err)
	}
	checkRecords(f.r, jobs, rec, f.kills, f.stops, f.cuts)
	exempt := map[string][]pause{}
	for w, ps := range f.stops {
		exempt[w] = append(exempt[w], ps...)
	}
	for w, ps := range f.cuts {
		exempt[w] = append(exempt[w], ps...)
	}
	checkHolders(f.r, f.holders, rec.attempts, f.kills, exempt, f.cfg.HolderBound)
	ops, err := readLatencies(f.recDir)
	if err != nil {
		return fmt.Errorf("torture: read latencies: %w", err)
	}
	checkLatencies(f.r, ops, f.stops, f.cfg.StallLimit, f.cfg.MaxStall)
	if f.r.InjectedFaults, f.r.FaultyProcs, err = countFaults(f.recDir); err != nil {
		return fmt.Errorf("torture: read fault logs: %w", err)
	}
	waits, err := readWaits(f.recDir)
	if err != nil {
		return fmt.Errorf("torture: read wait logs: %w", err)
	}
	ids := map[string]bool{}
	for _, s := range rec.submits {
		ids[s.ID] = true
	}
	checkWaits(f.r, waits, ids, f.stops)
	if err := checkTrees(f.r, f.recDir, treeGrace); err != nil {
		return fmt.Errorf("torture: check trees: %w", err)
	}

	switch {
	case f.cfg.Backend.Fsck == nil:
		f.r.Fsck = "skipped"
	default:
		res, err := f.cfg.Backend.Fsck(ctx, f.storeDir)
		if err != nil {
			f.r.violate("fsck: %v", err)
			return nil
		}
		f.r.RepairedAtOpen = res.RepairedAtOpen
		f.r.Fsck = "clean"
		if len(res.Problems) > 0 {
			f.r.Fsck = fmt.Sprintf("%d problems", len(res.Problems))
			for _, p := range res.Problems {
				f.r.violate("fsck: %s", p)
			}
		}
	}
	return nil
}

// countLines counts the lines that start with prefix in the files of dir.
func countLines(dir, prefix string) int {
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
	}
	return n
}

// tail returns the last n bytes of the file at path, for error messages.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no output: " + err.Error() + ")"
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return fmt.Sprintf("%q", b)
}
