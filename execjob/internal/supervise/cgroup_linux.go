package supervise

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	pathpkg "path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupPrefix starts the name of every cgroup this package makes.
const cgroupPrefix = "jobdir-"

// base is where this process may make a cgroup per attempt.
var base struct {
	dir  string // the directory of this process's own cgroup v2
	err  error  // why there is none
	once sync.Once
}

// CgroupDir returns the directory of this process's cgroup v2, under which
// it makes one cgroup per attempt, or an error saying in plain words why it
// cannot: no cgroup v2 mounted, not writable, no cgroup.kill. The answer is
// found once per process.
func CgroupDir() (string, error) {
	base.once.Do(func() { base.dir, base.err = probeCgroup() })
	return base.dir, base.err
}

func probeCgroup() (string, error) {
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	rel, err := ownCgroup()
	if err != nil {
		return "", err
	}
	sub, ok := strings.CutPrefix(rel, root)
	if !ok {
		return "", fmt.Errorf("this process's cgroup %s is outside the mounted cgroup v2 (%s at %s)", rel, root, mount)
	}
	dir := filepath.Join(mount, sub)
	sweepCgroups(dir)
	// Try it: make a cgroup, check it can be killed as a whole, remove it.
	probe, err := newCgroup(dir, "probe")
	if err != nil {
		return "", err
	}
	defer probe.remove()
	if _, err := os.Stat(filepath.Join(probe.path, "cgroup.kill")); err != nil {
		return "", fmt.Errorf("cgroup v2 at %s has no cgroup.kill (Linux 5.14 or later has it)", dir)
	}
	if err := unix.Access(filepath.Join(dir, "cgroup.procs"), unix.W_OK); err != nil {
		return "", fmt.Errorf("cgroup v2 %s is not delegated to this user (cgroup.procs is not writable)", dir)
	}
	return dir, nil
}

// sweepCgroups removes the cgroups under dir that attempts of workers which
// are gone left behind: a worker killed before its supervisor removed the
// attempt's cgroup (a pod killed as a whole, say) leaves it. A cgroup is
// judged by itself, never by the PID in its name, which in a pod is that of
// every worker (1):
//
//   - a cgroup with a process in it (cgroup.events says populated 1, which
//     counts its descendants too) is in use, or holds what a dead worker
//     left running, and is left alone; rmdir(2) would refuse it anyway;
//   - an empty one may be an attempt's that a live worker has just made and
//     whose program has not entered it yet. Its maker holds a shared
//     flock(2) on the cgroup's directory from the mkdir until it removes
//     the cgroup (newCgroup, RemoveCgroup), and so does the supervisor
//     while it uses it (openCgroup); the sweep removes an empty cgroup
//     only while it holds the exclusive lock, which it cannot take while
//     either lives. A lock dies with its process, so a dead pod's cgroups
//     are free. The maker locks after its mkdir and checks that the
//     cgroup is still there once it holds the lock, so that a sweep in the
//     moment between is seen, and it makes another.
//
// Once the program has entered its cgroup, the cgroup is populated until
// every process of the attempt is gone, and nothing enters it again: a
// sweep then takes nothing a worker still needs.
func sweepCgroups(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !isAttemptCgroup(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil && isEmptyCgroup(path) {
			_ = unix.Rmdir(path)
		}
		_ = unix.Close(fd)
	}
}

// isAttemptCgroup reports whether name is one newCgroup makes:
// jobdir-<what>-<pid>-<hex>.
func isAttemptCgroup(name string) bool {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return false
	}
	f := strings.Split(rest, "-")
	if len(f) < 3 {
		return false
	}
	if _, err := strconv.Atoi(f[len(f)-2]); err != nil {
		return false
	}
	_, err := hex.DecodeString(f[len(f)-1])
	return err == nil && len(f[len(f)-1]) == 2*nameRandom
}

// isEmptyCgroup reports whether the cgroup at path says that no process is
// in it or in any cgroup under it.
func isEmptyCgroup(path string) bool {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.events"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if strings.TrimSpace(line) == "populated 0" {
			return true
		}
	}
	return false
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted, and which
// of its directories the mount shows as its root.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("cannot read /proc/self/mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		return unescapeMount(f[4]), unescapeMount(f[3]), nil
	}
	return "", "", errors.New("no cgroup v2 file system is mounted")
}

// unescapeMount undoes the octal escapes of mountinfo (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupDir is one cgroup of an attempt.
type cgroupDir struct {
	path string
	rel  string // its path in the hierarchy, as /proc/<pid>/cgroup shows it
	fd   int    // open directory holding a shared flock (see sweepCgroups), or -1
}

// nameRandom is how many random bytes a cgroup's name ends with.
const nameRandom = 4

// errSwept says that a cgroup was removed by another process's sweep
// between its mkdir and its lock.
var errSwept = errors.New("cgroup removed by a sweep before it was locked")

// newCgroup makes a cgroup under dir named for what (a job and attempt),
// the worker's PID and random digits, and returns it locked against the
// sweeps of other processes (see sweepCgroups). A name is never shared: it
// is taken by mkdir(2), which fails if another process made it first, as
// one in another PID namespace with the same PID and the same random
// digits might; another name is drawn then.
func newCgroup(dir, what string) (*cgroupDir, error) {
	for try := 1; ; try++ {
		var r [nameRandom]byte
		_, _ = rand.Read(r[:])
		name := fmt.Sprintf("%s%s-%d-%s", cgroupPrefix, what, os.Getpid(), hex.EncodeToString(r[:]))
		path := filepath.Join(dir, name)
		if err := os.Mkdir(path, 0o755); err != nil {
			switch {
			case errors.Is(err, os.ErrExist) && try < 5:
				continue
			case errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS):
				return nil, fmt.Errorf("cgroup v2 %s is not writable by this user", dir)
			}
			return nil, fmt.Errorf("cannot make a cgroup in %s: %w", dir, unwrapErrno(err))
		}
		fd, err := lockCgroup(path)
		if errors.Is(err, errSwept) && try < 5 {
			continue
		}
		if err != nil {
			_ = unix.Rmdir(path)
			return nil, err
		}
		return &cgroupDir{path: path, fd: fd}, nil
	}
}

