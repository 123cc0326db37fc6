package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// report holds what the tables need besides the figures.
type report struct {
	r       *results
	systems []*system
	cfg     *config
	// Machine describes the machine and file system.
	Machine string
	// Command is the exact command line.
	Command string
}

// fmtNum formats v with a precision that suits its size.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.Round(a) >= 1000:
		return thousands(int64(math.Round(v)))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a >= 0.1 || a == 0:
		return fmt.Sprintf("%.3f", v)
	default:
		// Three significant digits, down to a millionth: the CPU per
		// 1,000 jobs of the in-memory store is a few thousandths of a
		// second, which "%.3f" would leave one digit of.
		return fmt.Sprintf("%.*f", min(6, 2-int(math.Floor(math.Log10(a)))), v)
	}
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// cell formats a series as "median (min–max)".
func cell(s *series) string {
	if s == nil || len(s.Values) == 0 {
		return "—"
	}
	sum := summarize(s.Values)
	txt := fmtNum(sum.Median)
	if sum.N > 1 {
		txt += fmt.Sprintf(" (%s–%s)", fmtNum(sum.Min), fmtNum(sum.Max))
	}
	if len(s.Notes) > 0 {
		txt += " †"
	}
	return txt
}

func (rp *report) median(id, system string) (float64, bool) {
	s := rp.r.get(id, system)
	if s == nil || len(s.Values) == 0 {
		return 0, false
	}
	return summarize(s.Values).Median, true
}

// bestPeer returns the best peer median of metric m among peers whose
// durability matches durable (any peer when durable is false), and the
// peer's label.
func (rp *report) bestPeer(m metric, durable bool) (float64, string, bool) {
	p, v, ok := rp.bestPeerSystem(m, durable)
	if !ok {
		return 0, "", false
	}
	return v, p.label, true
}

// bestPeerSystem is bestPeer returning the peer itself.
func (rp *report) bestPeerSystem(m metric, durable bool) (*system, float64, bool) {
	return rp.bestPeerAmong(m, func(s *system) bool { return !durable || s.durable })
}

// bestSQLitePeer is bestPeer among the durable peers on SQLite, which the
// file store's targets name: a directory on one node stands in for an
// embedded database, not for a database server (pgstore's targets are
// against River PG).
func (rp *report) bestSQLitePeer(m metric) (float64, string, bool) {
	p, v, ok := rp.bestPeerAmong(m, func(s *system) bool { return s.durable && !s.pg })
	if !ok {
		return 0, "", false
	}
	return v, p.label, true
}

// bestPeerAmong returns the peer with the best median of m among those
// that keep says to.
func (rp *report) bestPeerAmong(m metric, keep func(*system) bool) (*system, float64, bool) {
	var (
		best  float64
		peer  *system
		found bool
	)
	for _, s := range rp.systems {
		if s.jobdir || !keep(s) {
			continue
		}
		v, ok := rp.median(m.ID, s.name)
		if !ok {
			continue
		}
		if !found || (m.Higher && v > best) || (!m.Higher && v < best) {
			best, peer, found = v, s, true
		}
	}
	return peer, best, found
}

// floorFor returns the floor a figure is compared with: one writer's
// durable creates for single-client figures, four writers' otherwise; for
// a latency, the time of one durable create from one writer.
func (rp *report) floorFor(m metric) (float64, string, bool) {
	id := mFloor4.ID
	if m.ID == mInsert1.ID || strings.HasSuffix(m.ID, "-1w") || m.Unit == "ms" {
		id = mFloor1.ID
	}
	v, ok := rp.median(id, "floor")
	if !ok || v == 0 {
		return 0, "", false
	}
	if m.Unit == "ms" {
		return 1000 / v, "1 durable create", true
	}
	return v, id, true
}

func (rp *report) writeGroup(w io.Writer, group, heading string, systems []*system) {
	rp.writeGroupIntro(w, group, heading, "", systems)
}

