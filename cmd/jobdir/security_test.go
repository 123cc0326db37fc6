package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/testproc"
)

// dialChild is a child process of the test binary (internal/testproc)
// that connects to the Unix socket at args[0] and prints "connected" or
// the error.
func dialChild(args []string) int {
	c, err := net.Dial("unix", args[0])
	if err != nil {
		fmt.Println("dial:", err)
		return 0
	}
	_ = c.Close()
	fmt.Println("connected")
	return 0
}

// foreignBase returns a directory every user can enter, holding a copy of
// the jobdir binary and of this test binary they can run. It skips the
// test unless running as root.
func foreignBase(t *testing.T) (base, bin, testBin string) {
	t.Helper()
	base, testBin = testproc.Unprivileged(t)
	data, err := os.ReadFile(jobdirBin)
	require.NoError(t, err)
	bin = filepath.Join(base, "jobdir")
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	return base, bin, testBin
}

// runAs runs bin with args as user and group uid, in wd, and returns what
// it did. It skips the test if the system does not let it switch users.
func runAs(t *testing.T, uid uint32, wd, bin string, env []string, args ...string) result {
	t.Helper()
	return runAsCred(t, &syscall.Credential{Uid: uid, Gid: uid}, wd, bin, env, args...)
}

// runAsCred is runAs with the user, group and supplementary groups of
// cred.
func runAsCred(t *testing.T, cred *syscall.Credential, wd, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), liveness)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = wd
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "JOBDIR_TOKEN="}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Skipf("cannot run a command as uid %d: %v", cred.Uid, err)
	}
	return r
}

// TestWorkRefusesAStoreOthersCanWrite is the first attack of issue 12,
// with real users: mallory makes a store in a shared directory, submits a
// program and opens the store to everyone; victim runs "jobdir work"
// there. The worker refuses, naming the directory, its owner and its
// mode, and the program never runs. victim can still read the store.
func TestWorkRefusesAStoreOthersCanWrite(t *testing.T) {
	const mallory, victim = 65533, 65534
	base, bin, _ := foreignBase(t)
	shared := filepath.Join(base, "shared")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, os.ModeSticky|0o777)) // like /tmp
	store := filepath.Join(shared, ".jobdir")
	owned := filepath.Join(shared, "owned")

	r := runAs(t, mallory, shared, bin, nil, "--dir", store, "submit", "--", "sh", "-c", "id > "+owned)
	require.Equal(t, 0, r.code, "%s", r)
	id := strings.TrimSpace(r.stdout)
	require.NoError(t, filepath.Walk(store, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return os.Chmod(p, 0o777)
		}
		return os.Chmod(p, 0o666)
	}))

	r = runAs(t, victim, shared, bin, nil, "--dir", store, "work", "--exit-when-idle")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "refusing to run jobs from "+store)
	require.Contains(t, r.stderr, "owner 65533")
	require.Contains(t, r.stderr, "mode drwxrwxrwx")
	require.Contains(t, r.stderr, "chmod -R go-w "+store, "it says what to do")
	require.NoFileExists(t, owned, "mallory's program ran as victim")

	for _, args := range [][]string{{"serve", "--work", "1", "--addr", "127.0.0.1:0", "--insecure-no-auth"}} {
		r = runAs(t, victim, shared, bin, nil, append([]string{"--dir", store}, args...)...)
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "refusing to run jobs from "+store)
	}
	r = runAs(t, victim, shared, bin, nil, "--dir", store, "list")
	require.Equal(t, 0, r.code, "reading a foreign store is allowed: %s", r)
	require.Contains(t, r.stdout, id)
	require.Contains(t, r.stdout, "queued")
}

// TestWorkTrustsOnlyPrivateStores: work and serve --work refuse a store
// writable by its group unless --group-access is given, and one writable
// by all in any case; reading commands and serve without --work do not
// care.
func TestWorkTrustsOnlyPrivateStores(t *testing.T) {
	dir := newStoreDir(t)
	t.Chdir(t.TempDir())
	id := submit(t, dir, "--", "true")
	require.NoError(t, os.Chmod(dir, 0o770))
	if os.Geteuid() == 0 {
		// Root's group is its private group; give the store a group root
		// is not in.
		require.NoError(t, os.Chown(dir, 0, 65534))
	}

	r := jd(t, dir, "work", "--exit-when-idle")
	if r.code == 0 {
		t.Skip("this user's primary group is its private group: a store writable by it is private")
	}
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "writable by its group")
	require.Contains(t, r.stderr, "pass --group-access")
	r = jd(t, dir, "serve", "--work", "1", "--addr", "127.0.0.1:0", "--insecure-no-auth")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "refusing to run jobs from")
	if os.Geteuid() == 0 {
		r = jd(t, dir, "--group-access", "work", "--exit-when-idle")
		require.Equal(t, exitError, r.code, "%s", r)
		require.Contains(t, r.stderr, "writable by a group you are not a member of")
	} else {
		jdOK(t, dir, "--group-access", "work", "--exit-when-idle")
		require.Contains(t, jdOK(t, dir, "get", id).stdout, "succeeded")
	}

	require.NoError(t, os.Chmod(dir, 0o777))
	r = jd(t, dir, "--group-access", "work", "--exit-when-idle")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "writable by every user")
	require.Contains(t, jdOK(t, dir, "list").stdout, id, "reading needs no trust")
}

