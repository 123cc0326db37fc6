// Package execjob runs jobs of kind "exec": a program started directly (no
// shell) with its arguments, in a working directory, with its output kept in
// a per-job log file.
//
// A job's payload is a Payload in JSON:
//
//	{"argv": ["make", "test"], "dir": "/home/me/project", "env": ["GOFLAGS=-race"]}
//
// argv[0] is looked up in PATH like os/exec does; dir must be absolute; env
// entries (optional, "KEY=VALUE") are added to the worker's own environment.
// NewSpec builds the jobstore.Spec for one.
//
// Handler is the runner.Handler that executes them. Each attempt runs the
// program with JOBDIR_JOB_ID and JOBDIR_ATTEMPT in its environment, appends
// its standard output and standard error to <LogDir>/<job ID>.log after a
// header line naming the attempt, and ends with a footer line giving the
// exit status. Exit status 0 is success, with the result {"exit_code":0};
// any other status fails the attempt with an *ExitError that carries the
// status and the tail of the output.
//
// # Guarantees
//
// The program runs in a process group of its own. When the job's context
// ends (the job was canceled, timed out, or the worker is shutting down) the
// whole group gets SIGTERM, and SIGKILL if it is still running KillGrace
// later. When the program exits, whatever it left running in its group is
// killed too, so an attempt leaves no processes behind.
//
// On Linux the program is started with Pdeathsig set to SIGKILL from an OS
// thread locked for the attempt, so if the worker process dies (even by
// SIGKILL) the kernel kills the program at once. A job re-run after its
// worker died therefore never overlaps its previous attempt.
//
// The log file is bounded: once it holds MaxLogBytes, further output of the
// program is discarded (it is still read, so the program never blocks on a
// full pipe) and one truncation marker is written instead. Header and footer
// lines are always written, so a file grows past MaxLogBytes only by a few
// hundred bytes per attempt.
//
// # Caveats
//
// Pdeathsig reaches only the program itself, not processes it started that
// escaped its process group (setsid, or a daemon that double-forks); a
// program that wants to survive its worker can. Process groups and
// Pdeathsig are Linux features here: on other systems Handler refuses to
// run programs and fails the attempt permanently.
//
// An exec job is arbitrary command execution as the worker's user. Accept
// such jobs only from people who may run programs on the worker's machine.
package execjob
