//go:build !linux

package reaper

import "os/exec"

// StartChild starts cmd as cmd.Start does.
func StartChild(cmd *exec.Cmd) error { return cmd.Start() }

// ChildDone does nothing here.
func ChildDone(int) {}

// Reap does nothing here: only Linux hands orphans to a reaper this
// package serves.
func Reap() (stop func()) { return func() {} }
