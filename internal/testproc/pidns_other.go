//go:build !linux

package testproc

import (
	"errors"
	"syscall"
)

var errNoPIDNamespaces = errors.New("PID namespaces are Linux's")

func usePIDNamespace(*syscall.SysProcAttr) error { return errNoPIDNamespaces }

func enterPIDNamespace() error { return errNoPIDNamespaces }
