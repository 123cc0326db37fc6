//go:build unix

package filestore

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// The IDs of TestTrustFSGroup, as a Kubernetes cluster hands them out: no
// /etc/passwd or /etc/group entry names any of them.
const (
	fsGroup     = 47100 // the pods' fsGroup, the volume's group
	podA        = 47101 // runAsUser of pod A
	podB        = 47102 // runAsUser of pod B
	volumeOwner = 47103 // owner of the volume's root, made by a provisioner
	outsider    = 47104 // a process outside the fsGroup
	otherGroup  = 47105 // a group neither pod is in
)

// fsGroupPod returns the credentials of a pod with runAsUser uid: its own
// primary group (runAsGroup) and the fsGroup as its only supplementary
// group, which is all that makes it a member.
func fsGroupPod(uid uint32) *syscall.Credential {
	return &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{fsGroup}}
}

// TestTrustFSGroup is the Kubernetes fsGroup shape: a volume owned by a
// provisioner's UID, group-owned by the fsGroup with mode 2775, and pods
// that run as different UIDs and primary groups, each with the fsGroup as
// a supplementary group and none of them listed in /etc/passwd or
// /etc/group. Pod A makes the store with GroupAccess and submits; pod B
// trusts it, sees A's job, submits its own and runs both; pod A then sees
// and runs B's. Trust is judged by numbers alone. What the group does not
// vouch for stays refused by pod B even with GroupAccess, and Claim hands
// out nothing there: a directory above the store or in it writable by a
// group B is not in, a state directory of an outsider in another group,
// a store writable by every user, and a store an outsider made in a
// world-writable setgid directory of the fsGroup, which gave all of it
// the group.
func TestTrustFSGroup(t *testing.T) {
	if testproc.Name() == "pod" {
		fsGroupPodChild(t)
		return
	}
	base, bin := testproc.Unprivileged(t)
	for _, id := range []int{podA, podB, volumeOwner, outsider} {
		if u, err := user.LookupId(strconv.Itoa(id)); err == nil {
			t.Skipf("uid %d is user %s here; the test needs IDs no user database names", id, u.Username)
		}
	}
	for _, id := range []int{fsGroup, otherGroup} {
		if g, err := user.LookupGroupId(strconv.Itoa(id)); err == nil {
			t.Skipf("gid %d is group %s here; the test needs IDs no user database names", id, g.Name)
		}
	}
	vol := filepath.Join(base, "volume")
	require.NoError(t, os.Mkdir(vol, 0o700))
	require.NoError(t, os.Chown(vol, volumeOwner, fsGroup))
	require.NoError(t, os.Chmod(vol, os.ModeSetgid|0o775))
	store := filepath.Join(vol, "jobdir")
	pod := func(uid uint32, dir, mode string, env ...string) map[string]opResult {
		t.Helper()
		return runPodChild(t, bin, fsGroupPod(uid), dir, mode, env...)
	}

	// What the group does not vouch for, each in a store made by root in
	// a directory of its own in the volume, given to pod A and the
	// fsGroup so that pod B can open it and only trust is at stake, and
	// then changed in one thing. prepare returns the directory at fault.
	refused := []struct {
		name    string
		prepare func(dir string) (bad string)
		reason  string
	}{
		{name: "a directory above writable by a group not yours", reason: "writable by a group you are not a member of",
			prepare: func(dir string) string {
				above := filepath.Dir(dir)
				require.NoError(t, os.Chown(above, 0, otherGroup))
				require.NoError(t, os.Chmod(above, os.ModeSetgid|0o775))
				return above
			}},
		{name: "a directory in the store writable by a group not yours", reason: "writable by a group you are not a member of",
			prepare: func(dir string) string {
				logs := filepath.Join(dir, "logs")
				require.NoError(t, os.Mkdir(logs, 0o700))
				require.NoError(t, os.Chown(logs, 0, otherGroup))
				require.NoError(t, os.Chmod(logs, 0o770))
				return logs
			}},
		{name: "a directory in the store of another user in a group not yours", reason: "owned by another user",
			prepare: func(dir string) string {
				queued := filepath.Join(dir, dirQueued)
				require.NoError(t, os.Chown(queued, outsider, otherGroup))
				require.NoError(t, os.Chmod(queued, 0o755))
				return queued
			}},
		{name: "the store writable by every user", reason: "writable by every user",
			prepare: func(dir string) string {
				require.NoError(t, os.Chmod(dir, os.ModeSetgid|0o777))
				return dir
			}},
	}
	var refusedDirs, refusedBad []string
	for i, tc := range refused {
		above := filepath.Join(vol, strconv.Itoa(i))
		require.NoError(t, os.Mkdir(above, 0o775))
		dir := filepath.Join(above, "jobdir")
		s, err := Open(t.Context(), dir, &Options{NoSync: true, GroupAccess: true})
		require.NoError(t, err)
		_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "run"})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, chownTree(dir, podA, fsGroup))
		require.NoError(t, chmodTree(dir, os.ModeSetgid|0o770, 0o660))
		refusedDirs = append(refusedDirs, dir)
		refusedBad = append(refusedBad, tc.prepare(dir))
	}

	// A drop box: world-writable and sticky, and setgid to the fsGroup,
	// so that what anyone makes there is in the fsGroup. An outsider
	// makes a store there that looks like pod A's.
	drop := filepath.Join(base, "drop")
	require.NoError(t, os.Mkdir(drop, 0o700))
	require.NoError(t, os.Chown(drop, 0, fsGroup))
	require.NoError(t, os.Chmod(drop, os.ModeSticky|os.ModeSetgid|0o777))
	evil := filepath.Join(drop, "jobdir")
	res := runPodChild(t, bin, &syscall.Credential{Uid: outsider, Gid: outsider}, evil, "submit,regroup")
	require.Empty(t, res["submit"].Err, "the outsider submits")
	for _, p := range []string{evil, filepath.Join(evil, dirQueued)} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, [2]uint32{outsider, fsGroup}, [2]uint32{st.Uid, st.Gid}, "the setgid drop box gave %s the fsGroup", p)
	}

	res = pod(podA, store, "submit")
	require.Empty(t, res["open"].Err, "pod A makes the store")
	require.Empty(t, res["trust"].Err, "pod A trusts the store it made")
	jobA := res["submit"].Detail
	require.NotEmpty(t, jobA)
	fi, err := os.Stat(store)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	require.Equal(t, [2]uint32{podA, fsGroup}, [2]uint32{st.Uid, st.Gid}, "the store is pod A's, in the fsGroup")
	require.Equal(t, os.ModeDir|os.ModeSetgid|0o770, fi.Mode())

	res = pod(podB, store, "submit,run,check", fsGroupCheckEnv+"="+strings.Join(append(refusedDirs, evil), string(os.PathListSeparator)))
	require.Empty(t, res["trust"].Err, "pod B trusts pod A's store by its group")
	require.Contains(t, res["list"].Detail, jobA, "pod B sees pod A's job")
	jobB := res["submit"].Detail
	require.NotEmpty(t, jobB)
	require.ElementsMatch(t, []string{jobA, jobB}, strings.Split(res["run"].Detail, ","), "pod B ran both jobs")
	for i, tc := range refused {
		dir := refusedDirs[i]
		require.Empty(t, res["open "+dir].Err, tc.name)
		require.Contains(t, res["trust "+dir].Err, jobstore.ErrUntrusted.Error(), tc.name)
		require.Contains(t, res["trust "+dir].Err, ": "+refusedBad[i]+" (owner", tc.name)
		require.Contains(t, res["trust "+dir].Err, tc.reason, tc.name)
		require.Contains(t, res["claim "+dir].Err, jobstore.ErrUntrusted.Error(), "%s: claim refuses", tc.name)
	}
	require.Empty(t, res["open "+evil].Err)
	require.Contains(t, res["trust "+evil].Err, "every user can create entries", "pod B refuses a store anyone could have made")
	require.Contains(t, res["trust "+evil].Err, ": "+evil+" (owner")
	require.Contains(t, res["claim "+evil].Err, jobstore.ErrUntrusted.Error(), "the outsider's job never runs")

	res = pod(podA, store, "submit,run")
	require.Empty(t, res["trust"].Err)
	require.Contains(t, res["list"].Detail, jobB, "pod A sees pod B's job")
	require.Equal(t, res["submit"].Detail, res["run"].Detail, "pod A runs the job it submitted since")
	s, err := Open(t.Context(), store, &Options{NoSync: true})
	require.NoError(t, err)
	for _, id := range []string{jobA, jobB} {
		j, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, j.State)
	}
	require.NoError(t, s.Close())
}

