package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BouncerOptions configures the PgBouncer that Bouncer starts.
type BouncerOptions struct {
	// PoolMode is PgBouncer's pool_mode: "session", "transaction" or
	// "statement". Empty means "session".
	PoolMode string
	// PoolSize is default_pool_size: how many server connections
	// PgBouncer opens to PostgreSQL at most for the test's user and
	// database. Zero means 2, so that more clients than that share them.
	PoolSize int
}

// bouncerPaths are where Debian and a build from source put pgbouncer,
// for a PATH without sbin.
var bouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"}

var (
	bouncerLoudOnce sync.Once
	// bouncerLoud is where the one loud line about a missing pgbouncer goes.
	bouncerLoud io.Writer = os.Stderr
)

// bouncerExe returns the path of the pgbouncer program, or skips t (outside
// CI) or fails it (CI=true) if it is not installed.
func bouncerExe(t testing.TB) string {
	t.Helper()
	exe, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range bouncerPaths {
			if fi, serr := os.Stat(p); serr == nil && !fi.IsDir() {
				return p
			}
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgbouncer is not installed, and CI=true: %v", err)
		}
		bouncerLoudOnce.Do(func() {
			fmt.Fprintf(bouncerLoud, "\n*** SKIPPING the PgBouncer tests: pgbouncer is not installed (apt-get install -y pgbouncer) ***\n\n")
		})
		t.Skip("pgbouncer is not installed")
	}
	return exe
}

// Bouncer starts a PgBouncer process of the test's own in front of the
// test server (see DSN), in the pool mode o gives, and returns the DSN of a
// connection through it to the test server's database, as the test
// server's user. PgBouncer listens on 127.0.0.1 at a free port, trusts its
// clients, and runs as the user nobody when the test runs as root (it
// refuses to run as root). It is stopped when t ends. If pgbouncer is not
// installed, Bouncer skips t, with one loud line on standard error,
// outside CI, and fails it with CI=true.
func Bouncer(t testing.TB, o BouncerOptions) string {
	t.Helper()
	Require(t)
	exe := bouncerExe(t)
	if o.PoolMode == "" {
		o.PoolMode = "session"
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 2
	}
	backend, err := pgconn.ParseConfig(DSN())
	if err != nil {
		t.Fatalf("pgbouncer: parse %s: %v", EnvDSN, err)
	}
	// A directory every user can read: PgBouncer runs as nobody, and reads
	// its files again on a reload.
	dir, err := os.MkdirTemp("", "jobdir-pgbouncer-")
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	var last error
	for range 5 { // another process may take the free port first
		dsn, err := startBouncer(t, exe, dir, backend, o)
		if err == nil {
			return dsn
		}
		last = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("pgbouncer: %v", last)
	return ""
}

var errPortTaken = errors.New("the port was taken")

// startBouncer writes the configuration for a free port into dir, starts
// PgBouncer, and waits until it answers.
func startBouncer(t testing.TB, exe, dir string, backend *pgconn.Config, o BouncerOptions) (string, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return "", err
	}
	db := backend.Database
	users := filepath.Join(dir, "users.txt")
	// The password, if any, is the one PgBouncer logs in to the server with.
	userLine := fmt.Sprintf("%s %s\n", quoteBouncer(backend.User), quoteBouncer(backend.Password))
	if err := os.WriteFile(users, []byte(userLine), 0o644); err != nil {
		return "", err
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
%s = host=%s port=%d dbname=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
`, db, backend.Host, backend.Port, db, port, users, o.PoolMode, o.PoolSize)
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		return "", err
	}
	args := []string{ini}
	if os.Geteuid() == 0 {
		args = []string{"-u", "nobody", ini}
	}
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", exe, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // immediate shutdown
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}

	dsn := fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s sslmode=disable", port, quoteDSN(db), quoteDSN(backend.User))
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			log := out.String()
			if strings.Contains(log, "Address already in use") {
				return "", fmt.Errorf("%w: %s", errPortTaken, log)
			}
			return "", fmt.Errorf("pgbouncer exited at start: %s", log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ping(ctx, dsn)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("pgbouncer does not answer at %s: %w; its log: %s", dsn, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("pgbouncer's log:\n%s", out.String())
		}
	})
	return dsn, nil
}

// ping connects to dsn and runs a statement.
func ping(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// quoteBouncer quotes s for PgBouncer's auth file.
func quoteBouncer(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteDSN quotes s as a value of a key=value DSN.
func quoteDSN(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// syncBuffer is a bytes.Buffer that a process's output may be written to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
