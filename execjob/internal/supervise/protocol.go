package supervise

import (
	"fmt"
	"time"
)

// envSupervise is the variable that makes the init function of this package
// run the supervisor instead of the program. Its value is protocolVersion.
// The program never sees it: the worker builds the program's environment
// from scratch.
const envSupervise = "JOBDIR_EXECJOB_SUPERVISE"

// envCgroup holds, in the supervisor's environment, the attempt's cgroup
// (as the config does), so that a supervisor whose worker died before it
// sent the config removes the cgroup all the same.
const envCgroup = "JOBDIR_EXECJOB_CGROUP"

// protocolVersion changes with any change to the protocol.
const protocolVersion = "1"

// EnvPrefix is the prefix of the variables this package uses; a worker
// must not pass any of them to a program.
const EnvPrefix = "JOBDIR_EXECJOB_"

// The descriptors the supervisor inherits, after stdin, stdout and stderr.
const (
	fdControl = 3 // read end of the control pipe: the config, then commands
	fdStatus  = 4 // write end of the status pipe: events
	fdLease   = 5 // the attempt's lease, if config.Lease
)

// Commands on the control pipe, one byte each, after the config line. End
// of file means the worker is gone, and acts as cmdKill.
const (
	cmdStop = 'T' // stop gracefully: SIGTERM to every process, SIGKILL after the grace
	cmdKill = 'K' // SIGKILL to every process now
)

// config is the first line on the control pipe, in JSON.
type config struct {
	Argv      []string      `json:"argv"`
	Dir       string        `json:"dir"`
	Env       []string      `json:"env"`
	KillGrace time.Duration `json:"kill_grace"`
	// Worker is the worker's process ID: a supervisor whose parent is not
	// it any more knows the worker died.
	Worker int `json:"worker"`
	// Cgroup is the directory of the cgroup v2 to start the program in;
	// empty for none.
	Cgroup string `json:"cgroup,omitempty"`
	// Lease says descriptor fdLease is the attempt's lease.
	Lease bool `json:"lease,omitempty"`
}

// Events on the status pipe, one JSON object a line.
const (
	evStarted     = "started"
	evStartFailed = "start_failed"
	evExited      = "exited"
)

type event struct {
	Event string `json:"event"`
	// Started: the program's process ID, and how it is contained.
	Pid         int    `json:"pid,omitempty"`
	Containment string `json:"containment,omitempty"`
	Note        string `json:"note,omitempty"`
	// Start failed: why, as a kind (the Failure constants) and a message.
	Failure string `json:"failure,omitempty"`
	Message string `json:"message,omitempty"`
	// Exited: the program's exit code (-1 if a signal killed it) and the
	// signal's name, and how many other processes of the attempt were
	// still running when it ended and had to be killed.
	Code      int    `json:"code"`
	Signal    string `json:"signal,omitempty"`
	Leftovers int    `json:"leftovers,omitempty"`
}

// Failure kinds of a program that could not be started.
const (
	FailureDir        = "dir"        // its directory is missing, not a directory, or not usable
	FailureNotFound   = "not_found"  // the program does not exist
	FailurePermission = "permission" // the program may not be run
	FailureExec       = "exec"       // the kernel refused to run it (format, interpreter)
	FailureOther      = "other"      // anything else, possibly transient
)

// StartError is a program that could not be started. Message says why in
// plain words.
type StartError struct {
	// Failure is one of the Failure constants.
	Failure string
	// Message says what is wrong, such as "directory /x does not exist".
	Message string
}

func (e *StartError) Error() string { return e.Message }

// Containment modes, as Exit.Containment reports them.
const (
	// ModeCgroup: the attempt runs in a cgroup v2 of its own, killed as a
	// whole with cgroup.kill, besides the supervisor's own search.
	ModeCgroup = "cgroup"
	// ModeSubreaper: the supervisor alone finds the attempt's processes,
	// as its descendants.
	ModeSubreaper = "subreaper"
)

// Exit is how a supervised program ended.
type Exit struct {
	// Code is the exit status, or -1 if a signal killed the program.
	Code int
	// Signal names the signal that killed it, if one did.
	Signal string
	// Leftovers counts the other processes of the attempt that were still
	// running when the program ended, and were killed.
	Leftovers int
	// Containment is ModeCgroup or ModeSubreaper; Note says why a cgroup
	// was wanted but not used, if so.
	Containment, Note string
}

// String describes how the program ended, such as "exited with status 3".
func (e Exit) String() string {
	if e.Signal != "" {
		return "was killed by signal " + e.Signal
	}
	return fmt.Sprintf("exited with status %d", e.Code)
}