// runPodChild runs fsGroupPodChild as cred on the store dir, doing what
// mode says, and returns its results.
func runPodChild(t *testing.T, bin string, cred *syscall.Credential, dir, mode string, env ...string) map[string]opResult {
	t.Helper()
	out := runAs(t, cred, bin, "TestTrustFSGroup", "pod", append(env, hostileDirEnv+"="+dir, fsGroupModeEnv+"="+mode)...)
	t.Logf("uid %d in %s (%s):\n%s", cred.Uid, dir, mode, out)
	return childResults(t, out)
}

// fsGroupModeEnv lists what fsGroupPodChild does, comma-separated:
// "submit" a job, "run" every job it can claim, "regroup" the store,
// "check" the trust of the stores fsGroupCheckEnv lists.

const fsGroupModeEnv = "FILESTORE_FSGROUP_MODE"

// fsGroupCheckEnv lists the stores the "check" of fsGroupPodChild opens,
// separated by os.PathListSeparator.
const fsGroupCheckEnv = "FILESTORE_FSGROUP_CHECK"

// fsGroupPodChild opens the store with GroupAccess and reports its trust
// and the IDs it lists; then, as fsGroupModeEnv says, submits a job
// ("submit", its ID), regroups it, claims and completes every job it can
// ("run", the IDs it ran, or the first error), and checks other stores.
func fsGroupPodChild(t *testing.T) {
	ctx := t.Context()
	dir := os.Getenv(hostileDirEnv)
	mode := strings.Split(os.Getenv(fsGroupModeEnv), ",")
	s, err := Open(ctx, dir, &Options{NoSync: true, GroupAccess: true})
	report("open", err, "")
	if err != nil {
		return
	}
	defer s.Close()
	report("trust", s.CheckTrust(), "")
	page, err := s.List(ctx, jobstore.ListOptions{})
	var ids []string
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	report("list", err, strings.Join(ids, ","))
	if slices.Contains(mode, "submit") {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "run"})
		report("submit", err, j.ID)
	}
	if slices.Contains(mode, "regroup") {
		require.NoError(t, s.Close())
		require.NoError(t, regroup(dir))
	}
	if slices.Contains(mode, "run") {
		ran, err := runAll(ctx, s)
		report("run", err, ran)
	}
	if slices.Contains(mode, "check") {
		for _, dir := range filepath.SplitList(os.Getenv(fsGroupCheckEnv)) {
			checkStore(ctx, dir)
		}
	}
}

