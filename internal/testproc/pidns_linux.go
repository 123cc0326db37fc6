package testproc

import (
	"fmt"
	"os"
	"syscall"
)

// usePIDNamespace makes the child that attr starts PID 1 of a new PID
// namespace, in a new mount namespace whose mounts do not propagate back
// (the runtime marks / private, as unshare(1) does); the child mounts its
// own /proc at Main (enterPIDNamespace).
func usePIDNamespace(attr *syscall.SysProcAttr) error {
	attr.Cloneflags |= syscall.CLONE_NEWPID
	attr.Unshareflags |= syscall.CLONE_NEWNS
	return nil
}

// enterPIDNamespace finishes, in the child, what usePIDNamespace began: it
// mounts a /proc that shows the child's PID namespace, then takes on the
// credentials the parent passed in envCred, which the mount had to come
// before. It does so only in the namespace's first process, and removes
// both variables so that the processes the child starts inherit neither.
func enterPIDNamespace() error {
	cred := os.Getenv(envCred)
	_ = os.Unsetenv(envPIDNS)
	_ = os.Unsetenv(envCred)
	if os.Getpid() != 1 {
		return nil
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc in the PID namespace: %w", err)
	}
	if cred == "" {
		return nil
	}
	c, err := parseCred(cred)
	if err != nil {
		return err
	}
	// Groups, then group, then user: the user change gives up the right
	// to make the others.
	groups := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("set supplementary groups: %w", err)
	}
	if err := syscall.Setgid(int(c.Gid)); err != nil {
		return fmt.Errorf("set group %d: %w", c.Gid, err)
	}
	if err := syscall.Setuid(int(c.Uid)); err != nil {
		return fmt.Errorf("set user %d: %w", c.Uid, err)
	}
	return nil
}
