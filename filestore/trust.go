package filestore

import (
	"fmt"
	"io/fs"

	"github.com/jobdir/jobdir/jobstore"
)

// UntrustedError says why a store is not trusted with running jobs: a
// directory of it, or above it, that users other than this process's own
// (and root) can write. Like ssh's StrictModes, it names the directory,
// its owner and its mode. It unwraps to jobstore.ErrUntrusted.
type UntrustedError struct {
	// Path is the directory.
	Path string
	// Owner and Group name the directory's owner and group, as
	// "name (id)" or the bare ID when the name is unknown.
	Owner, Group string
	// Mode is the directory's mode.
	Mode fs.FileMode
	// Reason says who else could write it, or what else is wrong.
	Reason string
	// GroupWritable is set when the directory is writable by its group,
	// or is another user's in one of the process's groups, and nothing
	// worse: Options.GroupAccess accepts that if the group is one of the
	// process's groups.
	GroupWritable bool
}

// Error names the directory, its owner, group and mode, and the reason.
func (e *UntrustedError) Error() string {
	return fmt.Sprintf("%s: %s (owner %s, group %s, mode %s): %s",
		jobstore.ErrUntrusted, e.Path, e.Owner, e.Group, e.Mode, e.Reason)
}

// Unwrap returns jobstore.ErrUntrusted.
func (e *UntrustedError) Unwrap() error { return jobstore.ErrUntrusted }

// CheckTrust returns nil if the store may be trusted with running its
// jobs, and otherwise an error wrapping jobstore.ErrUntrusted: an
// *UntrustedError naming the first directory at fault, or the error met
// examining one. Claim
// refuses to hand out jobs of an untrusted store with that error, since
// whoever else can write the store chooses what its jobs run, as this
// process's user; every other operation works as usual, so a store of
// another user can be read, submitted to and canceled in.
//
// A store is trusted when the store directory, every directory in it (the
// state directories, keys, locks, tmp, logs) and every directory above
// it are directories that no one but trusted users can write. In the
// store, a symbolic link is refused; on the way to it, a link counts as
// the directory it leads to, whose own parents are checked too. For each
// directory:
//
//   - the owner must be this process's effective user or root; with
//     Options.GroupAccess, also another user if the directory's group is
//     one of this process's groups and the directory holding it is not
//     writable by every user (or the user database lists the owner as a
//     member of the group);
//   - the group may write it only if it is the user's private group (named
//     as the user, with its ID as primary group) or, with
//     Options.GroupAccess, one of this process's groups;
//   - no one else may write it. Directories above the store may be
//     writable by others if they have the sticky bit (as /tmp has), which
//     keeps others from moving what they do not own.
//
// "This process's groups" are its effective group and its supplementary
// groups, by number, as the kernel grants them: no user database needs to
// name them, nor the owners. That is the shape of a Kubernetes volume
// shared by pods of different UIDs with one fsGroup. Another owner is
// trusted there because only a trusted user could have made the
// directory theirs: making it needs write permission on its parent, which
// only trusted users have, and giving it a group needs membership of the
// group or a setgid parent of that group one can write; only root gives a
// directory away. In a parent writable by every user, anyone could have
// made it. With group access, every member of the group can run programs
// as every other's user.
//
// The check is made once, at Open: from then on only trusted users can
// change any of those directories. On systems without Unix permissions
// every store is trusted.
func (s *Store) CheckTrust() error { return s.trustErr }

// checkTrust records, at Open, whether the store is trusted.
func (s *Store) checkTrust() error {
	s.trustErr = checkTrustedDirs(s.dir, s.opts.GroupAccess)
	if s.trustErr != nil {
		// Info, not a warning: reading another user's store is fine.
		s.log.Info("filestore: this store is not trusted with running jobs; Claim will refuse", "err", s.trustErr)
	}
	return nil
}
