//go:build !linux

package execjob

import (
	"errors"
	"os"
	"syscall"
)

const supported = false

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(int, syscall.Signal) error { return errors.ErrUnsupported }

func waitExited(int) error { return errors.ErrUnsupported }

func exitStatus(ps *os.ProcessState) (int, string) { return ps.ExitCode(), "" }
