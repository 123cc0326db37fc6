package torture

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// latencyDir holds, under the records, one log per child incarnation
// (<name>.log) of the store operations it made: "<op>\t<start>\t<end>",
// both on CLOCK_MONOTONIC. The driver sets them beside the SIGSTOPs to see
// whether a stopped process slowed the others down.
const latencyDir = "latency"

// Timed operations, as named in the latency logs.
const (
	opSubmit = "submit"
	opBatch  = "submit-batch"
	// opKeyHit and opBatchKeyHit are a Submit that found its key's job,
	// and a SubmitBatch that found one for some key.
	opKeyHit      = "submit-found"
	opBatchKeyHit = "submit-batch-found"
	opClaim       = "claim"
	opGet         = "get"
	opComplete    = "complete"
	opCancel      = "cancel"
	opList        = "list"
	opStats       = "stats"
)

// latencyLog buffers a child's operation times and writes them to its log
// every flushEvery and at Close. A SIGKILL loses what was not written yet.
type latencyLog struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

const flushEvery = 200 * time.Millisecond

func openLatencyLog(recDir, name string) (*latencyLog, error) {
	f, err := os.OpenFile(filepath.Join(recDir, latencyDir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	l := &latencyLog{f: f, w: bufio.NewWriter(f), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				l.flush()
			}
		}
	}()
	return l, nil
}

// record notes that op ran from start (CLOCK_MONOTONIC) until now.
func (l *latencyLog) record(op string, start int64) {
	end := monoNow()
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s\t%d\t%d\n", op, start, end)
}

func (l *latencyLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.w.Flush() // a lost figure is no violation; the run goes on
}

// Close writes what is buffered and closes the log.
func (l *latencyLog) Close() error {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// timedStore times the calls that must not wait on another process:
// Submit, SubmitBatch, Get, List, Claim, Complete, Cancel and Stats. It does not
// time Wait, AwaitWork and WatchCancel, which wait for events by design.
// Only the harness's own roles use it: it hides the optional interfaces of
// the store (runner.LeaseFiler and any later one) from runner.Runner.
type timedStore struct {
	jobstore.Store
	log *latencyLog
}

func (s timedStore) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	start := monoNow()
	j, created, err := s.Store.Submit(ctx, spec)
	op := opSubmit
	if err == nil && !created {
		op = opKeyHit
	}
	s.log.record(op, start)
	return j, created, err
}

func (s timedStore) SubmitBatch(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
	start := monoNow()
	out, err := s.Store.SubmitBatch(ctx, specs)
	op := opBatch
	if slices.ContainsFunc(out, func(r jobstore.Submitted) bool { return !r.Created }) {
		op = opBatchKeyHit
	}
	s.log.record(op, start)
	return out, err
}

func (s timedStore) Get(ctx context.Context, id string) (jobstore.Job, error) {
	defer s.log.record(opGet, monoNow())
	return s.Store.Get(ctx, id)
}

func (s timedStore) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	defer s.log.record(opList, monoNow())
	return s.Store.List(ctx, opts)
}

func (s timedStore) Claim(ctx context.Context, req jobstore.ClaimRequest) (jobstore.Job, error) {
	defer s.log.record(opClaim, monoNow())
	return s.Store.Claim(ctx, req)
}

func (s timedStore) Complete(ctx context.Context, lease jobstore.Lease, o jobstore.Outcome) (jobstore.Job, error) {
	defer s.log.record(opComplete, monoNow())
	return s.Store.Complete(ctx, lease, o)
}

func (s timedStore) Cancel(ctx context.Context, id string) (jobstore.Job, error) {
	defer s.log.record(opCancel, monoNow())
	return s.Store.Cancel(ctx, id)
}

func (s timedStore) Stats(ctx context.Context) (jobstore.Stats, error) {
	defer s.log.record(opStats, monoNow())
	return s.Store.Stats(ctx)
}

// opRec is one timed operation of one child incarnation.
type opRec struct {
	op, proc   string
	start, end int64
}

