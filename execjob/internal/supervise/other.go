//go:build !linux

package supervise

import (
	"errors"
	"io"
	"os"
	"runtime"
	"time"
)

// Supported reports whether programs can be supervised here.
const Supported = false

// Spec says what to run and how.
type Spec struct {
	Argv      []string
	Dir       string
	Env       []string
	KillGrace time.Duration
	Cgroup    string
	Lease     *os.File
	Output    io.Writer
	Name      string
}

// Attempt is a supervised program.
type Attempt struct{}

var errUnsupported = errors.New("supervising programs needs Linux, not " + runtime.GOOS)

// Start fails: supervising needs Linux.
func Start(Spec) (*Attempt, error) { return nil, errUnsupported }

// Pid returns 0.
func (*Attempt) Pid() int { return 0 }

// Stop does nothing.
func (*Attempt) Stop() {}

// Kill does nothing.
func (*Attempt) Kill() {}

// Wait fails.
func (*Attempt) Wait() (Exit, error) { return Exit{}, errUnsupported }

// Containment returns nothing.
func (*Attempt) Containment() (string, string) { return "", "" }

// CgroupDir fails: cgroups are Linux's.
func CgroupDir() (string, error) { return "", errUnsupported }

// NewAttemptCgroup fails.
func NewAttemptCgroup(string, string, int) (string, error) { return "", errUnsupported }

// RemoveCgroup does nothing.
func RemoveCgroup(string) {}