// writeGroupIntro is writeGroup with a paragraph between the heading and
// the table (none if intro is empty).
func (rp *report) writeGroupIntro(w io.Writer, group, heading, intro string, systems []*system) {
	ms := rp.r.sortedMetrics(group)
	if len(ms) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### %s\n\n", heading)
	if intro != "" {
		fmt.Fprintf(w, "%s\n\n", intro)
	}
	fmt.Fprint(w, "| figure | unit |")
	for _, s := range systems {
		fmt.Fprintf(w, " %s |", s.label)
	}
	fmt.Fprint(w, "\n|---|---|")
	for range systems {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, m := range ms {
		fmt.Fprintf(w, "| %s | %s |", m.Title, m.Unit)
		for _, s := range systems {
			c := cell(rp.r.get(m.ID, s.name))
			if c == "—" && m.ID == mKill.ID && s.rescueAfter != "" {
				c = "≥ " + s.rescueAfter
			}
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintln(w)
	}
}

// writeMarkdown writes the whole report.
func (rp *report) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "Machine: %s\n\nCommand: `%s`\n\n", rp.Machine, rp.Command)
	fmt.Fprintf(w, "Each cell is the median over %d round(s), with the range (min–max) in brackets when there are several. † marks a figure with a note (below).\n", rp.cfg.Rounds)

	var sys []*system
	for _, s := range rp.systems {
		if s.name != "floor" {
			sys = append(sys, s)
		}
	}
	rp.writeGroup(w, "throughput", "Throughput (higher is better)", sys)
	rp.writeGroupIntro(w, "cpu", "CPU per 1,000 jobs (lower is better)", cpuIntro, sys)
	rp.writeGroup(w, "latency", "Latency (lower is better)", sys)
	var jd []*system
	for _, s := range sys {
		if s.jobdir && !s.inProcess {
			jd = append(jd, s)
		}
	}
	rp.writeGroup(w, "scale", "Scaling of jobdir's file store (lower is better)", jd)
	rp.writeGroup(w, "floor", "File-system floor, same disk, same run", []*system{{name: "floor", label: "files/s"}})
	rp.writeRatios(w, sys)
	rp.writeNotes(w, sys)
	rp.writeTargets(w)
}

// cpuIntro says what the CPU table counts.
const cpuIntro = "User plus system CPU seconds per 1,000 jobs, of the processes that do the work, over the interval the throughput figure of the same name measures (getrusage): the benchmark's process for the inserts and the 1-process work-offs (including its poll for the end of the work-off, every 10 ms: of the handlers' count until every job has started, then of the store), the two child processes together for the 2-process work-offs, without the benchmark's process, whose CPU over the same interval (its poll and, for jobdir's file store once every job has started, the open store handling the file events of the children's work) is the row after, not counted in the comparisons. SQLite runs inside those processes, so its CPU is counted; a PostgreSQL server's CPU, in processes of its own, is not, nor that of the kernel's own threads (journal commits, writeback)."

