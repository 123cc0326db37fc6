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
// user and groups, by number, as the kernel knows them.
type trustee struct {
	uid, gid int
	// groups are the effective group and the supplementary groups: the
	// groups whose permissions the kernel grants this process, whether
	// or not /etc/group lists them (a container's fsGroup often is not).
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
	above, err := dirsAbove(dir, real)
	if err != nil {
		return err
	}
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

// dirsAbove returns the real directories above the store whose writers
// could change it, from / down: the ancestors of real (the store as
// resolved) and, for every directory on the way to dir as named, that
// directory resolved and its ancestors. So a symbolic link on the way is
// as safe as the directory holding it, and every directory checked has
// its own parent checked too, which check relies on.
func dirsAbove(dir, real string) ([]string, error) {
	var above []string
	add := func(p string) {
		for {
			if !slices.Contains(above, p) {
				above = append(above, p)
			}
			parent := filepath.Dir(p)
			if parent == p {
				return
			}
			p = parent
		}
	}
	add(filepath.Dir(real))
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot resolve %s: %w", jobstore.ErrUntrusted, dir, err)
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("%w: cannot resolve %s: %w", jobstore.ErrUntrusted, p, err)
		}
		add(r)
		if filepath.Dir(p) == p {
			break
		}
	}
	above = slices.DeleteFunc(above, func(p string) bool { return p == real })
	slices.SortStableFunc(above, func(a, b string) int { return len(a) - len(b) }) // from / down
	return above, nil
}

// check returns an *UntrustedError if directory p is not safe for t. above
// says p is above the store, where the sticky bit makes a directory that
// others can write safe.
//
// Who can change what is in a directory: its owner (who can always chmod
// it), root, its group if it is group-writable, and everyone if it is
// world-writable. check trusts a directory if every one of them is
// trusted: the owner is this user or root, or with group access someone
// the group's members let in (below); the group, if it may write, is one
// of this process's groups (with group access) or the user's private
// group; no one else may write it.
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
	bad := func(reason string) *UntrustedError {
		return &UntrustedError{Path: p, Owner: userName(int(st.Uid)), Group: groupName(int(st.Gid)), Mode: mode, Reason: reason}
	}
	switch {
	case mode&fs.ModeSymlink != 0 && above:
		// dirsAbove resolved every link: this one appeared since.
		return bad("a symbolic link where a directory was a moment before")
	case mode&fs.ModeSymlink != 0:
		return bad("a store must hold no symbolic links, which could lead its writes elsewhere")
	case !mode.IsDir():
		return bad("not a directory")
	}
	if reason := t.ownerReason(p, int(st.Uid), int(st.Gid)); reason != "" {
		e := bad(reason)
		if ga := t; !t.groupAccess {
			if ga.groupAccess = true; ga.check(p, above) == nil {
				e.Reason += "; it is in your group " + groupName(int(st.Gid)) + ": accept that with group access (--group-access) if its members may run programs as you"
				e.GroupWritable = true
			}
		}
		return e
	}
	sticky := above && mode&fs.ModeSticky != 0
	if mode.Perm()&0o002 != 0 && !sticky {
		return bad("writable by every user, who could then run programs as you")
	}
	if mode.Perm()&0o020 != 0 && !sticky {
		// Group access first: it needs no lookup of names.
		switch gid := int(st.Gid); {
		case t.groupAccess && slices.Contains(t.groups, gid):
		case t.privateGroup(gid):
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

// ownerReason returns "" if t may trust uid as the owner of directory p,
// whose group is gid, and otherwise why not.
//
// This user and root are trusted. With group access, so is another owner
// of a directory whose group is one of this process's groups, judged by
// numbers alone, as in a Kubernetes volume shared by pods of different
// UIDs with one fsGroup (which neither /etc/passwd nor /etc/group of an
// image lists): there the owner can be trusted because of who could have
// made the directory theirs. Making a directory needs write permission
// on its parent, and giving a directory a group needs membership of that
// group (chgrp(2)) or a setgid parent of that group one can write; only
// root gives a directory to another user. So if the parent lets no one
// but trusted users create entries in it (it is not writable by all: its
// own check, made too, trusts its owner and group), the owner was one of
// those trusted writers, or a member of the group, or was given the
// directory by root or by one of them, who can run programs as this user
// anyway. Where the parent is writable by all, as a sticky /tmp is,
// anyone could have made the directory, and a setgid parent would even
// have given it the group: then the owner must be a member of the group
// by the user database, as before.
//
// What numbers cannot show is a member taken out of the group since:
// what they own in the store they can still change. Whoever takes a user
// out of a store's group gives what they own to someone else (chown).
func (t trustee) ownerReason(p string, uid, gid int) string {
	if uid == t.uid || uid == 0 {
		return ""
	}
	if t.groupAccess && slices.Contains(t.groups, gid) {
		if closedParent(p) || knownMember(uid, gid) {
			return ""
		}
		return "owned by another user, in a directory every user can create entries in: only you, root or a member of its group may own it there, or its owner chooses the programs its jobs run as you"
	}
	you := strconv.Itoa(t.uid)
	if name := t.name(); name != "" {
		you = name
	}
	reason := fmt.Sprintf("owned by another user: only %s or root may own it, or its owner chooses the programs its jobs run as %s", you, you)
	if t.groupAccess {
		reason += " (with group access, also another user, if its group is one of yours)"
	}
	return reason
}

// closedParent reports whether the directory holding p can be written by
// no one but its owner and its group: not by every user.
func closedParent(p string) bool {
	parent := filepath.Dir(p)
	if parent == p {
		return false
	}
	fi, err := os.Stat(parent)
	return err == nil && fi.IsDir() && fi.Mode().Perm()&0o002 == 0
}

// knownMember reports whether the user database lists uid as a member of
// gid, as its primary group or a supplementary one.
func knownMember(uid, gid int) bool {
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
