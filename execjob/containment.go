package execjob

import (
	"fmt"

	"github.com/jobdir/jobdir/execjob/internal/supervise"
)

// Containment chooses how Handler keeps the processes of an attempt
// together, so that every one of them can be found and killed.
type Containment string

// The containments.
const (
	// ContainAuto, the default, puts each attempt in a cgroup v2 of its
	// own where the worker may make one under its own cgroup, and
	// otherwise relies on the supervisor alone (ContainSupervisor).
	ContainAuto Containment = ""
	// ContainCgroup requires a cgroup per attempt: Containment reports an
	// error, and attempts fail without running, where none can be made.
	ContainCgroup Containment = "cgroup"
	// ContainSupervisor never makes a cgroup: the supervisor, a child
	// subreaper, finds the attempt's processes as its descendants.
	ContainSupervisor Containment = "supervisor"
)

// ParseContainment returns the Containment named s: "auto", "cgroup" or
// "supervisor".
func ParseContainment(s string) (Containment, error) {
	switch s {
	case "auto", "":
		return ContainAuto, nil
	case string(ContainCgroup):
		return ContainCgroup, nil
	case string(ContainSupervisor):
		return ContainSupervisor, nil
	}
	return "", fmt.Errorf("unknown containment %q: want auto, cgroup or supervisor", s)
}

// ContainmentInfo says how a Handler contains attempts on this machine.
type ContainmentInfo struct {
	// Cgroup is the cgroup v2 directory under which each attempt gets a
	// cgroup of its own, or empty if attempts get none.
	Cgroup string
	// Reason says why attempts get no cgroup, when Cgroup is empty.
	Reason string
}

// String describes the containment in a sentence for a person, such as a
// worker's start-up line.
func (c ContainmentInfo) String() string {
	if c.Cgroup != "" {
		return "each job runs in a cgroup v2 of its own under " + c.Cgroup +
			", under a supervisor; when a job ends, is stopped, or its worker dies, everything in its cgroup is killed"
	}
	return "each job runs under a supervisor (no cgroup: " + c.Reason +
		"); when a job ends, is stopped, or its worker dies, its process group and every descendant of the supervisor are killed"
}

// Containment returns how h contains the attempts it runs in this process.
// With ContainCgroup it fails if no cgroup can be made, and says why in
// plain words.
func (h Handler) Containment() (ContainmentInfo, error) {
	if !supported {
		return ContainmentInfo{}, errUnsupported
	}
	if h.Contain == ContainSupervisor {
		return ContainmentInfo{Reason: "containment set to supervisor"}, nil
	}
	dir, err := supervise.CgroupDir()
	if err != nil {
		if h.Contain == ContainCgroup {
			return ContainmentInfo{}, fmt.Errorf("execjob: no cgroup for jobs: %w", err)
		}
		return ContainmentInfo{Reason: err.Error()}, nil
	}
	return ContainmentInfo{Cgroup: dir}, nil
}