// runAll claims and completes every job it can in s and returns the IDs
// it ran and the first error other than that no job is left.
func runAll(ctx context.Context, s *Store) (string, error) {
	var ran []string
	for {
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "pod-" + strconv.Itoa(os.Geteuid())})
		if errors.Is(err, jobstore.ErrNoJob) {
			return strings.Join(ran, ","), nil
		}
		if err == nil {
			_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		}
		if err != nil {
			return strings.Join(ran, ","), err
		}
		ran = append(ran, c.ID)
	}
}

// checkStore opens the store dir with GroupAccess and reports "open dir",
// "trust dir" and "claim dir" (the claim of one job, never completed).
func checkStore(ctx context.Context, dir string) {
	s, err := Open(ctx, dir, &Options{NoSync: true, GroupAccess: true})
	report("open "+dir, err, "")
	if err != nil {
		return
	}
	defer s.Close()
	report("trust "+dir, s.CheckTrust(), "")
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "pod-" + strconv.Itoa(os.Geteuid())})
	report("claim "+dir, err, c.ID)
}

// regroup makes the store dir look like a store of the group of the
// directory holding it, as a process outside the group can when that
// directory is setgid and writable by it: it makes the store again in
// that directory, where every new directory takes its group (and no
// chgrp, which needs membership), links the files in, and renames it into
// place. The directories are 0770, the files 0644.
func regroup(dir string) error {
	again := filepath.Join(filepath.Dir(dir), ".regrouped")
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		to := filepath.Join(again, rel)
		if d.IsDir() {
			// Not chmod yet: from a non-member it clears the setgid
			// bit that passes the group on.
			dirs = append(dirs, to)
			return os.Mkdir(to, 0o700)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			return err
		}
		return os.Link(p, to)
	})
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o770); err != nil { // not subject to the umask
			return err
		}
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		return err
	}
	return os.Rename(again, dir)
}

// chmodTree sets the mode of dir and every directory in it to dirMode,
// and that of every other file in it to fileMode unless it is 0.
func chmodTree(dir string, dirMode, fileMode os.FileMode) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return os.Chmod(p, dirMode)
		case fileMode != 0:
			return os.Chmod(p, fileMode)
		}
		return nil
	})
}
