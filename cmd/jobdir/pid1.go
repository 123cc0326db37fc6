package main

import (
	"os"

	"github.com/jobdir/jobdir/internal/reaper"
)

// reapOrphans starts reaping, when this process is PID 1 of its PID
// namespace (a container's), the orphans the kernel hands it, and returns
// what stops it; elsewhere it does nothing. A PID 1 that does not reap
// collects zombies of every command a person runs in the container and
// leaves running in the background (TestE2EPID1ReapsOrphans). The exit
// statuses of the supervisors of its jobs stay theirs: see package reaper.
func reapOrphans() (stop func()) {
	if os.Getpid() != 1 {
		return func() {}
	}
	return reaper.Reap()
}
