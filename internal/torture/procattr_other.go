//go:build !linux

package torture

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
