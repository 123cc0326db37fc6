package main

import (
	"fmt"
	"strconv"
	"syscall"
	"time"
)

// cpuUsage is CPU time spent by a process: in user mode and in the kernel
// on its behalf (system calls, page faults), every thread together.
type cpuUsage struct {
	User, Sys time.Duration
}

// selfCPU returns the CPU time this process has used so far
// (getrusage(RUSAGE_SELF): every thread, no child processes), to the
// microsecond.
func selfCPU() (cpuUsage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuUsage{}, fmt.Errorf("getrusage: %w", err)
	}
	return cpuUsage{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}, nil
}

// sub returns the CPU time spent between before and u.
func (u cpuUsage) sub(before cpuUsage) cpuUsage {
	return cpuUsage{User: u.User - before.User, Sys: u.Sys - before.Sys}
}

// add returns the CPU time of u and v together.
func (u cpuUsage) add(v cpuUsage) cpuUsage {
	return cpuUsage{User: u.User + v.User, Sys: u.Sys + v.Sys}
}

// total is user and system time together.
func (u cpuUsage) total() time.Duration { return u.User + u.Sys }

// cpuPerThousand returns the CPU seconds (user+sys) that jobs jobs cost per
// 1,000 of them, and false when there were none to divide by.
func cpuPerThousand(u cpuUsage, jobs float64) (float64, bool) {
	if jobs <= 0 {
		return 0, false
	}
	return u.total().Seconds() / jobs * 1000, true
}

// cpuLine is the line a work child prints when asked for its CPU time:
// "cpu USER_NS SYS_NS HANDLED", the CPU time it has spent since the "go"
// that started its workers and the jobs its handlers have started by then.
func cpuLine(u cpuUsage, handled int64) string {
	return fmt.Sprintf("cpu %d %d %d", u.User.Nanoseconds(), u.Sys.Nanoseconds(), handled)
}

// parseCPULine reads the fields after "cpu" of a cpuLine.
func parseCPULine(f []string) (cpuUsage, int64, error) {
	if len(f) != 3 {
		return cpuUsage{}, 0, fmt.Errorf("cpu line %q: want user, sys and handled", f)
	}
	var n [3]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return cpuUsage{}, 0, fmt.Errorf("cpu line %q: %q is not a count", f, s)
		}
		n[i] = v
	}
	return cpuUsage{User: time.Duration(n[0]), Sys: time.Duration(n[1])}, n[2], nil
}

// cpuMetric is the CPU figure of the throughput figure m: CPU seconds per
// 1,000 jobs over the same measured interval.
func cpuMetric(m metric) metric {
	return metric{
		ID:    "cpu-" + m.ID,
		Title: m.Title,
		Unit:  cpuUnit,
		Group: "cpu",
		Order: 2 * m.Order,
	}
}

// cpuParentMetric is the CPU time, per 1,000 jobs, that the benchmark's own
// process spent during a multi-process work-off m, whose workers are all in
// child processes: the poll for the end and, for jobdir's file store, the
// store it polls through handling the file events of the children's work.
// It is not part of the figure of cpuMetric(m); its row follows that one.
func cpuParentMetric(m metric) metric {
	return metric{
		ID:    "cpu-parent-" + m.ID,
		Title: m.Title + ", the benchmark's process polling (not counted in the row above)",
		Unit:  cpuUnit,
		Group: "cpu",
		Order: 2*m.Order + 1,
	}
}

// cpuUnit is the CPU figures' unit.
const cpuUnit = "CPU s per 1,000 jobs"

// recordCPU adds the CPU figure cm for system: u spent on jobs jobs. It
// logs and records nothing when no job was done.
func recordCPU(c *config, r *results, cm metric, system string, u cpuUsage, jobs float64) {
	v, ok := cpuPerThousand(u, jobs)
	if !ok {
		return
	}
	r.add(cm, system, v)
	c.logf("%-20s %-34s %10s CPU s per 1,000 jobs (user %s, sys %s)", system, cm.Title, fmtNum(v),
		u.User.Round(time.Millisecond), u.Sys.Round(time.Millisecond))
}