func (rp *report) writeRatios(w io.Writer, sys []*system) {
	var ms []metric
	for _, g := range []string{"throughput", "latency"} {
		ms = append(ms, rp.r.sortedMetrics(g)...)
	}
	if len(ms) == 0 {
		return
	}
	fmt.Fprint(w, "\n### jobdir against the best peer and the floor\n\n")
	fmt.Fprint(w, "The durable file store is compared with the durable peers (synchronous=FULL); the no-fsync file store and memstore with the best peer in either mode. A throughput ratio above 1 and a latency ratio below 1 favour jobdir. The floor is the same run's durable file creates: one writer for single-client figures, four writers otherwise; for latencies, the time of one durable create. The last three columns are the CPU seconds per 1,000 jobs of jobdir and of the same best peer (see the CPU table): a CPU ratio below 1 means jobdir spent less CPU per job.\n\n")
	fmt.Fprint(w, "| figure | jobdir store | jobdir | best peer | peer | × best peer | floor | × floor | CPU/1k jobs | peer CPU/1k jobs | × peer CPU |\n|---|---|---:|---|---:|---:|---|---:|---:|---:|---:|\n")
	for _, m := range ms {
		for _, s := range sys {
			if !s.jobdir {
				continue
			}
			v, ok := rp.median(m.ID, s.name)
			if !ok {
				continue
			}
			peerCell, peerName, ratio := "—", "—", "—"
			peer, p, havePeer := rp.bestPeerSystem(m, s.durable)
			if havePeer {
				peerCell, peerName = fmtNum(p), peer.label
				if p != 0 {
					ratio = fmt.Sprintf("%.2f", v/p)
				}
			}
			floorName, floorRatio := "—", "—"
			if f, name, ok := rp.floorFor(m); ok {
				floorName = fmt.Sprintf("%s (%s)", name, fmtNum(f))
				floorRatio = fmt.Sprintf("%.2f", v/f)
			}
			cpu, peerCPU, cpuRatio := "—", "—", "—"
			if m.Group == "throughput" {
				cm := cpuMetric(m)
				jc, jok := rp.median(cm.ID, s.name)
				if jok {
					cpu = fmtNum(jc)
				}
				if havePeer {
					if pc, ok := rp.median(cm.ID, peer.name); ok {
						peerCPU = fmtNum(pc)
						if jok && pc != 0 {
							cpuRatio = fmt.Sprintf("%.2f", jc/pc)
						}
					}
				}
			}
			fmt.Fprintf(w, "| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				m.Title, m.Unit, s.label, fmtNum(v), peerName, peerCell, ratio, floorName, floorRatio, cpu, peerCPU, cpuRatio)
		}
	}
}

// target is one of the targets, checked against the medians.
type target struct {
	Name     string
	Measured string
	Met      string // **met**, missed, or n/a (not measured)
}

// The durable file stores the targets are checked for.
const (
	defaultFileSystem = "jobdir-file"
	syncFSSystem      = "jobdir-file-syncfs"
)

// targetWorkers is the worker count per process of the work-off target.
const targetWorkers = 100

// verdict is a target's Met for a ratio or limit met or missed, or not
// known because a figure is missing.
func verdict(met, known bool) string {
	if !known {
		return "n/a (not measured)"
	}
	if met {
		return "**met**"
	}
	return "missed"
}

// targets checks the targets for the durable file store system fs: first
// the throughput targets against the best durable SQLite peer and the floor
// (always listed, n/a when a figure is missing), then issue 6's latency and
// scaling targets, those of them that were measured. The scaling targets
// use the default store's figures, the only ones taken.
func (rp *report) targets(fs string) []target {
	if _, ok := rp.median(mInsert1.ID, fs); !ok && fs != defaultFileSystem {
		return nil
	}
	var ts []target
	add := func(name, measured string, ok, known bool) {
		ts = append(ts, target{name, measured, verdict(ok, known)})
	}
	ratioTarget := func(name string, m metric, want float64, peer func() (float64, string, bool)) {
		v, ok := rp.median(m.ID, fs)
		p, pname, pok := peer()
		if !ok || !pok || p == 0 {
			add(name, "—", false, false)
			return
		}
		add(name, fmt.Sprintf("%s vs %s %s = %.2f×", fmtNum(v), pname, fmtNum(p), v/p), v/p >= want, true)
	}
	bestDurable := func(m metric) func() (float64, string, bool) {
		return func() (float64, string, bool) { return rp.bestSQLitePeer(m) }
	}
	wo := workoffMetric(2, targetWorkers)
	ratioTarget(fmt.Sprintf("durable work-off, %d workers × 2 processes ≥ 2× the best durable SQLite peer", targetWorkers), wo, 2, bestDurable(wo))
	ratioTarget("batch insert, 1,000 per call ≥ 1× the best durable SQLite peer", mBatch, 1, bestDurable(mBatch))
	ratioTarget("durable inserts, 1 client ≥ 1× the best durable SQLite peer", mInsert1, 1, bestDurable(mInsert1))
	ratioTarget("durable inserts, 1 client ≥ 0.9× the floor (durable creates, 1 writer)", mInsert1, 0.9, func() (float64, string, bool) {
		v, ok := rp.median(mFloor1.ID, "floor")
		return v, "floor", ok
	})
	ratioTarget("durable inserts, 16 clients ≥ 1.5× the best durable SQLite peer", mInsert16, 1.5, bestDurable(mInsert16))

	below := func(name string, m metric, system string, limit float64, unit string) {
		if v, ok := rp.median(m.ID, system); ok {
			add(name, fmtNum(v)+" "+unit, v < limit, true)
		}
	}
	if v, ok := rp.median(latencyMetric(false, 50).ID, fs); ok {
		measured := fmtNum(v) + " ms"
		var floor []string
		if f, ok := rp.median(mIdleFlush.ID, "floor"); ok {
			// A durable submit waits for one flush at least, and the
			// other process must then be woken: the disk's and the
			// kernel's own times for them, idle, say how much of the
			// target is left to the store.
			floor = append(floor, "the disk's idle flush alone: "+fmtNum(f)+" ms")
		}
		if w, ok := rp.median(mIdleWake.ID, "floor"); ok {
			floor = append(floor, "a wake-up in another process: "+fmtNum(w)+" ms")
		}
		if len(floor) > 0 {
			measured += " (" + strings.Join(floor, "; ") + ")"
		}
		add("submit to handler start, other process, idle, p50 < 1 ms", measured, v < 1, true)
	}
	below("submit to handler start, other process, idle, p99 < 10 ms", latencyMetric(false, 99), fs, 10, "ms")
	below("cross-process cancel reaching the handler, p50 < 20 ms", mCancel50, fs, 20, "ms")
	below("SIGKILLed worker's job starting elsewhere < 1 s", mKill, fs, 1000, "ms")
	sizes := rp.cfg.ScaleSizes
	if len(sizes) >= 2 {
		lo, hi := sizes[0], sizes[len(sizes)-1]
		gl, cl, ll, _, _ := scaleMetrics(lo)
		gh, ch, lh, oh, rh := scaleMetrics(hi)
		for _, p := range []struct {
			name   string
			lo, hi metric
		}{
			{"get", gl, gh}, {"claim+complete", cl, ch}, {"list of queued jobs", ll, lh},
		} {
			a, okA := rp.median(p.lo.ID, defaultFileSystem)
			b, okB := rp.median(p.hi.ID, defaultFileSystem)
			if !okA || !okB || a == 0 {
				continue
			}
			name := fmt.Sprintf("%s at %s jobs within 1.5× of %s", p.name, sizeLabel(hi), sizeLabel(lo))
			add(name, fmt.Sprintf("%s → %s %s = %.2f×", fmtNum(a), fmtNum(b), p.lo.Unit, b/a), b/a <= 1.5, true)
		}
		below(fmt.Sprintf("open at %s jobs < 1 s", sizeLabel(hi)), oh, defaultFileSystem, 1000, "ms")
		below(fmt.Sprintf("peak RSS at %s jobs < 100 MiB", sizeLabel(hi)), rh, defaultFileSystem, 100, "MiB")
	}
	if fs == defaultFileSystem {
		ts = append(ts, rp.cliTargets(fs)...)
	}
	return ts
}

// cliTargets checks that each of jobdir's commands, a whole process, costs
// at most 1.5× at the largest cli store size what it costs at the
// smallest, on system.
func (rp *report) cliTargets(system string) []target {
	var sizes []int
	for _, m := range rp.r.sortedMetrics("scale") {
		if rest, ok := strings.CutPrefix(m.ID, "cli-get-"); ok {
			if n, ok := parseSize(rest); ok {
				sizes = append(sizes, n)
			}
		}
	}
	if len(sizes) < 2 {
		return nil
	}
	slices.Sort(sizes)
	lo, hi := sizes[0], sizes[len(sizes)-1]
	var ts []target
	measured := false
	for _, cmd := range cliCommands {
		a, okA := rp.median(cliMetric(cmd, lo).ID, system)
		b, okB := rp.median(cliMetric(cmd, hi).ID, system)
		name := fmt.Sprintf("jobdir %s (whole process) at %s jobs within 1.5× of %s", cmd, sizeLabel(hi), sizeLabel(lo))
		if !okA || !okB || a == 0 {
			ts = append(ts, target{name, "—", verdict(false, false)})
			continue
		}
		measured = true
		ts = append(ts, target{name, fmt.Sprintf("%s → %s ms = %.2f×", fmtNum(a), fmtNum(b), b/a), verdict(b/a <= 1.5, true)})
	}
	if !measured {
		return nil // system had no cli figures in this run
	}
	return ts
}

func (rp *report) writeTargets(w io.Writer) {
	for _, fs := range []struct{ name, title string }{
		{defaultFileSystem, "jobdir file store, durable"},
		{syncFSSystem, "jobdir file store, durable, SyncFS"},
	} {
		ts := rp.targets(fs.name)
		if len(ts) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n### Targets (%s)\n\n| target | measured (medians) | |\n|---|---|---|\n", fs.title)
		for _, t := range ts {
			fmt.Fprintf(w, "| %s | %s | %s |\n", t.Name, t.Measured, t.Met)
		}
	}
	if ts := rp.pgTargets(); len(ts) > 0 {
		fmt.Fprint(w, "\n### Targets (jobdir pgstore: against River PG with its defaults, same server, same run; commands at scale)\n\n| target | measured (medians) | |\n|---|---|---|\n")
		for _, t := range ts {
			fmt.Fprintf(w, "| %s | %s | %s |\n", t.Name, t.Measured, t.Met)
		}
	}
}

// pgTargets checks issue 13's targets for pgstore, against River PG with
// its defaults, measured in the same run.
func (rp *report) pgTargets() []target {
	cli := rp.cliTargets(pgstoreSystemName)
	if _, ok := rp.median(mInsert1.ID, pgstoreSystemName); !ok {
		return cli
	}
	var ts []target
	add := func(name, measured string, ok, known bool) {
		ts = append(ts, target{name, measured, verdict(ok, known)})
	}
	// compare checks pgstore's m against River PG's: at least want times
	// it for a throughput, at most want times it for a latency.
	compare := func(name string, m metric, want float64) {
		v, ok := rp.median(m.ID, pgstoreSystemName)
		p, pok := rp.median(m.ID, riverPGSystemName)
		if !ok || !pok || p == 0 {
			add(name, "—", false, false)
			return
		}
		met := v/p >= want
		if !m.Higher {
			met = v/p <= want
		}
		add(name, fmt.Sprintf("%s vs River PG %s %s = %.2f×", fmtNum(v), fmtNum(p), m.Unit, v/p), met, true)
	}
	if len(rp.cfg.Workers) > 0 {
		wmax := rp.cfg.Workers[len(rp.cfg.Workers)-1]
		compare(fmt.Sprintf("work-off, 2 processes × %d workers ≥ River PG", wmax), workoffMetric(2, wmax), 1)
	}
	compare("batch insert ≥ River PG's InsertMany", mBatch, 1)
	compare("submit to handler start, other process, idle, p50 ≤ 1/10 of River PG's", latencyMetric(false, 50), 0.1)
	below := func(name string, m metric, limit float64) {
		v, ok := rp.median(m.ID, pgstoreSystemName)
		add(name, map[bool]string{true: fmtNum(v) + " " + m.Unit, false: "—"}[ok], v < limit, ok)
	}
	below("submit to handler start, other process, idle, p50 < 5 ms", latencyMetric(false, 50), 5)
	below("cross-process cancel reaching the handler, p50 < 50 ms", mCancel50, 50)
	below("SIGKILLed worker's job starting elsewhere < 2 s", mKill, 2000)
	return append(ts, cli...)
}

func (rp *report) writeNotes(w io.Writer, sys []*system) {
	var lines []string
	for _, g := range []string{"throughput", "cpu", "latency", "scale"} {
		for _, m := range rp.r.sortedMetrics(g) {
			title := m.Title
			if g == "cpu" {
				title = "CPU of " + title
			}
			for _, s := range sys {
				if se := rp.r.get(m.ID, s.name); se != nil {
					for _, n := range se.Notes {
						lines = append(lines, fmt.Sprintf("- † %s, %s: %s", title, s.label, n))
					}
				}
			}
		}
	}
	rp.r.mu.Lock()
	for _, n := range rp.r.notes {
		lines = append(lines, "- "+n)
	}
	rp.r.mu.Unlock()
	if len(lines) > 0 {
		fmt.Fprintf(w, "\n### Notes\n\n%s\n", strings.Join(lines, "\n"))
	}
}
