package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
)

// config is what one invocation measures and how hard.
type config struct {
	Rounds        int
	Jobs          int    // jobs per work-off
	Workers       []int  // worker counts for the work-off
	Dir           string // parent of the temporary store directories
	Only          map[string]bool
	Systems       []*system
	InsertFor     time.Duration // how long each insert figure runs
	WorkoffLimit  time.Duration // a work-off stops after this and reports its rate so far
	LatencyN      int           // latency samples per round, idle and loaded each
	LoadRate      int           // background jobs/s during the loaded latency run
	CancelN       int           // cancel samples per round
	KillN         int           // kill samples per round
	FloorFor      time.Duration // how long each floor figure runs
	ScaleSizes    []int         // store sizes for the scaling figures
	Log           io.Writer     // progress, one line per step
	LatencyWorker int           // handlers in the latency child
	KeepScale     bool          // keep and reuse the seeded scaling stores
	CLISizes      []int         // store sizes for the cli figures
	JobdirBin     string        // the jobdir command of the cli figures ("": build it)

	jobdir jobdirBinary

	trashMu sync.Mutex
	trash   string // where discard moves finished stores; emptied at the end
}

// discard moves a finished store out of the way, into a trash directory
// that Run empties at the very end. Deleting thousands of files at once
// slows every file create on the same file system for minutes on ext4
// without a journal (it skips recently freed inodes, see
// docs/benchmarks.md), which would charge one system's cleanup to the
// next system measured.
func (c *config) discard(path string) {
	c.trashMu.Lock()
	defer c.trashMu.Unlock()
	if c.trash == "" {
		t, err := os.MkdirTemp(c.Dir, "jobdir-bench-trash-")
		if err != nil {
			os.RemoveAll(path)
			return
		}
		c.trash = t
	}
	if err := os.Rename(path, filepath.Join(c.trash, filepath.Base(path))); err != nil {
		os.RemoveAll(path)
	}
}

// emptyTrash deletes what discard kept.
func (c *config) emptyTrash() {
	c.trashMu.Lock()
	defer c.trashMu.Unlock()
	if c.trash != "" {
		os.RemoveAll(c.trash)
		c.trash = ""
	}
}

// workload groups, as -only names them.
var workloadNames = []string{"insert", "batch", "workoff", "latency", "cancel", "kill", "scale", "cli", "floor"}

func (c *config) want(w string) bool { return len(c.Only) == 0 || c.Only[w] }

func (c *config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// freshDir returns a new empty directory under c.Dir for one system.
func (c *config) freshDir(ctx context.Context, s *system) (string, func(), error) {
	d, err := os.MkdirTemp(c.Dir, "jobdir-bench-"+s.name+"-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() {
		if s.teardown != nil {
			if err := s.teardown(context.WithoutCancel(ctx), d); err != nil {
				c.logf("%s teardown: %v", s.name, err)
			}
		}
		c.discard(d)
	}
	if err := s.setup(ctx, d); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%s setup: %w", s.name, err)
	}
	return d, cleanup, nil
}

