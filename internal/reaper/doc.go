// Package reaper reaps the orphans the kernel hands to a process that is
// PID 1 of its PID namespace, as jobdir work and jobdir serve are in a
// container, without taking the exit status of a child the process started
// itself and waits for.
//
// An orphan is a process whose parent exited: a command of a session that a
// person entered into the container (kubectl exec) left running in the
// background, say. The kernel makes it a child of the namespace's PID 1,
// which must wait for it when it exits, or it stays a zombie, holding its
// PID, for as long as the container lives.
//
// A reaper that waits for any child (wait4(-1)) would steal the exit status
// of the process's own children, which os/exec waits for by their PID or
// pidfd: the supervisors of exec jobs, whose statuses say how each attempt
// ended. So a round of reaping never waits blindly. It peeks with
// waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT), which names the next child that
// has exited without reaping it, and reaps that one by its PID only if this
// process did not start it through StartChild; a child that StartChild
// started is left to its own waiter, and the round ends there, until
// ChildDone says that it was waited for, which starts another round. A fork
// and its registration happen under a lock that a round holds, so that a
// child which exits at once is never taken for an orphan. Rounds run on
// every SIGCHLD, on ChildDone, and every few seconds besides.
//
// A child this process starts by any other means than StartChild may have
// its status taken while Reap runs; in jobdir, StartChild starts every
// child the commands that reap start.
package reaper
