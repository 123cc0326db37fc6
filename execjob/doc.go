// Package execjob runs jobs of kind "exec": a program started directly (no
// shell) with its arguments, in a working directory, with its output kept in
// a per-job log file.
//
// A job's payload is a Payload in JSON:
//
//	{"argv": ["make", "test"], "dir": "/home/me/project", "env": ["GOFLAGS=-race"]}
//
// argv[0] is looked up in the PATH of the program's environment like os/exec
// does, or taken relative to dir if it holds a slash; dir must be absolute;
// env entries (optional, "KEY=VALUE") are added to the program's environment.
// NewSpec builds the jobstore.Spec for one.
//
// Handler is the runner.Handler that executes them. Each attempt runs the
// program with JOBDIR_JOB_ID and JOBDIR_ATTEMPT in its environment, appends
// its standard output and standard error to <LogDir>/<job ID>.log (or to
// Handler.Logs, such as a store's in PostgreSQL) after a header line naming
// the attempt, and ends with a footer line giving the
// exit status (the format is package joblog's). Exit status 0 is success,
// with the result {"exit_code":0}; any other status fails the attempt with an
// *ExitError that carries the status and the tail of the output. A program
// that cannot be started fails its job at once with a *StartError that says
// why in plain words ("directory /x does not exist").
//
// # Environment
//
// A program gets the worker's environment except what the worker keeps to
// itself: every variable whose name starts with JOBDIR_ (JOBDIR_TOKEN and any
// other setting or secret of jobdir's) except JOBDIR_DIR, and systemd's
// NOTIFY_SOCKET, LISTEN_* and WATCHDOG_*. With Handler.CleanEnv it gets only
// CleanEnvVars (PATH, HOME, LANG, TZ, USER) of the worker's. Then the
// payload's env, which overrides those; then, when the attempt is traced
// (its ctx holds a span, as with otelrunner's middleware), TRACEPARENT and
// TRACESTATE, its W3C trace context, so that the program's spans are the
// attempt's children; then JOBDIR_JOB_ID and JOBDIR_ATTEMPT, which nothing
// overrides.
//
// # Guarantees
//
// Every attempt runs under a supervisor: a copy of the worker's own binary
// (re-executed through /proc/self/exe; see the internal package supervise),
// which makes itself a child subreaper, so that every process the program
// starts stays its descendant, even one that calls setsid or a daemon that
// double-forks; starts the program in a process group of its own; and, where
// the worker may make one (Handler.Containment says), in a cgroup v2 of its
// own under the worker's cgroup. Then:
//
//   - When the program exits, every process it left running is killed with
//     SIGKILL at once; the log's footer says how many there were.
//   - When the job's context ends (the job was canceled, timed out, or the
//     worker is shutting down), every process of the attempt gets SIGTERM,
//     and those still running KillGrace later get SIGKILL.
//   - When the worker dies, by any means, SIGKILL included, the supervisor
//     learns it (its control pipe from the worker reaches end of file, and a
//     parent-death signal arrives) and kills every process of the attempt
//     with SIGKILL at once.
//
// "Every process" is the program's process group, every descendant of the
// supervisor found in /proc, and, with a cgroup, everything in the cgroup
// (cgroup.kill). The supervisor reaps them all and only then exits. It holds
// a copy of the attempt's lease (runner.LeaseFile) until it exits, so with a
// store that can share its lease (filestore can) no other worker starts the
// job again while any process of this attempt still runs. Work returns only
// once the supervisor has exited.
//
// The log file is bounded: once an attempt's output would take it past
// MaxLogBytes, the attempt keeps the beginning of its output and the end (at
// least TailBytes of it, written when the attempt ends) with a marker
// between them that says how many bytes were dropped. Header and footer
// lines are always written. The log is opened without following a symbolic
// link, and anything at its path but a regular file with one link is
// refused: the attempt fails and the job's output never lands in another
// file.
//
// # Caveats
//
// Containment holds for processes that stay descendants of the supervisor
// or, with a cgroup, inside it. A program can still have work done outside
// its attempt through another service (systemd-run, at, ssh to localhost, a
// container runtime), and, without a cgroup, a process that is moved out of
// the supervisor's subtree by something else is not found. A process running
// as root can leave its cgroup. If the supervisor itself is killed with
// SIGKILL (jobdir never does), the worker, if alive, kills what is in the
// cgroup, or without one only the program's process group.
//
// Supervision needs Linux: elsewhere Handler refuses to run programs and
// fails the attempt permanently. The kernel must have cgroup.kill (Linux
// 5.14) for a cgroup to be used; without it, the supervisor alone contains
// the attempt.
//
// An exec job is arbitrary command execution as the worker's user. Accept
// such jobs only from people who may run programs on the worker's machine.
package execjob
