package main

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// aclEnt is one entry of a POSIX access ACL.
type aclEnt struct {
	tag, perm uint16
	id        uint32
}

// setACL gives the file at p the access ACL of ents, as setfacl does, or
// skips the test where the file system has no ACLs.
func setACL(t *testing.T, p string, ents ...aclEnt) {
	t.Helper()
	const undefined = ^uint32(0)
	all := append([]aclEnt{{0x01, 4, undefined}}, ents...) // the owner may read
	all = append(all, aclEnt{0x20, 0, undefined})          // others nothing
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range all {
		if e.tag == aclGroupObj || e.tag == aclMask {
			e.id = undefined
		}
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	err := unix.Setxattr(p, "system.posix_acl_access", b, 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("the file system of %s has no POSIX ACLs", p)
	}
	require.NoError(t, err)
}

// TestServeTokenFileACL: serve takes a token file that an ACL lets this
// user read, as a systemd credential is ($CREDENTIALS_DIRECTORY/token from
// LoadCredential=: root's, mode 0400, with an entry for the service's user,
// which shows as mode 0440); and it refuses one whose ACL lets another user,
// or a group not trusted with --group-access, read it, though its mode
// looks the same.
func TestServeTokenFileACL(t *testing.T) {
	dir := newStoreDir(t)
	t.Setenv("JOBDIR_TOKEN", "")
	me := uint32(os.Geteuid())
	other := uint32(65534)
	if me == other {
		other = 65533
	}
	notMyGroup := uint32(65534)
	if groups, _ := os.Getgroups(); uint32(os.Getegid()) == notMyGroup || slices.Contains(groups, int(notMyGroup)) {
		t.Skip("this process is in group 65534, which the test needs to be another's")
	}
	myGroup := uint32(os.Getegid())
	tests := []struct {
		name        string
		groupAccess bool
		ents        []aclEnt
		ok          bool
	}{
		{"this user, as a systemd credential", false, []aclEnt{{aclUser, 4, me}, {aclGroupObj, 0, 0}, {aclMask, 4, 0}}, true},
		{"another user", false, []aclEnt{{aclUser, 4, other}, {aclGroupObj, 0, 0}, {aclMask, 4, 0}}, false},
		{"another user, masked", false, []aclEnt{{aclUser, 4, other}, {aclGroupObj, 0, 0}, {aclMask, 0, 0}}, true},
		{"this user and another", false, []aclEnt{{aclUser, 4, me}, {aclUser, 4, other}, {aclGroupObj, 0, 0}, {aclMask, 4, 0}}, false},
		{"a group not this user's", true, []aclEnt{{aclGroupObj, 0, 0}, {aclGroup, 4, notMyGroup}, {aclMask, 4, 0}}, false},
		{"this user's group, without group access", false, []aclEnt{{aclGroupObj, 0, 0}, {aclGroup, 4, myGroup}, {aclMask, 4, 0}}, false},
		{"this user's group, with group access", true, []aclEnt{{aclGroupObj, 0, 0}, {aclGroup, 4, myGroup}, {aclMask, 4, 0}}, true},
		{"this user's group may write it", true, []aclEnt{{aclGroupObj, 0, 0}, {aclGroup, 6, myGroup}, {aclMask, 6, 0}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(p, []byte("a-good-token-0123456789\n"), 0o600))
			require.NoError(t, os.Chmod(p, 0o400))
			setACL(t, p, tt.ents...)
			fi, err := os.Stat(p)
			require.NoError(t, err)
			args := []string{"serve", "--addr", "unix:", "--token-file", p}
			if tt.groupAccess {
				args = append([]string{"--group-access"}, args...)
			}
			r := jd(t, dir, args...)
			if tt.ok {
				// Past the token check, to the address check.
				require.Equal(t, exitUsage, r.code, "%s", r)
				require.Contains(t, r.stderr, "--addr unix:PATH needs a PATH")
				return
			}
			require.Equal(t, exitError, r.code, "%s", r)
			require.Contains(t, r.stderr, "may be read or written by other users (mode "+fi.Mode().Perm().String()+" and an ACL: getfacl "+p+"); make it private: chmod 600")
		})
	}
}
