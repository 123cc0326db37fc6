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

// sweepCgroups removes the empty cgroups under dir that workers which are
// gone left behind: a worker killed before its supervisor read where the
// attempt's cgroup was leaves it. A name ends with the PID of the worker
// that made it; a cgroup that is still in use is never empty, and rmdir(2)
// refuses a cgroup with a process in it.
func sweepCgroups(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), cgroupPrefix) {
			continue
		}
		f := strings.Split(e.Name(), "-")
		if len(f) < 4 {
			continue
		}
		pid, err := strconv.Atoi(f[len(f)-2])
		if err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue // its worker may still use it
		}
		_ = unix.Rmdir(filepath.Join(dir, e.Name()))
	}
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
	fd   int    // open directory, or -1
}

// newCgroup makes a cgroup under dir named for what (a job and attempt),
// the worker's PID and random digits, so that no two processes on one
// machine ever pick the same name.
func newCgroup(dir, what string) (*cgroupDir, error) {
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("%s%s-%d-%s", cgroupPrefix, what, os.Getpid(), hex.EncodeToString(r[:]))
	path := filepath.Join(dir, name)
	if err := os.Mkdir(path, 0o755); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS) {
			return nil, fmt.Errorf("cgroup v2 %s is not writable by this user", dir)
		}
		return nil, fmt.Errorf("cannot make a cgroup in %s: %w", dir, unwrapErrno(err))
	}
	return &cgroupDir{path: path, fd: -1}, nil
}

// openCgroup opens the cgroup at path, a child of this process's own
// cgroup, for starting a process in it.
func openCgroup(path string) (*cgroupDir, error) {
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open cgroup %s: %w", path, unwrapErrno(err))
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
// an exiting process in it.
func (c *cgroupDir) remove() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
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

// NewAttemptCgroup makes the cgroup of one attempt under dir (from
// CgroupDir), and returns its path. The supervisor removes it when the
// attempt is over; RemoveCgroup is for when the supervisor could not.
func NewAttemptCgroup(dir, jobID string, attempt int) (string, error) {
	cg, err := newCgroup(dir, fmt.Sprintf("%s-%d", jobID, attempt))
	if err != nil {
		return "", err
	}
	return cg.path, nil
}

// RemoveCgroup kills whatever runs in the cgroup at path, waits until it
// is empty, and removes it. It does nothing if path does not exist.
func RemoveCgroup(path string) {
	cg := &cgroupDir{path: path, fd: -1}
	if _, err := os.Stat(path); err != nil {
		return
	}
	cg.kill()
	cg.waitEmpty(cg.kill)
	cg.remove()
}