// readLatencies reads every latency log under the records.
func readLatencies(recDir string) ([]opRec, error) {
	logs, err := filepath.Glob(filepath.Join(recDir, latencyDir, "*.log"))
	if err != nil {
		return nil, err
	}
	var ops []opRec
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		proc := strings.TrimSuffix(filepath.Base(p), ".log")
		for _, line := range strings.Split(string(b), "\n") {
			f := fields(line)
			if len(f) != 3 {
				continue // the empty last line, or a line cut short by a SIGKILL
			}
			start, err1 := strconv.ParseInt(f[1], 10, 64)
			end, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			ops = append(ops, opRec{op: f[0], proc: proc, start: start, end: end})
		}
	}
	return ops, nil
}

// mayWaitForOwnJob reports whether an operation named op may rightly wait
// for a stopped process: a stopped process delays changes of the jobs it
// was changing, and a Submit of the key of a job it was submitting (which
// may yet be taken back). A Cancel may name any process's job (the
// canceller cancels others' jobs), and a Submit that found its key's job
// may have waited for that job's submit; the run cannot tell whose job it
// was, so these are counted as stalls but never a violation.
func mayWaitForOwnJob(op string) bool {
	return op == opCancel || op == opKeyHit || op == opBatchKeyHit
}

// Latency sums up the durations of a set of store operations.
type Latency struct {
	// N counts the operations.
	N int
	// P99 and Max are their 99th percentile and longest duration.
	P99, Max time.Duration
}

func (l Latency) String() string {
	if l.N == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, p99 %s, max %s", l.N, l.P99.Round(time.Millisecond), l.Max.Round(time.Millisecond))
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{N: len(ds), P99: ds[(len(ds)*99)/100], Max: ds[len(ds)-1]}
}

// checkLatencies sets the latency figures of r from the timed operations
// and the SIGSTOP pauses of each child (by incarnation name). An operation
// counts as "during stops" if it overlapped a pause of another process
// while its own process was never paused during it; one whose own process
// was paused meanwhile is left out. Operations of those that took longer
// than stall are counted in r.Stalls, and are violations if maxStall is
// positive and they took longer than that, unless they may have waited for
// a job of the stopped process itself (see mayWaitForOwnJob).
func checkLatencies(r *Report, ops []opRec, stops map[string][]pause, stall, maxStall time.Duration) {
	overlaps := func(ps []pause, from, to int64) bool {
		return slices.ContainsFunc(ps, func(p pause) bool { return p.from < to && (p.to == 0 || p.to > from) })
	}
	during, outside := map[string][]time.Duration{}, map[string][]time.Duration{}
	var all []time.Duration
	var worst opRec
	for _, o := range ops {
		r.TimedOps++
		if overlaps(stops[o.proc], o.start, o.end) {
			continue
		}
		d := time.Duration(o.end - o.start)
		other := false
		for name, ps := range stops {
			if name != o.proc && overlaps(ps, o.start, o.end) {
				other = true
				break
			}
		}
		if !other {
			outside[o.op] = append(outside[o.op], d)
			continue
		}
		during[o.op] = append(during[o.op], d)
		all = append(all, d)
		if d > time.Duration(worst.end-worst.start) {
			worst = o
		}
		if d > stall {
			r.Stalls++
			if maxStall > 0 && d > maxStall && !mayWaitForOwnJob(o.op) {
				r.violate("%s by %s took %s while another process was stopped (limit %s)", o.op, o.proc, d.Round(time.Millisecond), maxStall)
			}
		}
	}
	r.DuringStops = latencyOf(all)
	if worst.proc != "" {
		r.WorstDuringStops = fmt.Sprintf("%s by %s", worst.op, worst.proc)
	}
	r.OpsDuringStops, r.OpsOutsideStops = map[string]Latency{}, map[string]Latency{}
	for op, ds := range during {
		r.OpsDuringStops[op] = latencyOf(ds)
	}
	for op, ds := range outside {
		r.OpsOutsideStops[op] = latencyOf(ds)
	}
	r.StallLimit = stall
}