// TestWorkGroupAccessFSGroup is the pod securityContext docs/operations.md
// shows: a volume of the fsGroup (mode 2775, its owner another UID), and
// pods of different UIDs (runAsUser, runAsGroup) that have the fsGroup as
// a supplementary group, none of them in /etc/passwd or /etc/group. With
// --group-access, pod B's worker runs the program pod A submitted, as pod
// B, and pod A's worker the one pod B submitted, each writing its job's
// log in the store; without it, the worker refuses and says to pass it.
func TestWorkGroupAccessFSGroup(t *testing.T) {
	const fsGroup, podA, podB, volumeOwner = 47110, 47111, 47112, 47113
	for _, id := range []int{podA, podB, volumeOwner} {
		if u, err := user.LookupId(strconv.Itoa(id)); err == nil {
			t.Skipf("uid %d is user %s here; the test needs IDs no user database names", id, u.Username)
		}
	}
	if g, err := user.LookupGroupId(strconv.Itoa(fsGroup)); err == nil {
		t.Skipf("gid %d is group %s here; the test needs IDs no user database names", fsGroup, g.Name)
	}
	base, bin, _ := foreignBase(t)
	vol := filepath.Join(base, "data")
	require.NoError(t, os.Mkdir(vol, 0o700))
	require.NoError(t, os.Chown(vol, volumeOwner, fsGroup))
	require.NoError(t, os.Chmod(vol, os.ModeSetgid|0o775))
	store := filepath.Join(vol, "jobdir")
	pod := func(uid uint32, args ...string) result {
		t.Helper()
		cred := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{fsGroup}}
		return runAsCred(t, cred, vol, bin, nil, append([]string{"--dir", store}, args...)...)
	}
	submit := func(uid uint32, out string) string {
		t.Helper()
		r := pod(uid, "--group-access", "submit", "--", "sh", "-c", "id -u > "+out+"; echo ran")
		require.Equal(t, 0, r.code, "%s", r)
		return strings.TrimSpace(r.stdout)
	}
	ranAs := func(out string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(vol, out))
		require.NoError(t, err)
		return strings.TrimSpace(string(data))
	}

	jobA := submit(podA, "a")
	r := pod(podB, "work", "--exit-when-idle")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "refusing to run jobs from "+store)
	require.Contains(t, r.stderr, "pass --group-access")
	require.NoFileExists(t, filepath.Join(vol, "a"))

	r = pod(podB, "--group-access", "work", "--exit-when-idle")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, strconv.Itoa(podB), ranAs("a"), "pod B ran pod A's job")
	jobB := submit(podB, "b")
	r = pod(podA, "--group-access", "work", "--exit-when-idle")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, strconv.Itoa(podA), ranAs("b"), "pod A ran pod B's job")
	for _, id := range []string{jobA, jobB} {
		for _, uid := range []uint32{podA, podB} {
			r = pod(uid, "--group-access", "logs", id)
			require.Equal(t, 0, r.code, "%s", r)
			require.Contains(t, r.stdout, "ran", "uid %d reads the log of %s", uid, id)
		}
	}
}

// TestExecKindIsExplicitByDefault: the kind httpapi refuses through "*"
// when a program passes no ExplicitKinds is the kind whose jobs run
// programs, so a Go program that serves the API and runs execjob without
// saying so is as safe as jobdir serve, which passes execjob.Kind itself.
func TestExecKindIsExplicitByDefault(t *testing.T) {
	require.Equal(t, execjob.Kind, httpapi.ExecKind)
}

// TestServeNoAuthExec: serve refuses to run exec jobs for anyone without
// a token on a TCP port, which every local user can reach; a Unix socket
// or the loud flag allow it, with a warning naming the risk.
func TestServeNoAuthExec(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	r := jd(t, dir, "serve", "--insecure-no-auth", "--allow-kind", "exec", "--addr", "127.0.0.1:0")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "would let every user of this machine")
	require.Contains(t, r.stderr, "--addr unix:PATH")
	require.NotContains(t, r.stdout, "listening")

	r = jd(t, dir, "serve", "--insecure-any-local-user-runs-programs", "--token-file", "/nonexistent")
	require.NotEqual(t, 0, r.code)
	t.Setenv("JOBDIR_TOKEN", "a-good-token-0123456789")
	r = jd(t, dir, "serve", "--insecure-any-local-user-runs-programs", "--allow-kind", "exec")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "only for --insecure-no-auth with --allow-kind exec")

	for _, tc := range []struct {
		args []string
		warn string
	}{
		{[]string{"--insecure-no-auth", "--allow-kind", "exec", "--insecure-any-local-user-runs-programs"}, "warning: serving exec jobs without authentication: every user of this machine"},
		{[]string{"--insecure-no-auth"}, "warning: serving without authentication: every user of this machine"},
	} {
		cmd := jobdirCmd(dir, wd, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		p := start(t, cmd)
		line := firstLine(t, p)
		require.True(t, strings.HasPrefix(line, "listening on http://127.0.0.1:"), line)
		p.stop(t)
		require.Contains(t, p.errb.String(), tc.warn)
	}
}

