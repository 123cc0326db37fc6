//go:build unix

package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// TestTrustCheck: a store whose directory, state directories or the
// directories above it others can write is opened and served for reading,
// submitting and canceling, but Claim refuses it with ErrUntrusted and an
// error naming the directory, its owner and its mode. Group-writable
// directories pass only with GroupAccess and a group the user is in.
func TestTrustCheck(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name        string
		needsRoot   bool
		groupAccess bool
		// prepare changes the store's directories (store is the store
		// directory in base) and returns the directory Open is given.
		prepare func(t *testing.T, base, store string) string
		// bad is the directory at fault, relative to base; "" means
		// trusted.
		bad    string
		reason string
	}{
		{name: "private", prepare: nothing},
		{name: "store writable by others", bad: "store", reason: "writable by every user",
			prepare: chmod("store", 0o777)},
		{name: "state directory writable by others", bad: "store/queued", reason: "writable by every user",
			prepare: chmod("store/queued", 0o703)},
		{name: "store writable by its group", needsRoot: true, bad: "store", reason: "--group-access",
			prepare: func(t *testing.T, base, store string) string {
				require.NoError(t, os.Chown(store, 0, 65534))
				return chmod("store", 0o770)(t, base, store)
			}},
		{name: "store writable by a group the user is not in", needsRoot: true, groupAccess: true, bad: "store", reason: "not a member",
			prepare: func(t *testing.T, base, store string) string {
				require.NoError(t, os.Chown(store, 0, 65534))
				return chmod("store", 0o770)(t, base, store)
			}},
		{name: "logs writable by the user's private group", groupAccess: false,
			prepare: func(t *testing.T, base, store string) string {
				if !currentTrustee(false).privateGroup(os.Getegid()) {
					t.Skip("this user's primary group is not a private group")
				}
				return mkdir("store/logs", 0o770)(t, base, store)
			}},
		{name: "store owned by another user", needsRoot: true, bad: "store", reason: "owned by another user",
			prepare: func(t *testing.T, base, store string) string {
				require.NoError(t, os.Chown(store, 65534, 65534))
				return store
			}},
		{name: "state directory owned by another user", needsRoot: true, bad: "store/done", reason: "owned by another user",
			prepare: func(t *testing.T, base, store string) string {
				require.NoError(t, os.Chown(filepath.Join(store, dirDone), 65534, 0))
				return store
			}},
		{name: "store of a UID no user database names, in your group, with group access", needsRoot: true, groupAccess: true,
			prepare: giveTree("store", podA, os.Getegid())},
		{name: "store of a UID no user database names, in your group", needsRoot: true, bad: "store", reason: "owned by another user",
			prepare: giveTree("store", podA, os.Getegid())},
		{name: "store of a UID no user database names, in your group, in a directory every user can write", needsRoot: true, groupAccess: true,
			bad: "store", reason: "every user can create entries",
			prepare: func(t *testing.T, base, store string) string {
				require.NoError(t, os.Chmod(base, os.ModeSticky|0o777))
				return giveTree("store", podA, os.Getegid())(t, base, store)
			}},
		{name: "logs directory is a symbolic link", bad: "store/logs", reason: "symbolic link",
			prepare: func(t *testing.T, base, store string) string {
				require.NoError(t, os.Mkdir(filepath.Join(base, "elsewhere"), 0o700))
				require.NoError(t, os.Symlink(filepath.Join(base, "elsewhere"), filepath.Join(store, "logs")))
				return store
			}},
		{name: "directory above writable by others", bad: ".", reason: "writable by every user",
			prepare: chmod(".", 0o777)},
		{name: "directory above writable by others, with the sticky bit",
			prepare: chmod(".", os.ModeSticky|0o777)},
		{name: "store reached through a symbolic link",
			prepare: func(t *testing.T, base, store string) string {
				link := filepath.Join(base, "link")
				require.NoError(t, os.Symlink(store, link))
				return link
			}},
		{name: "symbolic link to a store in a directory others can write", bad: "open", reason: "writable by every user",
			prepare: func(t *testing.T, base, store string) string {
				open := filepath.Join(base, "open")
				require.NoError(t, os.Mkdir(open, 0o700))
				require.NoError(t, os.Chmod(open, 0o777))
				require.NoError(t, os.Symlink(store, filepath.Join(open, "link")))
				return filepath.Join(open, "link")
			}},
		{name: "symbolic link on the way held in a directory under one others can write", bad: "x", reason: "writable by every user",
			prepare: func(t *testing.T, base, store string) string {
				// base/link/b/c/store is base/x/y/b/c/store, and c is a
				// link to base: whoever can write base/x can replace y,
				// b and c, and so the store.
				require.NoError(t, os.MkdirAll(filepath.Join(base, "x", "y", "b"), 0o700))
				require.NoError(t, os.Chmod(filepath.Join(base, "x"), 0o777))
				require.NoError(t, os.Symlink(base, filepath.Join(base, "x", "y", "b", "c")))
				require.NoError(t, os.Symlink(filepath.Join(base, "x", "y"), filepath.Join(base, "link")))
				return filepath.Join(base, "link", "b", "c", "store")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsRoot && !root {
				t.Skip("needs root to give a directory to another user")
			}
			ctx := t.Context()
			base := t.TempDir()
			store := filepath.Join(base, "store")
			s, err := Open(ctx, store, &Options{NoSync: true, GroupAccess: tc.groupAccess})
			require.NoError(t, err)
			require.NoError(t, s.CheckTrust(), "a new store is trusted")
			queued, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			require.NoError(t, s.Close())

			dir := tc.prepare(t, base, store)
			s, err = Open(ctx, dir, &Options{NoSync: true, GroupAccess: tc.groupAccess})
			require.NoError(t, err, "an untrusted store still opens")
			t.Cleanup(func() { _ = s.Close() })

			err = s.CheckTrust()
			if tc.bad == "" {
				require.NoError(t, err)
				j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
				require.NoError(t, err)
				require.Equal(t, queued.ID, j.ID)
				return
			}
			require.ErrorIs(t, err, jobstore.ErrUntrusted)
			var ue *UntrustedError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, filepath.Join(base, tc.bad), ue.Path)
			require.Contains(t, ue.Reason, tc.reason)
			fi, statErr := os.Lstat(ue.Path)
			require.NoError(t, statErr)
			require.Contains(t, err.Error(), ue.Path)
			require.Contains(t, err.Error(), "mode "+fi.Mode().String(), "the error names the mode")
			require.Contains(t, err.Error(), "owner ")

			_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			require.ErrorIs(t, err, jobstore.ErrUntrusted, "Claim refuses an untrusted store")
			require.Contains(t, err.Error(), ue.Path)

			// Everything but running jobs works.
			j, err := s.Get(ctx, queued.ID)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateQueued, j.State, "the refused claim left the job queued")
			page, err := s.List(ctx, jobstore.ListOptions{})
			require.NoError(t, err)
			require.Len(t, page.Jobs, 1)
			more, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			_, err = s.Cancel(ctx, more.ID)
			require.NoError(t, err)
		})
	}
}

