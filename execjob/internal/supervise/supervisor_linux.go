package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// init runs the supervisor, and exits, when this process was started as
// one. It checks that descriptor fdControl is a pipe too, so that a stray
// variable in a person's environment cannot turn a program into a
// supervisor: it is then removed and ignored.
func init() {
	if os.Getenv(envSupervise) == "" {
		return
	}
	var st unix.Stat_t
	if os.Getenv(envSupervise) != protocolVersion || unix.Fstat(fdControl, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		_ = os.Unsetenv(envSupervise)
		return
	}
	os.Exit(supervise())
}

// killTick is how often the supervisor repeats SIGKILL to every process of
// the attempt while some remain: a process can fork between the search
// and the kill.
const killTick = 10 * time.Millisecond

// supervisor is the state of the supervisor process.
type supervisor struct {
	cfg    config
	status *os.File
	self   int
	pid    int  // the program
	pgid   bool // the program's group may be signalled: the program is not reaped yet
	cgroup *cgroupDir
	// killed holds the processes SIGKILLed after the program ended.
	killed map[int]bool
}

func supervise() int {
	// The descriptors of the protocol, and the lease, must not reach the
	// program. The lease is never wrapped in an *os.File, whose finalizer
	// could close it: it stays open until this process exits.
	for _, fd := range []int{fdControl, fdStatus, fdLease} {
		unix.CloseOnExec(fd)
	}
	s := &supervisor{status: os.NewFile(fdStatus, "status"), self: os.Getpid(), killed: map[int]bool{}}
	ctrl := bufio.NewReader(os.NewFile(fdControl, "control"))
	line, err := ctrl.ReadBytes('\n')
	if err != nil {
		// The worker died before it sent the config: nothing ran, but
		// the attempt's cgroup may have been made.
		if cg := os.Getenv(envCgroup); cg != "" {
			RemoveCgroup(cg)
		}
		return 2
	}
	if err := json.Unmarshal(line, &s.cfg); err != nil {
		s.send(event{Event: evStartFailed, Failure: FailureOther, Message: "supervisor: bad config: " + err.Error()})
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		s.send(event{Event: evStartFailed, Failure: FailureOther, Message: "supervisor: cannot become a subreaper: " + err.Error()})
		return 2
	}
	// SIGUSR1 is the parent-death signal the worker sets: it means the
	// worker died. (A parent-death signal comes when the thread that
	// started this process exits, possibly before the rest of the worker,
	// so getppid cannot tell.) SIGTERM, SIGINT and SIGHUP, from a person,
	// stop the program gracefully.
	dead := make(chan os.Signal, 1)
	signal.Notify(dead, syscall.SIGUSR1)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if os.Getppid() != s.cfg.Worker {
		// The worker died before the program started.
		if s.cfg.Cgroup != "" {
			RemoveCgroup(s.cfg.Cgroup)
		}
		return 2
	}
	cmds := make(chan byte, 8)
	go func() {
		for {
			b, err := ctrl.ReadByte()
			if err != nil {
				cmds <- cmdKill // the worker is gone
				return
			}
			cmds <- b
		}
	}()

	started, err := s.start()
	if err != nil {
		var se *StartError
		if !errors.As(err, &se) {
			se = &StartError{Failure: FailureOther, Message: err.Error()}
		}
		s.send(event{Event: evStartFailed, Failure: se.Failure, Message: se.Message})
		s.removeCgroup()
		return 1
	}
	s.send(started)

	code, sig, leftovers := s.loop(cmds, dead, sigs)
	s.removeCgroup()
	s.send(event{Event: evExited, Code: code, Signal: sig, Leftovers: leftovers})
	return 0
}

// send writes ev on the status pipe. A worker that is gone cannot read it,
// which changes nothing.
func (s *supervisor) send(ev event) {
	b, _ := json.Marshal(ev)
	_, _ = s.status.Write(append(b, '\n'))
}