// firstLine waits for the first line p prints on stdout.
func firstLine(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for !strings.Contains(p.out.String(), "\n") {
		require.True(t, time.Now().Before(deadline) && !p.exited(), "no line: %s", p.errb.String())
		time.Sleep(10 * time.Millisecond)
	}
	line, _, _ := strings.Cut(p.out.String(), "\n")
	return line
}

// unixClient returns an HTTP client that reaches the server on the Unix
// socket at path.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// TestServeUnixSocket: serve --addr unix:PATH listens on a socket of mode
// 0600 that another user cannot connect to, serves exec jobs without a
// token there (with a warning), refuses a path a live server or another
// file holds, replaces a stale socket, and removes its socket when it
// stops.
func TestServeUnixSocket(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	base, testBin := t.TempDir(), ""
	if os.Geteuid() == 0 {
		// A directory another user can reach, so that only the socket's
		// mode keeps that user out.
		base, _, testBin = foreignBase(t)
	}
	sock := filepath.Join(base, "jobdir.sock")
	serve := func() *proc {
		return start(t, jobdirCmd(dir, wd, "serve", "--addr", "unix:"+sock, "--insecure-no-auth", "--allow-kind", "exec", "--work", "1", "-q"))
	}
	p := serve()
	require.Equal(t, "listening on unix:"+sock, firstLine(t, p))
	fi, err := os.Lstat(sock)
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket|0o600, fi.Mode())
	require.Contains(t, p.errb.String(), "warning: serving exec jobs without authentication: every process that can open the socket "+sock)

	client := unixClient(sock)
	body := fmt.Sprintf(`{"kind":"exec","payload":{"argv":["sh","-c","echo hi > out"],"dir":%q}}`, wd)
	resp, err := client.Post("http://localhost/v1/jobs", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", data)
	waitForFile(t, filepath.Join(wd, "out"))

	if os.Geteuid() == 0 {
		out, err := testproc.Run(t.Context(), t, "dial", &testproc.Options{
			Args: []string{sock}, Exe: testBin, Dir: base, BareEnv: true, Cred: testproc.Nobody()})
		require.NoError(t, err, out)
		require.Contains(t, out, "permission denied", "another user connected: %s", out)
	}

	r := jd(t, dir, "serve", "--addr", "unix:"+sock, "--insecure-no-auth")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "another server listens on "+sock)

	p.stop(t)
	require.NoFileExists(t, sock, "the socket outlived its server")

	// A stale socket is replaced; any other file is kept.
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	p = serve()
	require.Equal(t, "listening on unix:"+sock, firstLine(t, p))
	p.stop(t)
	require.NoError(t, os.WriteFile(sock, []byte("keep me"), 0o600))
	r = jd(t, dir, "serve", "--addr", "unix:"+sock, "--insecure-no-auth")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "exists and is not a socket")
	data, err = os.ReadFile(sock)
	require.NoError(t, err)
	require.Equal(t, "keep me", string(data))
}

// TestServeTokenFileOfOwnGroup: with --group-access, serve takes a token
// file that one of its groups may read only if the file is root's, as a
// Kubernetes Secret volume's is: its own file readable by one of its
// groups (a group shared by every user of the machine, say) is refused,
// for it could make that one private.
func TestServeTokenFileOfOwnGroup(t *testing.T) {
	const uid, shared = 47121, 47122
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		t.Skipf("uid %d is user %s here; the test needs an ID no user database names", uid, u.Username)
	}
	base, bin, _ := foreignBase(t)
	wd := filepath.Join(base, "wd")
	require.NoError(t, os.Mkdir(wd, 0o700))
	require.NoError(t, os.Chown(wd, uid, uid))
	token := func(owner int) string {
		p := filepath.Join(wd, "token-"+strconv.Itoa(owner))
		require.NoError(t, os.WriteFile(p, []byte("a-good-token-0123456789\n"), 0o440))
		require.NoError(t, os.Chown(p, owner, shared))
		require.NoError(t, os.Chmod(p, 0o440))
		return p
	}
	serve := func(p string) result {
		t.Helper()
		cred := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{shared}}
		return runAsCred(t, cred, wd, bin, nil, "--dir", filepath.Join(wd, "store"), "--group-access",
			"serve", "--addr", "unix:", "--token-file", p)
	}
	r := serve(token(0))
	require.Equal(t, exitUsage, r.code, "root's file in one of its groups: past the token check, to the address check\n%s", r)
	require.Contains(t, r.stderr, "--addr unix:PATH needs a PATH")
	r = serve(token(uid))
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "may be read or written by other users (mode -r--r-----)")
}
