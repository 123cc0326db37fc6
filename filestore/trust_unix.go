//go:build unix

package filestore

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/jobdir/jobdir/jobstore"
)

// layoutDirs are the directories Open creates in a store: they must be
// real directories.
var layoutDirs = []string{dirTmp, dirQueued, dirClaimed, dirDone, dirKeys, dirLocks}

// trustee is the user whose trust is checked: this process's effective
// user and groups.
type trustee struct {
	uid, gid    int
	groups      []int
	groupAccess bool
	// name returns the user's name, or "" if unknown: looked up only when
	// needed, as a lookup may ask a directory service.
	name func() string
}

func currentTrustee(groupAccess bool) trustee {
	t := trustee{uid: os.Geteuid(), gid: os.Getegid(), groupAccess: groupAccess}
	t.groups, _ = os.Getgroups()
	t.groups = append(t.groups, t.gid)
	t.name = sync.OnceValue(func() string {
		if u, err := user.LookupId(strconv.Itoa(t.uid)); err == nil {
			return u.Username
		}
		return ""
	})
	return t
}

// checkTrustedDirs checks dir, the directories in it and those above it
// (see Store.CheckTrust) and returns the first problem as an
// *UntrustedError, or an error if a directory cannot be examined.
func checkTrustedDirs(dir string, groupAccess bool) error {
	t := currentTrustee(groupAccess)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("%w: cannot resolve %s: %w", jobstore.ErrUntrusted, dir, err)
	}
	// The directories above the store as named and as resolved: a
	// symbolic link on the way is as safe as the directory holding it.
	var above []string
	for _, p := range []string{filepath.Dir(dir), filepath.Dir(real)} {
		for {
			if !slices.Contains(above, p) {
				above = append(above, p)
			}
			parent := filepath.Dir(p)
			if parent == p {
				break
			}
			p = parent
		}
	}
	slices.SortFunc(above, func(a, b string) int { return len(a) - len(b) }) // from / down
	for _, p := range above {
		if err := t.check(p, true); err != nil {
			return err
		}
	}
	if err := t.check(real, false); err != nil {
		return err
	}
	ents, err := os.ReadDir(real)
	if err != nil {
		return fmt.Errorf("%w: cannot list %s: %w", jobstore.ErrUntrusted, real, err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 || slices.Contains(layoutDirs, e.Name()) {
			if err := t.check(filepath.Join(real, e.Name()), false); err != nil {
				return err
			}
		}
	}
	return nil
}

// check returns an *UntrustedError if directory p is not safe for t. above
// says p is above the store, where the sticky bit makes a directory that
// others can write safe.
func (t trustee) check(p string, above bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("%w: cannot examine it: %w", jobstore.ErrUntrusted, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode()
	if above && mode&fs.ModeSymlink != 0 {
		// A link's own owner and mode mean nothing: it is as safe as the
		// directory holding it, and its target is checked as resolved.
		return nil
	}
	bad := func(reason string) *UntrustedError {
		return &UntrustedError{Path: p, Owner: userName(int(st.Uid)), Group: groupName(int(st.Gid)), Mode: mode, Reason: reason}
	}
	switch {
	case mode&fs.ModeSymlink != 0 && !above:
		return bad("a store must hold no symbolic links, which could lead its writes elsewhere")
	case !mode.IsDir() && !above:
		return bad("not a directory")
	case int(st.Uid) != t.uid && st.Uid != 0 && !t.groupMember(int(st.Uid), int(st.Gid)):
		you := strconv.Itoa(t.uid)
		if name := t.name(); name != "" {
			you = name
		}
		reason := fmt.Sprintf("owned by another user: only %s or root may own it, or its owner chooses the programs its jobs run as %s", you, you)
		if t.groupAccess {
			reason += " (with group access, also a member of its group, if it is yours)"
		}
		return bad(reason)
	}
	sticky := above && mode&fs.ModeSticky != 0
	if mode.Perm()&0o002 != 0 && !sticky {
		return bad("writable by every user, who could then run programs as you")
	}
	if mode.Perm()&0o020 != 0 && !sticky {
		switch gid := int(st.Gid); {
		case t.privateGroup(gid):
		case t.groupAccess && slices.Contains(t.groups, gid):
		case t.groupAccess:
			return bad("writable by a group you are not a member of")
		default:
			e := bad("writable by its group, whose members could then run programs as you; accept that with group access (--group-access) if they may")
			e.GroupWritable = true
			return e
		}
	}
	return nil
}

// groupMember reports whether, with group access, a directory owned by
// uid with group gid is within t's trust: gid is one of t's groups and
// uid one of its members. Every member of a shared store's group can run
// programs as every other anyway.
func (t trustee) groupMember(uid, gid int) bool {
	if !t.groupAccess || !slices.Contains(t.groups, gid) {
		return false
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return false
	}
	if u.Gid == strconv.Itoa(gid) {
		return true
	}
	ids, err := u.GroupIds()
	return err == nil && slices.Contains(ids, strconv.Itoa(gid))
}

// privateGroup reports whether gid is t's private group: its primary
// group, named as the user (the user private group scheme of Debian,
// Fedora and others, where group-writable directories are common).
func (t trustee) privateGroup(gid int) bool {
	if gid != t.gid || t.name() == "" {
		return false
	}
	g, err := user.LookupGroupId(strconv.Itoa(gid))
	return err == nil && g.Name == t.name()
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (%d)", u.Username, uid)
	}
	return strconv.Itoa(uid)
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return fmt.Sprintf("%s (%d)", g.Name, gid)
	}
	return strconv.Itoa(gid)
}