func nothing(t *testing.T, base, store string) string { return store }

// chmod returns a prepare step that sets the mode of base/rel.
func chmod(rel string, mode os.FileMode) func(t *testing.T, base, store string) string {
	return func(t *testing.T, base, store string) string {
		require.NoError(t, os.Chmod(filepath.Join(base, rel), mode))
		return store
	}
}

// giveTree returns a prepare step that gives base/rel and everything in
// it to uid, which no user database may name, and gid.
func giveTree(rel string, uid, gid int) func(t *testing.T, base, store string) string {
	return func(t *testing.T, base, store string) string {
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			t.Skipf("uid %d is user %s here", uid, u.Username)
		}
		require.NoError(t, chownTree(filepath.Join(base, rel), uid, gid))
		return store
	}
}

// mkdir returns a prepare step that makes directory base/rel with mode.
func mkdir(rel string, mode os.FileMode) func(t *testing.T, base, store string) string {
	return func(t *testing.T, base, store string) string {
		p := filepath.Join(base, rel)
		require.NoError(t, os.Mkdir(p, 0o700))
		require.NoError(t, os.Chmod(p, mode))
		return store
	}
}

// The users of TestTrustAcrossUsers: neither is root.
const (
	mallory = 65533
	victim  = 65534
)

// TestTrustAcrossUsers is the attack of issue 12 with real users: mallory
// makes a store in a shared directory, submits a job and makes the store
// writable by everyone; victim then runs a worker there. The worker
// refuses to run anything and says why; mallory's job stays queued. The
// victim's own store in the same shared directory works.
func TestTrustAcrossUsers(t *testing.T) {
	switch testproc.Name() {
	case "mallory":
		malloryChild(t)
		return
	case "victim":
		victimChild(t)
		return
	}
	base, bin := testproc.Unprivileged(t)
	shared := filepath.Join(base, "shared")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, os.ModeSticky|0o777)) // like /tmp
	evil := filepath.Join(shared, "evil")
	own := filepath.Join(shared, "own")

	out := runAs(t, &syscall.Credential{Uid: mallory, Gid: mallory}, bin, "TestTrustAcrossUsers", "mallory", hostileDirEnv+"="+evil)
	res := childResults(t, out)
	require.Empty(t, res["submit"].Err, "mallory submits:\n%s", out)
	id := res["submit"].Detail

	for _, dir := range []string{evil, own} {
		out = runAs(t, &syscall.Credential{Uid: victim, Gid: victim}, bin, "TestTrustAcrossUsers", "victim", hostileDirEnv+"="+dir)
		res = childResults(t, out)
		t.Logf("victim in %s:\n%s", dir, out)
		require.Empty(t, res["open"].Err, "victim opens %s", dir)
		if dir == own {
			require.Empty(t, res["trust"].Err, "the victim's own store is trusted")
			require.Empty(t, res["run"].Err)
			require.Equal(t, "ran", res["run"].Detail, "the victim's own job ran")
			continue
		}
		for _, op := range []string{"trust", "run"} {
			require.Contains(t, res[op].Err, jobstore.ErrUntrusted.Error(), op)
			require.Contains(t, res[op].Err, evil, "%s names the directory", op)
			require.Contains(t, res[op].Err, "owner 65533", "%s names the owner", op)
			require.Contains(t, res[op].Err, "mode drwxrwxrwx", "%s names the mode", op)
		}
		require.Empty(t, res["run"].Detail, "nothing ran")
	}
	// Mallory's job was never claimed.
	s, err := Open(t.Context(), evil, &Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	j, err := s.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Zero(t, j.Attempt)
}

