package torture

import "syscall"

// childAttr makes a child die with the driver, so that an interrupted run
// leaves no process behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