// start starts the program and returns the started event.
func (s *supervisor) start() (event, error) {
	path, err := resolve(s.cfg.Argv[0], s.cfg.Dir, s.cfg.Env)
	if err != nil {
		return event{}, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return event{}, err
	}
	defer devnull.Close()
	attr := &os.ProcAttr{
		Dir:   s.cfg.Dir,
		Env:   s.cfg.Env,
		Files: []*os.File{devnull, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{
			Setpgid: true,
			// The main goroutine stays on the main thread during init,
			// which lives as long as this process.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	ev := event{Event: evStarted, Containment: ModeSubreaper}
	if s.cfg.Cgroup != "" {
		cg, err := openCgroup(s.cfg.Cgroup)
		if err != nil {
			ev.Note = "no cgroup for this attempt: " + err.Error()
		} else {
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cg.fd
			s.cgroup = cg
		}
	}
	p, err := os.StartProcess(path, s.cfg.Argv, attr)
	if err != nil && s.cgroup != nil && isCgroupRefusal(err) {
		// The cgroup could be made but not entered (not delegated to
		// us, or clone3 missing): the supervisor alone still contains
		// the program.
		ev.Note = "no cgroup for this attempt: cannot start a process in " + s.cfg.Cgroup + ": " + unwrapErrno(err).Error()
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = false, 0
		s.removeCgroup()
		p, err = os.StartProcess(path, s.cfg.Argv, attr)
	}
	if err != nil {
		return event{}, execFailure(path, s.cfg.Argv[0], err)
	}
	if s.cgroup != nil {
		ev.Containment = ModeCgroup
	}
	s.pid, s.pgid = p.Pid, true
	ev.Pid = p.Pid
	// Reaping is done by wait4 on any child, not by p.Wait.
	_ = p.Release()
	return ev, nil
}

// reaped is a child the reaper collected, or none: no child is left.
type reaped struct {
	pid    int
	status unix.WaitStatus
	none   bool
}

// reap reaps every child, the program and the orphans given to this
// subreaper, until none is left.
func reap(out chan<- reaped) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			// ECHILD: with this process a subreaper, no child means no
			// descendant at all.
			out <- reaped{none: true}
			return
		}
		out <- reaped{pid: pid, status: ws}
	}
}

// loop runs until the program and every other process of the attempt are
// gone and reaped, and returns the program's exit code, the name of the
// signal that killed it, and how many leftovers were killed after it
// exited.
func (s *supervisor) loop(cmds <-chan byte, dead, sigs <-chan os.Signal) (code int, sig string, leftovers int) {
	children := make(chan reaped, 64)
	go reap(children)
	var (
		progDone bool
		stopping bool
		killing  bool
		allGone  bool
		grace    <-chan time.Time
		tick     <-chan time.Time // set while a repeated SIGKILL is due
		rounds   int              // of SIGKILL
	)
	stop := func() {
		if stopping || killing {
			return
		}
		stopping = true
		s.signalAll(unix.SIGTERM, true)
		grace = time.After(s.cfg.KillGrace)
	}
	reaped := func(r reaped) {
		switch {
		case r.none:
			allGone = true
		case r.pid == s.pid:
			progDone, s.pgid = true, false
			code = r.status.ExitStatus()
			if r.status.Signaled() {
				code, sig = -1, unix.SignalName(r.status.Signal())
			}
			// Whatever the program left running dies with it, at
			// once; unless it is being stopped, when the others have
			// the rest of the grace to finish.
			if !stopping {
				killing = true
			}
		}
	}
	for {
		select {
		case r := <-children:
			reaped(r)
		case c := <-cmds:
			switch c {
			case cmdStop:
				stop()
			case cmdKill:
				killing = true
			}
		case <-dead:
			killing = true
		case <-sigs:
			stop()
		case <-grace:
			killing = true
		case <-tick:
			tick = nil
		}
		for drained := false; !drained; {
			select {
			case r := <-children:
				reaped(r)
			default:
				drained = true
			}
		}
		if allGone {
			if s.cgroup != nil {
				s.cgroup.waitEmpty(s.cgroup.kill)
			}
			return code, sig, len(s.killed)
		}
		if killing && tick == nil {
			// Again every killTick until no child is left: a process
			// may fork between the search and the kill. With a
			// cgroup, whose kill takes forks along, the first round
			// skips the search in /proc (milliseconds of CPU), which
			// only finds a process that left the cgroup.
			for _, pid := range s.signalAll(unix.SIGKILL, s.cgroup == nil || rounds > 0) {
				if progDone {
					s.killed[pid] = true
				}
			}
			rounds++
			tick = time.After(killTick)
		}
	}
}

