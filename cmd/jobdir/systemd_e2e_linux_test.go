package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// e2eTarget is the unit the container boots into: the units under test,
// and through their dependencies the basic system, but no other service
// of the host's (its database, say).
const e2eTarget = `[Unit]
Description=jobdir units under test
Wants=jobdir-work@1.service jobdir-work@2.service jobdir-serve.service jobdir-prune.timer
After=jobdir-work@1.service jobdir-work@2.service jobdir-serve.service
`

// e2eToken is the bearer token of the server under test.
const e2eToken = "e2e-systemd-token-0123456789abcdef"

// nspawnBoot is systemd booted in a container by systemd-nspawn.
type nspawnBoot struct {
	t    *testing.T
	pid1 int // the container's PID 1, as this process sees it
}

// bootUnits boots systemd with the units of deploy/systemd installed as
// their README says, in a container whose root is an overlay of the
// host's (so nothing it writes reaches the host) with a network of its
// own, and returns once the workers and the server run.
func bootUnits(t *testing.T) *nspawnBoot {
	t.Helper()
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		t.Skip("SKIPPED: NO SYSTEMD-NSPAWN (Debian: apt-get install systemd-container)")
	}
	for _, p := range []string{"/lib/systemd/systemd", "/usr/bin/curl"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("SKIPPED: the container boots the host's %s, which is missing", p)
		}
	}
	base := t.TempDir()
	layers, root, state := filepath.Join(base, "layers"), filepath.Join(base, "layers", "root"), filepath.Join(base, "state")
	require.NoError(t, os.MkdirAll(layers, 0o700))
	require.NoError(t, os.Mkdir(state, 0o755))
	// The upper layer on a file system of its own: overlayfs refuses one
	// inside its lower layer, here the host's root.
	mount(t, "tmpfs", "tmpfs", layers, "mode=0700")
	for _, d := range []string{"upper", "work", "root"} {
		require.NoError(t, os.Mkdir(filepath.Join(layers, d), 0o755))
	}
	mount(t, "overlay", "overlay", root, "lowerdir=/,upperdir="+filepath.Join(layers, "upper")+",workdir="+filepath.Join(layers, "work"))

	install := func(src, dst string, mode os.FileMode) {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		if strings.HasSuffix(src, ".service") {
			require.Contains(t, string(b), unitBinary)
		}
		dst = filepath.Join(root, dst)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, b, mode))
		require.NoError(t, os.Chmod(dst, mode))
	}
	for name := range unitFiles {
		install(filepath.Join(unitsDir, name), "/etc/systemd/system/"+name, 0o644)
	}
	install(filepath.Join(unitsDir, "jobdir.conf"), "/etc/sysusers.d/jobdir.conf", 0o644)
	install(jobdirBin, unitBinary, 0o755)
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/systemd/system/jobdir-e2e.target"), []byte(e2eTarget), 0o644))
	if runtime.NumCPU() < 2 {
		// The stop runs three jobs at once on two workers, each of which
		// runs as many as there are CPUs by default: a drop-in, as the
		// README shows, gives a machine of one CPU two slots per worker.
		dropIn := "[Service]\nExecStart=\nExecStart=" + unitBinary + " work --concurrency 2\n"
		install := filepath.Join(root, "etc/systemd/system/jobdir-work@.service.d")
		require.NoError(t, os.MkdirAll(install, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(install, "concurrency.conf"), []byte(dropIn), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/jobdir"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/jobdir/token"), []byte(e2eToken+"\n"), 0o600))
	// A container of the host's root would share its machine ID.
	_ = os.Remove(filepath.Join(root, "etc/machine-id"))

	console, err := os.Create(filepath.Join(base, "console.log"))
	require.NoError(t, err)
	defer console.Close()
	cmd := exec.Command(nspawn, "--directory="+root, "--register=no", "--keep-unit", "--private-network",
		"--link-journal=no", "--console=pipe", "--machine=jobdir-e2e",
		// The store on the host's file system, not on the overlay.
		"--bind="+state+":/var/lib/jobdir",
		"--boot", "--", "systemd.unit=jobdir-e2e.target")
	cmd.Stdout, cmd.Stderr = console, console
	started := time.Now()
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// SIGTERM asks nspawn to shut the container down cleanly.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(console.Name())
			t.Logf("container console:\n%s", b)
		}
	})

	b := &nspawnBoot{t: t}
	deadline := time.Now().Add(60 * time.Second)
	for b.pid1 == 0 {
		select {
		case err := <-done:
			out, _ := os.ReadFile(console.Name())
			t.Fatalf("systemd-nspawn exited: %v\n%s", err, out)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the container's init did not start")
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if f := strings.Fields(string(children)); len(f) > 0 {
			b.pid1, _ = strconv.Atoi(f[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		out, err := b.try("systemctl", "is-active", "jobdir-work@1", "jobdir-work@2", "jobdir-serve", "jobdir-prune.timer")
		if err == nil {
			break
		}
		if strings.Contains(out, "failed") || time.Now().After(deadline) {
			st, _ := b.try("systemctl", "--no-pager", "status", "jobdir-work@1", "jobdir-work@2", "jobdir-serve")
			t.Fatalf("the units did not start: %s\n%s", out, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		if out, err := b.try("curl", "-sf", "http://127.0.0.1:8080/healthz"); err == nil {
			require.Contains(t, out, `"ok"`)
			t.Logf("the workers and the server run, /healthz answers: %s after systemd-nspawn started", time.Since(started).Round(100*time.Millisecond))
			break
		}
		require.True(t, time.Now().Before(deadline), "the server does not answer /healthz")
		time.Sleep(100 * time.Millisecond)
	}
	return b
}

// mount mounts a file system of fstype at dir until the test ends.
func mount(t *testing.T, source, fstype, dir, data string) {
	t.Helper()
	require.NoError(t, syscall.Mount(source, dir, fstype, 0, data), "mount %s at %s", fstype, dir)
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// try runs argv in the container, in every namespace of its init.
func (b *nspawnBoot) try(argv ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(b.pid1), "-a", "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

// run runs argv in the container and returns its output; it must succeed.
func (b *nspawnBoot) run(argv ...string) string {
	b.t.Helper()
	out, err := b.try(argv...)
	require.NoError(b.t, err, "%s: %s", strings.Join(argv, " "), out)
	return out
}

// api calls the server's HTTP API in the container with the token.
func (b *nspawnBoot) api(method, path, body string, v any) string {
	b.t.Helper()
	args := []string{"curl", "-sS", "-X", method, "-H", "Authorization: Bearer " + e2eToken, "http://127.0.0.1:8080" + path}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "-d", body)
	}
	out := b.run(args...)
	if v != nil {
		require.NoError(b.t, json.Unmarshal([]byte(out), v), "%s %s: %s", method, path, out)
	}
	return out
}

// e2eJob is what the test reads of a job from the HTTP API.
type e2eJob struct {
	ID          string `json:"id"`
	State       string `json:"state"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	History     []struct {
		End   string `json:"end"`
		Error string `json:"error"`
	} `json:"history"`
}

// submit submits an exec job of argv and returns its ID.
func (b *nspawnBoot) submit(argv ...string) string {
	b.t.Helper()
	body, err := json.Marshal(map[string]any{"kind": "exec", "payload": map[string]any{"argv": argv, "dir": "/"}})
	require.NoError(b.t, err)
	var j e2eJob
	b.api("POST", "/v1/jobs", string(body), &j)
	require.NotEmpty(b.t, j.ID)
	return j.ID
}

// job returns the job id.
func (b *nspawnBoot) job(id string) e2eJob {
	b.t.Helper()
	var j e2eJob
	b.api("GET", "/v1/jobs/"+id, "", &j)
	return j
}

// waitState waits until job id is in state.
func (b *nspawnBoot) waitState(id, state string, within time.Duration) e2eJob {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		j := b.job(id)
		if j.State == state {
			return j
		}
		require.True(b.t, time.Now().Before(deadline), "job %s is %s after %s, not %s", id, j.State, within, state)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2ESystemdUnits boots systemd in a container with the units of
// deploy/systemd, as their README installs them, and checks what they
// promise: two workers and the server start as the user jobdir (made by
// systemd-sysusers from jobdir.conf) on one store, the server reads its
// token from a systemd credential, jobs submitted over HTTP run as jobdir
// in a cgroup of their own under their worker's delegated cgroup with the
// hardening in force, and systemctl stop in the middle of jobs lets a job
// that ends within --shutdown-grace succeed, stops the others (SIGKILL
// after --kill-grace for one that ignores SIGTERM) and queues them again
// with the attempt not counted, within TimeoutStopSec. Then the prune
// service runs. It needs root and systemd-nspawn, and runs only with
// JOBDIR_E2E_SYSTEMD=1 (make e2e-systemd).
func TestE2ESystemdUnits(t *testing.T) {
	if os.Getenv("JOBDIR_E2E_SYSTEMD") == "" {
		t.Skip("boots systemd in a container: run with JOBDIR_E2E_SYSTEMD=1 (make e2e-systemd)")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: systemd-nspawn needs root")
	}
	b := bootUnits(t)

	// The user and the credential.
	require.Contains(t, b.run("id", "jobdir"), "(jobdir)")
	cred := b.run("stat", "-c", "%a %U", "/run/credentials/jobdir-serve.service/token")
	t.Logf("the server's credential: mode and owner %s", strings.TrimSpace(cred))

	// Jobs over HTTP, run by both workers.
	script := `echo "user=$(id -un) home=$HOME umask=$(umask)"; grep '^0::' /proc/self/cgroup; ls /home | wc -l; touch /usr/x 2>/dev/null || echo "/usr read-only"; sleep 0.5`
	var ids []string
	for range 4 {
		ids = append(ids, b.submit("sh", "-c", script))
	}
	for _, id := range ids {
		b.waitState(id, "succeeded", 30*time.Second)
		log := b.api("GET", "/v1/jobs/"+id+"/log?raw=1", "", nil)
		require.Contains(t, log, "user=jobdir home=/var/lib/jobdir umask=0077", "ProtectHome=, UMask=")
		require.Regexp(t, `0::/system\.slice/system-jobdir\\x2dwork\.slice/jobdir-work@[12]\.service/jobdir-`+id+`-1-`, log, "a cgroup of its own under its worker's")
		require.Contains(t, log, "0\n/usr read-only", "/home is empty (ProtectHome=) and /usr read-only (ProtectSystem=)")
	}

	// systemctl stop in the middle of jobs.
	stopped := b.submit("sleep", "60")
	stubborn := b.submit("sh", "-c", `trap "echo got SIGTERM, going on" TERM; while :; do sleep 0.2; done`)
	short := b.submit("sh", "-c", "sleep 3; echo done within the grace")
	for _, id := range []string{stopped, stubborn, short} {
		b.waitState(id, "running", 30*time.Second)
	}
	start := time.Now()
	b.run("systemctl", "stop", "jobdir-work@1", "jobdir-work@2")
	took := time.Since(start)
	t.Logf("systemctl stop of both workers took %s", took.Round(100*time.Millisecond))
	require.GreaterOrEqual(t, took, 14*time.Second, "--shutdown-grace 10s and --kill-grace 5s for the job that ignores SIGTERM")
	require.Less(t, took, 30*time.Second, "within TimeoutStopSec=")
	require.Equal(t, "succeeded", b.job(short).State, "a job that ends within the grace finishes")
	for _, id := range []string{stopped, stubborn} {
		j := b.job(id)
		require.Equal(t, "queued", j.State, "%+v", j)
		require.NotEmpty(t, j.History)
		require.Equal(t, "interrupted", j.History[len(j.History)-1].End, "%+v", j)
	}
	require.Contains(t, b.job(stubborn).History[0].Error, "SIGKILL")
	require.Contains(t, b.api("GET", "/v1/jobs/"+stubborn+"/log?raw=1", "", nil), "got SIGTERM, going on")
	st := b.run("journalctl", "--no-pager", "-u", "jobdir-work@1", "-u", "jobdir-work@2")
	require.Contains(t, st, "queued again, the attempt not counted")

	// Started again, the workers run the stopped jobs again.
	b.run("systemctl", "start", "jobdir-work@1", "jobdir-work@2")
	j := b.waitState(stopped, "running", 30*time.Second)
	require.Equal(t, 2, j.Attempt, "%+v", j)
	require.Equal(t, 4, j.MaxAttempts, "the interrupted attempt did not count: it gave its attempt back")

	// The prune service, as its timer starts it.
	b.run("systemctl", "start", "jobdir-prune.service")
	require.Contains(t, b.run("journalctl", "--no-pager", "-u", "jobdir-prune.service"), "pruned 0 jobs")
}
