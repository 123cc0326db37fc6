//go:build linux

package execjob

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const supported = true

// sysProcAttr puts the program in a process group of its own, so that
// signals reach everything it starts, and asks the kernel to SIGKILL it when
// the thread that started it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends sig to the process group led by pid. A group that is
// already empty is not an error.
func killGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// waitExited blocks until process pid has exited, leaving it a zombie for
// exec.Cmd.Wait to reap.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			if err != nil {
				return os.NewSyscallError("waitid", err)
			}
			return nil
		}
	}
}

// exitStatus returns the exit code of ps and, if a signal killed it, the
// signal's name.
func exitStatus(ps *os.ProcessState) (code int, signal string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}
