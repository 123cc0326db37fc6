package reaper

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// interval is how often a round runs without a SIGCHLD or ChildDone.
const interval = 5 * time.Second

var (
	// forks is held for reading across a fork and its registration in
	// own, and for writing by a round.
	forks sync.RWMutex
	// mu guards own.
	mu sync.Mutex
	// own counts the children StartChild started that their waiters have
	// not waited for yet, by PID.
	own = map[int]int{}
	// poke starts a round.
	poke = make(chan struct{}, 1)
)

// StartChild starts cmd as cmd.Start does, and keeps Reap off its process
// until ChildDone says that it was waited for.
func StartChild(cmd *exec.Cmd) error {
	forks.RLock()
	defer forks.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	mu.Lock()
	own[cmd.Process.Pid]++
	mu.Unlock()
	return nil
}

// ChildDone says that the process pid, which StartChild started, was waited
// for (by cmd.Wait, say).
func ChildDone(pid int) {
	mu.Lock()
	if own[pid]--; own[pid] <= 0 {
		delete(own, pid)
	}
	mu.Unlock()
	select {
	case poke <- struct{}{}:
	default:
	}
}

func owned(pid int) bool {
	mu.Lock()
	defer mu.Unlock()
	return own[pid] > 0
}

// Reap reaps, until stop is called, every child of this process that
// StartChild did not start, as soon as it exits. It is meant for a process
// that is PID 1 of its namespace, or a child subreaper.
func Reap() (stop func()) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			round()
			select {
			case <-chld:
			case <-poke:
			case <-tick.C:
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(chld)
			close(done)
			<-finished
		})
	}
}

// round reaps the children that exited, up to the first that is this
// process's own, and returns how many it reaped.
func round() int {
	forks.Lock()
	defer forks.Unlock()
	n := 0
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		pid := siginfoPid(&info)
		if err != nil || pid <= 0 || owned(pid) {
			// No child (ECHILD), none exited yet, or the next is one
			// whose waiter will take it.
			return n
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return n
		}
		n++
	}
}

// siginfoPid returns the si_pid of a siginfo that waitid filled: the first
// field of the union that follows three ints, aligned as a pointer.
func siginfoPid(info *unix.Siginfo) int {
	off := (12 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}
