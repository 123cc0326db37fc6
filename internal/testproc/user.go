package testproc

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Nobody returns the credentials of uid and gid 65534, the user nobody.
func Nobody() *syscall.Credential { return &syscall.Credential{Uid: 65534, Gid: 65534} }

// Unprivileged prepares to run the test binary as another user: it skips
// the test unless it runs as root, or if the temporary directory is not
// searchable by every user, and returns a new directory every user can
// enter (removed when the test ends) and a copy of the test binary in it
// that every user can run, to pass as Options.Exe.
func Unprivileged(t testing.TB) (base, exe string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a child process as another user")
	}
	base, err := os.MkdirTemp("", "jobdir-testproc-")
	if err != nil {
		t.Fatalf("testproc: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatalf("testproc: %v", err)
	}
	for d := filepath.Dir(base); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("other users cannot reach %s: %s is not searchable by others", base, d)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("testproc: %v", err)
	}
	exe = filepath.Join(base, filepath.Base(self))
	if err := copyFile(self, exe); err != nil {
		t.Fatalf("testproc: copy the test binary: %v", err)
	}
	return base, exe
}

// copyFile copies the file from to a new file to that every user can run.
func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// User makes sure the Unix user name exists, a member of the supplementary
// groups given, and returns its credentials, to pass as Options.Cred.
// A user or group that does not exist is created with useradd or groupadd
// and removed when the test ends; a user left by an earlier run outside one
// of the groups (removed and made again since) is put back in it. The test
// is skipped where users or groups cannot be created.
func User(t testing.TB, name string, groups ...string) *syscall.Credential {
	t.Helper()
	for _, g := range groups {
		if _, err := user.LookupGroup(g); err != nil {
			if out, err := exec.Command("groupadd", g).CombinedOutput(); err != nil {
				t.Skipf("cannot create group %s for the test: %v: %s", g, err, out)
			}
			t.Cleanup(func() { _ = exec.Command("groupdel", g).Run() })
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		args := []string{"--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin"}
		if len(groups) > 0 {
			args = append(args, "--groups", strings.Join(groups, ","))
		}
		if out, err := exec.Command("useradd", append(args, name)...).CombinedOutput(); err != nil {
			t.Skipf("cannot create user %s for the test: %v: %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
		if u, err = user.Lookup(name); err != nil {
			t.Fatalf("testproc: %v", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	ids, err := u.GroupIds()
	if err != nil {
		t.Fatalf("testproc: groups of %s: %v", name, err)
	}
	for _, id := range ids {
		n, _ := strconv.Atoi(id)
		cred.Groups = append(cred.Groups, uint32(n))
	}
	for _, g := range groups {
		gr, err := user.LookupGroup(g)
		if err != nil {
			t.Fatalf("testproc: %v", err)
		}
		if !slices.Contains(ids, gr.Gid) {
			// Left by an earlier run whose group was removed and made
			// again: put the user back in it.
			if out, err := exec.Command("gpasswd", "--add", name, g).CombinedOutput(); err != nil {
				t.Fatalf("user %s is not in group %s and cannot be added: %v: %s", name, g, err, out)
			}
			n, _ := strconv.Atoi(gr.Gid)
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred
}