func malloryChild(t *testing.T) {
	ctx := t.Context()
	dir := os.Getenv(hostileDirEnv)
	s, err := Open(ctx, dir, &Options{NoSync: true})
	report("open", err, "")
	if err != nil {
		return
	}
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "run", Payload: json.RawMessage(`{"argv":["sh","-c","id > /tmp/owned"]}`)})
	report("submit", err, j.ID)
	require.NoError(t, s.Close())
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return os.Chmod(p, 0o777)
		}
		return os.Chmod(p, 0o666)
	})
	report("chmod", err, "")
}

// trustGroupEnv set to 1 makes victimChild open the store with group
// access.
const trustGroupEnv = "FILESTORE_TRUST_GROUP"

// victimChild opens the store, reports CheckTrust, submits a job of its
// own if the store is trusted and runs a runner until it runs a job
// ("run" with detail "ran") or Run returns.
func victimChild(t *testing.T) {
	ctx := t.Context()
	dir := os.Getenv(hostileDirEnv)
	s, err := Open(ctx, dir, &Options{NoSync: true, GroupAccess: os.Getenv(trustGroupEnv) == "1"})
	report("open", err, "")
	if err != nil {
		return
	}
	defer s.Close()
	report("trust", s.CheckTrust(), "")
	if s.CheckTrust() == nil && os.Getenv(trustGroupEnv) == "" {
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "run"})
		require.NoError(t, err)
	}
	ran := make(chan struct{}, 1)
	r := runner.New(s, &runner.Options{PollInterval: 10 * time.Millisecond})
	r.Handle("run", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) {
		ran <- struct{}{}
		return nil, nil
	}))
	runCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(runCtx) }()
	select {
	case err = <-errc:
		report("run", err, "")
	case <-ran:
		stop()
		err = <-errc
		report("run", err, "ran")
	}
	if err != nil && !errors.Is(err, jobstore.ErrUntrusted) {
		t.Errorf("unexpected run error: %v", err)
	}
}

// TestTrustGroupAccessAcrossUsers: a store shared by a group with group
// access, created by one member, is trusted by another member who passes
// GroupAccess (and runs the first one's job: every member runs programs
// as every other), and not without it.
func TestTrustGroupAccessAcrossUsers(t *testing.T) {
	switch testproc.Name() {
	case "member-submits":
		memberSubmitsChild(t)
		return
	case "victim":
		victimChild(t)
		return
	}
	base, bin := testproc.Unprivileged(t)
	alice := testproc.User(t, "jobdir-test-alice", "jobdir-test-team")
	bob := testproc.User(t, "jobdir-test-bob", "jobdir-test-team")
	team, err := user.LookupGroup("jobdir-test-team")
	require.NoError(t, err)
	gid, _ := strconv.Atoi(team.Gid)
	shared := filepath.Join(base, "team")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chown(shared, 0, gid))
	require.NoError(t, os.Chmod(shared, os.ModeSetgid|0o770))
	dir := filepath.Join(shared, "store")

	out := runAs(t, alice, bin, "TestTrustGroupAccessAcrossUsers", "member-submits", hostileDirEnv+"="+dir)
	res := childResults(t, out)
	require.Empty(t, res["submit"].Err, "alice submits:\n%s", out)

	out = runAs(t, bob, bin, "TestTrustGroupAccessAcrossUsers", "victim", hostileDirEnv+"="+dir)
	res = childResults(t, out)
	require.Contains(t, res["trust"].Err, "--group-access", "without group access:\n%s", out)
	require.Contains(t, res["run"].Err, jobstore.ErrUntrusted.Error())
	require.Empty(t, res["run"].Detail)

	out = runAs(t, bob, bin, "TestTrustGroupAccessAcrossUsers", "victim", hostileDirEnv+"="+dir, trustGroupEnv+"=1")
	res = childResults(t, out)
	require.Empty(t, res["trust"].Err, "with group access, a member trusts a store of its group:\n%s", out)
	require.Equal(t, "ran", res["run"].Detail, "bob ran alice's job")
}

func memberSubmitsChild(t *testing.T) {
	s, err := Open(t.Context(), os.Getenv(hostileDirEnv), &Options{NoSync: true, GroupAccess: true})
	report("open", err, "")
	if err != nil {
		return
	}
	defer s.Close()
	report("trust", s.CheckTrust(), "")
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "run"})
	report("submit", err, j.ID)
}