// signalAll sends sig to every process of the attempt: the program's
// group, the cgroup, and if search, every descendant of the supervisor
// found in /proc. It returns the processes it signalled by PID.
func (s *supervisor) signalAll(sig unix.Signal, search bool) []int {
	if s.pgid {
		_ = unix.Kill(-s.pid, sig)
	}
	var hit []int
	if s.cgroup != nil {
		if sig == unix.SIGKILL {
			hit = append(hit, s.cgroup.procs()...)
			s.cgroup.kill()
		} else {
			for _, pid := range s.cgroup.procs() {
				if signalInCgroup(pid, s.cgroup.rel, sig) {
					hit = append(hit, pid)
				}
			}
		}
	}
	if !search {
		return hit
	}
	for _, pid := range descendants(s.self) {
		if signalDescendant(s.self, pid, sig) {
			hit = append(hit, pid)
		}
	}
	return hit
}

// removeCgroup removes the attempt's cgroup, which must be empty.
func (s *supervisor) removeCgroup() {
	if s.cgroup != nil {
		s.cgroup.remove()
		s.cgroup = nil
	}
}

// resolve finds the program argv0 as os/exec would from dir with the
// program's environment env, and explains in plain words why it cannot be
// run if so.
func resolve(argv0, dir string, env []string) (string, error) {
	if fi, err := os.Stat(dir); err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist):
			return "", &StartError{FailureDir, fmt.Sprintf("directory %s does not exist", dir)}
		case errors.Is(err, os.ErrPermission):
			return "", &StartError{FailureDir, fmt.Sprintf("directory %s cannot be reached: permission denied", dir)}
		}
		return "", &StartError{FailureDir, fmt.Sprintf("directory %s: %v", dir, unwrapErrno(err))}
	} else if !fi.IsDir() {
		return "", &StartError{FailureDir, fmt.Sprintf("%s is not a directory", dir)}
	}
	if strings.Contains(argv0, "/") {
		path := argv0
		if !strings.HasPrefix(path, "/") {
			path = dir + "/" + path
		}
		return path, checkProgram(path, argv0)
	}
	pathEnv := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	var denied string
	for _, d := range strings.Split(pathEnv, ":") {
		if !strings.HasPrefix(d, "/") {
			continue // relative entries are not searched, as os/exec refuses them
		}
		p := d + "/" + argv0
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if unix.Access(p, unix.X_OK) != nil {
			if denied == "" {
				denied = p
			}
			continue
		}
		return p, nil
	}
	if denied != "" {
		return "", &StartError{FailurePermission, fmt.Sprintf("program %s is not executable", denied)}
	}
	return "", &StartError{FailureNotFound, fmt.Sprintf("program %q not found in PATH (%s)", argv0, pathEnv)}
}

// checkProgram explains why the program at path (argv0 as given) cannot be
// run, if it cannot.
func checkProgram(path, argv0 string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &StartError{FailureNotFound, fmt.Sprintf("program %s does not exist", argv0)}
	case err != nil:
		return &StartError{FailurePermission, fmt.Sprintf("program %s: %v", argv0, unwrapErrno(err))}
	case fi.IsDir():
		return &StartError{FailureNotFound, fmt.Sprintf("%s is a directory, not a program", argv0)}
	case unix.Access(path, unix.X_OK) != nil:
		return &StartError{FailurePermission, fmt.Sprintf("program %s is not executable", argv0)}
	}
	return nil
}

// execFailure explains a failed start of the program at path.
func execFailure(path, argv0 string, err error) error {
	errno := unwrapErrno(err)
	switch errno {
	case unix.ENOEXEC:
		return &StartError{FailureExec, fmt.Sprintf("program %s cannot be run: it is not a binary this system runs, nor a script with a #! line", argv0)}
	case unix.ENOENT:
		return &StartError{FailureExec, fmt.Sprintf("program %s cannot be run: the interpreter on its #! line, or a library it needs, does not exist", argv0)}
	case unix.EACCES, unix.EPERM:
		return &StartError{FailurePermission, fmt.Sprintf("program %s may not be run: permission denied", argv0)}
	case unix.E2BIG:
		return &StartError{FailureExec, fmt.Sprintf("program %s cannot be run: its arguments and environment are too large", argv0)}
	case unix.ETXTBSY:
		return &StartError{FailureOther, fmt.Sprintf("program %s cannot be run: it is being written", argv0)}
	}
	return &StartError{FailureOther, fmt.Sprintf("cannot start %s: %v", path, errno)}
}

// unwrapErrno returns the errno under err, or err.
func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// isCgroupRefusal reports whether a start failed because of the cgroup.
func isCgroupRefusal(err error) bool {
	switch unwrapErrno(err) {
	case unix.EACCES, unix.EPERM, unix.ENOSYS, unix.EBUSY, unix.EOPNOTSUPP, unix.EINVAL, unix.ENOENT:
		return true
	}
	return false
}