var (
	mInsert1  = metric{ID: "insert-1", Title: "insert, 1 client", Unit: "jobs/s", Higher: true, Group: "throughput", Order: 10}
	mInsert16 = metric{ID: "insert-16", Title: "insert, 16 concurrent clients", Unit: "jobs/s", Higher: true, Group: "throughput", Order: 11}
	mBatch    = metric{ID: "batch", Title: "batch insert, 1,000 per call", Unit: "jobs/s", Higher: true, Group: "throughput", Order: 12}
	mFloor1   = metric{ID: "floor-1", Title: "durable file creates, 1 writer", Unit: "files/s", Higher: true, Group: "floor", Order: 1}
	mFloor4   = metric{ID: "floor-4", Title: "durable file creates, 4 writers", Unit: "files/s", Higher: true, Group: "floor", Order: 2}
	// mIdleFlush is the floor of the idle latency figures (measureIdleFlush).
	mIdleFlush = metric{ID: "floor-idle-flush", Title: "a write and fdatasync of a written file after an idle gap, p50", Unit: "ms", Group: "floor", Order: 3}
	// mIdleWake is the other part of that floor (measureIdleWake).
	mIdleWake = metric{ID: "floor-idle-wake", Title: "a file created, seen through inotify in another process, after an idle gap, p50", Unit: "ms", Group: "floor", Order: 4}
	mCancel50 = metric{ID: "cancel-p50", Title: "cancel to handler ctx done, other process, p50", Unit: "ms", Group: "latency", Order: 30}
	mCancel99 = metric{ID: "cancel-p99", Title: "cancel to handler ctx done, other process, p99", Unit: "ms", Group: "latency", Order: 31}
	mKill     = metric{ID: "kill", Title: "SIGKILL of worker to job start elsewhere", Unit: "ms", Group: "latency", Order: 40}
)

func workoffMetric(procs, workers int) metric {
	return metric{
		ID:     fmt.Sprintf("workoff-%dp-%dw", procs, workers),
		Title:  fmt.Sprintf("work off, %d worker(s) × %d process(es)", workers, procs),
		Unit:   "jobs/s",
		Higher: true,
		Group:  "throughput",
		Order:  100 + procs*10000 + workers,
	}
}

func latencyMetric(loaded bool, p int) metric {
	mode, order := "idle", 20
	if loaded {
		mode, order = "loaded", 22
	}
	return metric{
		ID:    fmt.Sprintf("latency-%s-p%d", mode, p),
		Title: fmt.Sprintf("submit to handler start, other process, %s, p%d", mode, p),
		Unit:  "ms",
		Group: "latency",
		Order: order + p/99,
	}
}

// runInsert measures one-at-a-time inserts from 1 and 16 clients and batch
// inserts, each in a fresh store.
func runInsert(ctx context.Context, c *config, r *results, s *system) error {
	for _, clients := range []int{1, 16} {
		m := mInsert1
		if clients == 16 {
			m = mInsert16
		}
		res, err := withQueue(ctx, c, s, func(q queue) (hammered, error) {
			return hammer(ctx, clients, c.InsertFor, func() (int, error) { return 1, q.Insert(ctx, 0) })
		})
		if err != nil {
			return fmt.Errorf("%s: %w", m.ID, err)
		}
		res.record(c, r, m, s.name)
	}
	return nil
}

func runBatch(ctx context.Context, c *config, r *results, s *system) error {
	res, err := withQueue(ctx, c, s, func(q queue) (hammered, error) {
		return hammer(ctx, 1, c.InsertFor, func() (int, error) { return 1000, q.InsertBatch(ctx, 1000) })
	})
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	res.record(c, r, mBatch, s.name)
	return nil
}

// withQueue runs f on a queue open on a fresh store of s.
func withQueue(ctx context.Context, c *config, s *system, f func(queue) (hammered, error)) (hammered, error) {
	var zero hammered
	dir, cleanup, err := c.freshDir(ctx, s)
	if err != nil {
		return zero, err
	}
	defer cleanup()
	q, err := s.open(ctx, dir)
	if err != nil {
		return zero, err
	}
	v, err := f(q)
	return v, errors.Join(err, q.Close())
}

// hammered is what a hammer did: items, in how long, at what CPU cost to
// this process.
type hammered struct {
	n       int64
	elapsed time.Duration
	cpu     cpuUsage
}

// record adds the rate and the CPU per 1,000 items of h as figure m.
func (h hammered) record(c *config, r *results, m metric, system string) {
	rate := float64(h.n) / h.elapsed.Seconds()
	r.add(m, system, rate)
	c.logf("%-20s %-34s %10.0f %s", system, m.Title, rate, m.Unit)
	recordCPU(c, r, cpuMetric(m), system, h.cpu, float64(h.n))
}

