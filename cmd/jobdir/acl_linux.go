package main

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// The tags and permission bits of a POSIX access ACL as Linux stores it in
// the system.posix_acl_access extended attribute: a little-endian version
// (2), then entries of a 16-bit tag, 16-bit permissions and a 32-bit ID.
const (
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclRead     = 0x04
	aclEntry    = 8
)

// aclGroupClass returns the permissions, as a mode's group bits (0o070),
// that the access ACL of f grants to users and groups other than this
// process's user and, with groupAccess, read access to one of this
// process's groups; gid is f's group. ok is false when f has no ACL: its
// mode's group bits then mean what they say. With an ACL they are its mask,
// which bounds what the named users and groups may do: a systemd credential
// ($CREDENTIALS_DIRECTORY/NAME) is root's, mode 0400, with an ACL entry
// that lets the service's user read it, and so shows as 0440.
func aclGroupClass(f *os.File, gid uint32, groupAccess bool) (perm fs.FileMode, ok bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false, err
	}
	buf := make([]byte, 4+64*aclEntry)
	var n int
	var xerr error
	if err := rc.Control(func(fd uintptr) {
		n, xerr = unix.Fgetxattr(int(fd), "system.posix_acl_access", buf)
	}); err != nil {
		return 0, false, err
	}
	switch {
	case errors.Is(xerr, unix.ENODATA), errors.Is(xerr, unix.ENOTSUP), errors.Is(xerr, unix.EOPNOTSUPP):
		return 0, false, nil
	case errors.Is(xerr, unix.ERANGE):
		// More than 64 entries: far more than a secret file has.
		return 0o070, true, nil
	case xerr != nil:
		return 0, false, &fs.PathError{Op: "read the ACL of", Path: f.Name(), Err: xerr}
	}
	b := buf[:n]
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != 2 || (len(b)-4)%aclEntry != 0 {
		return 0o070, true, nil // not an ACL this knows: count it as open to others
	}
	mask := uint16(0o7)
	for e := b[4:]; len(e) > 0; e = e[aclEntry:] {
		if binary.LittleEndian.Uint16(e) == aclMask {
			mask = binary.LittleEndian.Uint16(e[2:]) & 0o7
		}
	}
	var grants uint16
	for e := b[4:]; len(e) > 0; e = e[aclEntry:] {
		tag, p, id := binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:])&mask, binary.LittleEndian.Uint32(e[4:])
		switch tag {
		case aclUser:
			if int(id) == os.Geteuid() {
				continue // this process's own user
			}
		case aclGroupObj, aclGroup:
			if tag == aclGroupObj {
				id = gid
			}
			if groupAccess && inGroup(int(id)) {
				p &^= aclRead
			}
		default:
			continue // the owner, the mask, and others, which the mode shows
		}
		grants |= p
	}
	return fs.FileMode(grants) << 3, true, nil
}