// lockCgroup opens the cgroup directory at path and takes a shared flock on
// it, which keeps other processes' sweeps off it until the descriptor is
// closed. It fails with errSwept if the cgroup was removed before the lock
// was taken.
func lockCgroup(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, errSwept
	}
	if err != nil {
		return -1, fmt.Errorf("cannot open cgroup %s: %w", path, unwrapErrno(err))
	}
	for {
		err = unix.Flock(fd, unix.LOCK_SH)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("cannot lock cgroup %s: %w", path, unwrapErrno(err))
	}
	// A sweep removes a cgroup only while it holds the exclusive lock:
	// with the shared one held, the cgroup either is still the one made,
	// or is gone for good.
	var held, now unix.Stat_t
	if unix.Fstat(fd, &held) != nil || unix.Stat(path, &now) != nil || held.Ino != now.Ino || held.Dev != now.Dev {
		_ = unix.Close(fd)
		return -1, errSwept
	}
	return fd, nil
}

// openCgroup opens the cgroup at path, a child of this process's own
// cgroup, for starting a process in it, and locks it against sweeps until
// it is removed.
func openCgroup(path string) (*cgroupDir, error) {
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	fd, err := lockCgroup(path)
	if err != nil {
		return nil, err
	}
	return &cgroupDir{path: path, rel: pathpkg.Join(own, filepath.Base(path)), fd: fd}, nil
}

// ownCgroup returns this process's cgroup v2, as /proc/self/cgroup says.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("cannot read /proc/self/cgroup: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok && p != "" {
			return p, nil
		}
	}
	return "", errors.New("this process is in no cgroup v2")
}

// procs returns the processes in the cgroup.
func (c *cgroupDir) procs() []int {
	b, err := os.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for f := range bytes.FieldsSeq(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kill SIGKILLs every process in the cgroup and its descendants, including
// those forking meanwhile.
func (c *cgroupDir) kill() {
	_ = os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0)
}

// populated reports whether a live process remains in the cgroup.
func (c *cgroupDir) populated() bool {
	b, err := os.ReadFile(filepath.Join(c.path, "cgroup.events"))
	if err != nil {
		return false // gone
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// waitEmpty waits until no process is left in the cgroup, calling again
// (to kill what remains) every killTick. The kernel reports a change of
// cgroup.events to inotify, which wakes the wait at once.
func (c *cgroupDir) waitEmpty(again func()) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err == nil {
		defer unix.Close(fd)
		if _, err := unix.InotifyAddWatch(fd, filepath.Join(c.path, "cgroup.events"), unix.IN_MODIFY); err != nil {
			unix.Close(fd)
			fd = -1
		}
	} else {
		fd = -1
	}
	for c.populated() {
		again()
		if fd < 0 {
			time.Sleep(killTick)
			continue
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, int(killTick/time.Millisecond)); n > 0 {
			var buf [4096]byte
			_, _ = unix.Read(fd, buf[:])
		}
	}
}

// remove removes the empty cgroup, retrying while the kernel still counts
// an exiting process in it, and then drops its lock.
func (c *cgroupDir) remove() {
	defer c.unlock()
	for range 200 {
		err := unix.Rmdir(c.path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if !errors.Is(err, unix.EBUSY) {
			return
		}
		c.kill()
		time.Sleep(killTick)
	}
}

// unlock closes the cgroup's directory, which drops its lock.
func (c *cgroupDir) unlock() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
}

// made holds the cgroups NewAttemptCgroup made and RemoveCgroup has not
// removed yet, by path, each holding its lock.
var made struct {
	sync.Mutex
	m map[string]*cgroupDir
}

// NewAttemptCgroup makes the cgroup of one attempt under dir (from
// CgroupDir), and returns its path. The supervisor removes it when the
// attempt is over; RemoveCgroup is for when the supervisor could not, and
// must be called in the end: until then, this process keeps other
// processes' sweeps off the cgroup while it is empty.
func NewAttemptCgroup(dir, jobID string, attempt int) (string, error) {
	cg, err := newCgroup(dir, fmt.Sprintf("%s-%d", jobID, attempt))
	if err != nil {
		return "", err
	}
	made.Lock()
	if made.m == nil {
		made.m = map[string]*cgroupDir{}
	}
	made.m[cg.path] = cg
	made.Unlock()
	return cg.path, nil
}

// RemoveCgroup kills whatever runs in the cgroup at path, waits until it
// is empty, and removes it. It does nothing if path does not exist, but
// drops the lock NewAttemptCgroup took on it.
func RemoveCgroup(path string) {
	made.Lock()
	cg := made.m[path]
	delete(made.m, path)
	made.Unlock()
	if cg == nil {
		cg = &cgroupDir{path: path, fd: -1}
	}
	defer cg.unlock()
	if _, err := os.Stat(path); err != nil {
		return
	}
	cg.kill()
	cg.waitEmpty(cg.kill)
	cg.remove()
}
