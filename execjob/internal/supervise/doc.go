// Package supervise runs one attempt of an exec job under a supervisor: a
// copy of the running binary, re-executed (through /proc/self/exe) in a mode
// that an init function of this package enters when the environment says so,
// before main or any test runs. So every program that imports execjob,
// jobdir or a library user's worker, can supervise its jobs, without a
// separate binary.
//
// The supervisor stands between the worker and the program. It makes itself
// a child subreaper (PR_SET_CHILD_SUBREAPER), so that every process the
// program starts, including those that call setsid or double-fork, stays its
// descendant; starts the program in a process group of its own, and, where
// the worker gave it one, in a cgroup v2 of its own; and holds the attempt's
// lease (a descriptor the worker passed) while it runs. When the program
// exits, when the worker asks it to stop, or when the worker is gone (its
// control pipe reaches end of file, or the parent-death signal arrives), it
// kills the program's group, every descendant it can find in /proc, and the
// whole cgroup, reaps them all, and only then reports the program's exit
// status and exits, releasing the lease. Other workers can run the job again
// only after that.
//
// The protocol between the two is private to this package: Start on the
// worker's side, the init function on the supervisor's.
package supervise
