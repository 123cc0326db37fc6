package supervise

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// procStat is what /proc/<pid>/stat says about a process that matters here.
type procStat struct {
	ppid  int
	start uint64 // start time, in clock ticks after boot
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// The command name, in parentheses, may hold anything; the fields
	// after its closing parenthesis are plain: state, ppid, pgrp, ...
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{ppid: ppid, start: start}, true
}

// descendants returns every process under root, found by following parent
// links through /proc. A process that escaped its parent (setsid, a
// double fork) is still under root, because root is a child subreaper and
// adopts the orphans of its subtree.
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := make(map[int][]int)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// signalDescendant sends sig to pid if it is still under root, and reports
// whether it did. Through a pidfd, so that a PID that was freed and reused
// since the search is never signalled: the pidfd names one process, which
// is checked to still have its parent under root (or root itself).
func signalDescendant(root, pid int, sig unix.Signal) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	st, ok := readStat(pid)
	if !ok || !isUnder(root, st.ppid) {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// isUnder reports whether pid is root or one of its descendants.
func isUnder(root, pid int) bool {
	for range 1 << 16 { // a cycle is impossible, but a bound is cheap
		if pid == root {
			return true
		}
		if pid <= 1 {
			return false
		}
		st, ok := readStat(pid)
		if !ok {
			return false
		}
		pid = st.ppid
	}
	return false
}

// signalInCgroup sends sig to pid, through a pidfd, if it is in the cgroup
// rel (its path as /proc/<pid>/cgroup writes it), and reports whether it
// did.
func signalInCgroup(pid int, rel string, sig unix.Signal) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil || !bytes.Contains(b, []byte("0::"+rel+"\n")) {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}