// hammer calls op from clients goroutines for d and returns the items they
// did, the time they took and the CPU time this process spent meanwhile
// (every system under test does its inserts in the calling process). Each
// call reports how many items it did.
func hammer(ctx context.Context, clients int, d time.Duration, op func() (int, error)) (hammered, error) {
	var (
		n        atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
	)
	cpu0, err := selfCPU()
	if err != nil {
		return hammered{}, err
	}
	start := time.Now()
	deadline := start.Add(d)
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				k, err := op()
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				n.Add(int64(k))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := selfCPU()
	if err != nil {
		return hammered{}, err
	}
	if firstErr != nil {
		return hammered{}, firstErr
	}
	return hammered{n: n.Load(), elapsed: elapsed, cpu: cpu1.sub(cpu0)}, ctx.Err()
}

// seed submits n jobs to q in batches of up to 1,000.
func seed(ctx context.Context, q queue, n int) error {
	for n > 0 {
		k := min(n, 1000)
		if err := q.InsertBatch(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// runWorkoff seeds c.Jobs no-op jobs and measures how fast workers in 1
// process (this one) and in 2 child processes (workers each) work them off,
// and the CPU time the processes that work spend on it.
func runWorkoff(ctx context.Context, c *config, r *results, s *system, workers, procs int) error {
	m := workoffMetric(procs, workers)
	dir, cleanup, err := c.freshDir(ctx, s)
	if err != nil {
		return err
	}
	defer cleanup()
	q, err := s.open(ctx, dir)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := seed(ctx, q, c.Jobs); err != nil {
		return fmt.Errorf("seed: %w", err)
	}

	var (
		handled   atomic.Int64
		start     time.Time
		selfCPU0  cpuUsage
		workCPU   func() (cpuUsage, int64, error) // the workers' CPU time and jobs so far
		stopWork  func() error
		timedOut  bool
		workCtx   context.Context
		cancel    context.CancelFunc
		workErrCh = make(chan error, 1)
	)
	if procs == 1 {
		workCtx, cancel = context.WithCancel(ctx)
		defer cancel()
		if selfCPU0, err = selfCPU(); err != nil {
			return err
		}
		start = time.Now()
		go func() {
			workErrCh <- q.Work(workCtx, workers, func(context.Context, int64) error {
				handled.Add(1)
				return nil
			}, func() {})
		}()
		// The workers run in this process, beside the poll for the
		// end: this process's CPU time is theirs and the poll's.
		workCPU = func() (cpuUsage, int64, error) {
			u, err := selfCPU()
			return u.sub(selfCPU0), handled.Load(), err
		}
		stopWork = func() error {
			cancel()
			return <-workErrCh
		}
	} else {
		var kids []*child
		defer func() {
			for _, k := range kids {
				k.kill()
			}
		}()
		for range procs {
			k, err := startChild(ctx, childSpec{Role: "work", System: s.name, Dir: dir, Workers: workers})
			if err != nil {
				return err
			}
			kids = append(kids, k)
		}
		for _, k := range kids {
			if _, err := k.expect(ctx, "open", time.Minute); err != nil {
				return err
			}
		}
		if selfCPU0, err = selfCPU(); err != nil {
			return err
		}
		start = time.Now()
		for _, k := range kids {
			if err := k.send("go"); err != nil {
				return err
			}
		}
		// Each child counts its CPU time from its "go" and reports it
		// when asked: the children's CPU time is the workers'. This
		// process only polls for the end; its CPU time is recorded
		// apart (cpuParentMetric).
		workCPU = func() (cpuUsage, int64, error) {
			for _, k := range kids {
				if err := k.send("cpu"); err != nil {
					return cpuUsage{}, 0, err
				}
			}
			var (
				sum cpuUsage
				n   int64
			)
			for _, k := range kids {
				f, err := k.expect(ctx, "cpu", time.Minute)
				if err != nil {
					return cpuUsage{}, 0, err
				}
				u, h, err := parseCPULine(f)
				if err != nil {
					return cpuUsage{}, 0, err
				}
				sum, n = sum.add(u), n+h
			}
			return sum, n, nil
		}
		stopWork = func() error {
			var errs []error
			for _, k := range kids {
				k.stdin.Close()
			}
			for _, k := range kids {
				f, err := k.expect(ctx, "handled", time.Minute)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				n, _ := strconv.ParseInt(f[0], 10, 64)
				handled.Add(n)
				errs = append(errs, k.stop(time.Minute))
			}
			kids = nil
			return errors.Join(errs...)
		}
	}

	// The run ends when the store has nothing left queued or running.
	// Until every job has started, only the handlers' counts are polled,
	// which costs the store under test nothing.
	deadline := start.Add(c.WorkoffLimit)
	if err := waitStarted(ctx, workCPU, int64(c.Jobs), deadline); err != nil {
		_ = stopWork()
		return err
	}
	end, err := waitDrained(ctx, q, deadline)
	if err != nil {
		_ = stopWork()
		return err
	}
	if end.IsZero() {
		timedOut = true
		end = time.Now()
	}
	cpu, cpuJobs, cpuErr := workCPU()
	parentCPU, _ := selfCPU() // getrusage(RUSAGE_SELF) does not fail
	parentCPU = parentCPU.sub(selfCPU0)
	if err := errors.Join(stopWork(), cpuErr); err != nil {
		return err
	}
	elapsed := end.Sub(start).Seconds()
	done := float64(handled.Load())
	if !timedOut {
		done, cpuJobs = float64(c.Jobs), int64(c.Jobs)
	}
	rate := done / elapsed
	if timedOut {
		r.note(m, s.name, fmt.Sprintf("stopped at the %s limit", c.WorkoffLimit))
		cpuNote := fmt.Sprintf("stopped at the %s limit: per job handled by then", c.WorkoffLimit)
		r.note(cpuMetric(m), s.name, cpuNote)
		if procs > 1 {
			r.note(cpuParentMetric(m), s.name, cpuNote)
		}
	}
	r.add(m, s.name, rate)
	c.logf("%-20s %-34s %10.0f %s%s", s.name, m.Title, rate, m.Unit, map[bool]string{true: " (time limit)"}[timedOut])
	recordCPU(c, r, cpuMetric(m), s.name, cpu, float64(cpuJobs))
	if procs > 1 {
		recordCPU(c, r, cpuParentMetric(m), s.name, parentCPU, float64(cpuJobs))
	}
	return nil
}

// waitStarted polls the count of jobs the handlers have started, from
// count, until it reaches n or deadline passes. A poll of the store itself
// is not free: a jobdir List writes a barrier file in claimed/, which the
// workers' watchers see, and an SQL EXISTS scans the jobs table. So the
// end is looked for in the store only once every job has started
// (waitDrained), as the last of them end.
func waitStarted(ctx context.Context, count func() (cpuUsage, int64, error), n int64, deadline time.Time) error {
	for {
		_, started, err := count()
		if err != nil {
			return fmt.Errorf("jobs started: %w", err)
		}
		if started >= n || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitDrained polls q until nothing is pending and returns when it saw
// that, or the zero time if deadline passed first.
func waitDrained(ctx context.Context, q queue, deadline time.Time) (time.Time, error) {
	for {
		pending, err := q.Pending(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("pending: %w", err)
		}
		now := time.Now()
		if !pending {
			return now, nil
		}
		if now.After(deadline) {
			return time.Time{}, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// latencyWorkers returns the handlers the latency child runs when the
// loaded figure submits rate background jobs/s: 4, or enough for River with
// its defaults to start twice that rate, whichever is more. River starts at
// most MaxWorkers jobs per FetchCooldown (100 ms by default) in one client
// and queue: it fetches no more often than that, and no more jobs than it has
// free handlers. With 4 handlers that is 40 jobs/s, below the default load of
// 50/s, so its queue grew without bound and a sample waited longer with each
// one until one passed the per-sample wait (the loaded figure of River PG's
// defaults failed in every round of the quiet run of 2026-12-01). The same
// number serves every system, so that they are compared alike.
func latencyWorkers(rate int) int {
	perCooldown := int(river.FetchCooldownDefault.Milliseconds())
	return max(4, (2*rate*perCooldown+999)/1000)
}

// latencySampleWait is the longest the latency figures wait for one sample.
// A system whose handlers keep up starts a job within its poll interval (1 s
// for River's defaults) at worst; a longer wait means a queue that grows, and
// runLatency says so in its error.
const latencySampleWait = 30 * time.Second

// sampleGap returns the idle time after the i-th latency sample: 7 to
// 107 ms, spread evenly over every 101 samples. The sample before started
// right after the system fetched it, so a fixed gap would submit every
// sample at the same point of a system that fetches on a timer (River:
// at most once per FetchCooldown, 100 ms by default) and charge it nearly
// the whole period each time: with gaps of 7-11 ms, River PG's defaults
// showed a p50 of 92 ms where samples at independent times see 43 ms. Gaps
// spread over more than that period place the samples across it, as
// independent submits would land.
func sampleGap(i int) time.Duration {
	return 7*time.Millisecond + time.Duration(i*37%101)*time.Millisecond
}

// runLatency measures submit (here) to handler start (in a child process),
// idle and under a steady background load.
func runLatency(ctx context.Context, c *config, r *results, s *system) error {
	dir, cleanup, err := c.freshDir(ctx, s)
	if err != nil {
		return err
	}
	defer cleanup()
	q, err := s.open(ctx, dir)
	if err != nil {
		return err
	}
	defer q.Close()
	k, err := startChild(ctx, childSpec{Role: "latency", System: s.name, Dir: dir, Workers: c.LatencyWorker})
	if err != nil {
		return err
	}
	defer k.kill()
	if _, err := k.expect(ctx, "ready", time.Minute); err != nil {
		return err
	}
	// Let the workers settle (River elects a leader, starts its producer).
	time.Sleep(time.Second)
	var submitted int64 // samples and load jobs, all modes
	for _, loaded := range []bool{false, true} {
		var load *backgroundLoad
		if loaded {
			load = startLoad(ctx, q, c.LoadRate)
			time.Sleep(500 * time.Millisecond)
		}
		var (
			lats   []float64
			behind backlog
		)
		for range c.LatencyN {
			if err := q.Insert(ctx, time.Now().UnixNano()); err != nil {
				return err
			}
			submitted++
			f, err := k.expect(ctx, "lat", latencySampleWait)
			if err != nil {
				if load != nil {
					_ = load.stop() // the timeout is the error to report
					err = fmt.Errorf("%w (%s)", err, behind.describe(c.LoadRate))
				}
				return err
			}
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			lats = append(lats, float64(ns)/1e6)
			if load != nil && len(f) > 1 {
				handled, _ := strconv.ParseInt(f[1], 10, 64)
				behind.sample(time.Now(), submitted+load.submitted.Load(), handled)
			}
			time.Sleep(sampleGap(len(lats)))
		}
		if load != nil {
			if err := load.stop(); err != nil {
				return fmt.Errorf("background load: %w", err)
			}
			submitted += load.submitted.Load()
			if behind.fellBehind(c.LoadRate) {
				note := behind.describe(c.LoadRate)
				for _, p := range []int{50, 99} {
					r.note(latencyMetric(true, p), s.name, note)
				}
				c.logf("%-20s loaded latency: %s", s.name, note)
			}
		}
		for _, p := range []int{50, 99} {
			m := latencyMetric(loaded, p)
			v := percentile(lats, float64(p))
			r.add(m, s.name, v)
			c.logf("%-20s %-34s %10.2f %s", s.name, m.Title, v, m.Unit)
		}
	}
	return k.stop(time.Minute)
}

// backlog follows, sample by sample, how many submitted jobs the latency
// child had not yet started, to tell a system that keeps up with the load
// from one whose queue grows.
type backlog struct {
	n                     int       // samples seen
	first, last           time.Time // when the first and the last sample arrived
	handled0, handled     int64     // jobs the child had started, at the first and the last sample
	submitted0, submitted int64     // jobs submitted, at the first and the last sample
}

func (b *backlog) sample(now time.Time, submitted, handled int64) {
	if b.n == 0 {
		b.first, b.handled0, b.submitted0 = now, handled, submitted
	}
	b.n++
	b.last, b.handled, b.submitted = now, handled, submitted
}

// fellBehind reports whether the queue grew by more than one second of load
// between the first and the last sample.
func (b *backlog) fellBehind(rate int) bool {
	return b.n > 1 && (b.submitted-b.handled)-(b.submitted0-b.handled0) > int64(rate)
}

// describe says, in words for the report, how the child kept up.
func (b *backlog) describe(rate int) string {
	switch b.n {
	case 0:
		return "no sample had come back under load"
	case 1:
		return fmt.Sprintf("%d job(s) submitted and not started at the last sample", b.submitted-b.handled)
	}
	secs := b.last.Sub(b.first).Seconds()
	return fmt.Sprintf("the child started %.0f jobs/s of the %.0f/s submitted (background load %d/s and the samples); %d jobs waited at the last sample, %d at the first",
		float64(b.handled-b.handled0)/secs, float64(b.submitted-b.submitted0)/secs, rate, b.submitted-b.handled, b.submitted0-b.handled0)
}

// backgroundLoad submits jobs at a steady rate until stopped.
type backgroundLoad struct {
	submitted atomic.Int64 // jobs submitted so far
	cancel    context.CancelFunc
	errCh     chan error
	once      sync.Once
	err       error
}

// startLoad submits rate jobs/s to q until the returned load is stopped.
func startLoad(ctx context.Context, q queue, rate int) *backgroundLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &backgroundLoad{cancel: cancel, errCh: make(chan error, 1)}
	go func() {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				l.errCh <- nil
				return
			case <-t.C:
				if err := q.Insert(ctx, 0); err != nil {
					if ctx.Err() == nil {
						l.errCh <- err
						return
					}
					continue
				}
				l.submitted.Add(1)
			}
		}
	}()
	return l
}

// stop ends the load and returns the error that ended it early, if any. It
// may be called more than once.
func (l *backgroundLoad) stop() error {
	l.once.Do(func() {
		l.cancel()
		l.err = <-l.errCh
	})
	return l.err
}

// runCancel measures a cancel issued here reaching a handler running in a
// child process (jobdir only).
func runCancel(ctx context.Context, c *config, r *results, s *system) error {
	dir, cleanup, err := c.freshDir(ctx, s)
	if err != nil {
		return err
	}
	defer cleanup()
	q, err := s.open(ctx, dir)
	if err != nil {
		return err
	}
	defer q.Close()
	jq := q.(*jobdirQueue)
	k, err := startChild(ctx, childSpec{Role: "cancel", System: s.name, Dir: dir, Workers: 4})
	if err != nil {
		return err
	}
	defer k.kill()
	if _, err := k.expect(ctx, "ready", time.Minute); err != nil {
		return err
	}
	var lats []float64
	for range c.CancelN {
		j, _, err := jq.store.Submit(ctx, benchSpec(0))
		if err != nil {
			return err
		}
		if _, err := k.expect(ctx, "started", 30*time.Second); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond) // the handler is running, its watch set up
		t0 := time.Now().UnixNano()
		if _, err := jq.store.Cancel(ctx, j.ID); err != nil {
			return err
		}
		f, err := k.expect(ctx, "stopped", 30*time.Second)
		if err != nil {
			return err
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		lats = append(lats, float64(ns-t0)/1e6)
	}
	r.add(mCancel50, s.name, percentile(lats, 50))
	r.add(mCancel99, s.name, percentile(lats, 99))
	c.logf("%-20s %-34s %10.2f ms (p99 %.2f)", s.name, mCancel50.Title, percentile(lats, 50), percentile(lats, 99))
	return k.stop(time.Minute)
}

// runKill measures the time from SIGKILL of a worker process holding a job
// until the job starts in another process (jobdir only).
func runKill(ctx context.Context, c *config, r *results, s *system) error {
	dir, cleanup, err := c.freshDir(ctx, s)
	if err != nil {
		return err
	}
	defer cleanup()
	q, err := s.open(ctx, dir)
	if err != nil {
		return err
	}
	defer q.Close()
	for range c.KillN {
		v, err := startChild(ctx, childSpec{Role: "victim", System: s.name, Dir: dir, Workers: 1})
		if err != nil {
			return err
		}
		if _, err := v.expect(ctx, "ready", time.Minute); err != nil {
			v.kill()
			return err
		}
		if err := q.Insert(ctx, 0); err != nil {
			v.kill()
			return err
		}
		if _, err := v.expect(ctx, "started", 30*time.Second); err != nil {
			v.kill()
			return err
		}
		res, err := startChild(ctx, childSpec{Role: "rescuer", System: s.name, Dir: dir, Workers: 1})
		if err != nil {
			v.kill()
			return err
		}
		if _, err := res.expect(ctx, "ready", time.Minute); err != nil {
			v.kill()
			res.kill()
			return err
		}
		// The rescuer is idle and waiting. The kill comes at a random
		// moment of its periodic recovery pass (every 250 ms by default),
		// not at a fixed delay from its start: that would put every kill
		// at one phase of the pass and report that phase alone.
		time.Sleep(time.Duration(100+rand.IntN(250)) * time.Millisecond)
		t0 := time.Now().UnixNano()
		v.kill()
		f, err := res.expect(ctx, "started", time.Minute)
		if err != nil {
			res.kill()
			return err
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		ms := float64(ns-t0) / 1e6
		r.add(mKill, s.name, ms)
		c.logf("%-20s %-34s %10.1f ms", s.name, mKill.Title, ms)
		if err := res.stop(time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// runFloor measures durable file creates from 1 and 4 writers, and the
// times of a flush and of a wake-up across processes after an idle gap.
func runFloor(ctx context.Context, c *config, r *results) error {
	for _, w := range []int{1, 4} {
		m := mFloor1
		if w == 4 {
			m = mFloor4
		}
		rate, err := measureFloor(ctx, c, w, c.FloorFor)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		r.add(m, "floor", rate)
		c.logf("%-20s %-34s %10.0f %s", "floor", m.Title, rate, m.Unit)
	}
	ms, err := measureIdleFlush(ctx, c, c.LatencyN)
	if err != nil {
		return fmt.Errorf("floor: idle flush: %w", err)
	}
	v := percentile(ms, 50)
	r.add(mIdleFlush, "floor", v)
	c.logf("%-20s %-34s %10.2f %s", "floor", mIdleFlush.Title, v, mIdleFlush.Unit)
	if ms, err = measureIdleWake(ctx, c, c.LatencyN); err != nil {
		return fmt.Errorf("floor: idle wake: %w", err)
	}
	v = percentile(ms, 50)
	r.add(mIdleWake, "floor", v)
	c.logf("%-20s %-34s %10.2f %s", "floor", mIdleWake.Title, v, mIdleWake.Unit)
	return nil
}

// scratch returns a directory for data kept across rounds.
func (c *config) scratch(name string) string { return filepath.Join(c.Dir, name) }
