package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
	"github.com/jobdir/jobdir/runner/otelrunner"
	"github.com/jobdir/jobdir/webui"
)

// httpShutdownTimeout bounds how long serve waits for requests in flight
// when it stops.
const httpShutdownTimeout = 10 * time.Second

func (a *app) serveCommand() *cobra.Command {
	var (
		wf           workerFlags
		addr         string
		workers      int
		tokenFile    string
		noAuth       bool
		anyLocalUser bool
		allowKinds   []string
		maxRequests  int
		maxWaits     int
		verbose      bool
		secureCookie bool
	)
	cmd := &cobra.Command{
		Use:         "serve",
		Annotations: map[string]string{createsStore: "yes"},
		Short:       "Serve the HTTP API on the store",
		Long: `Serve the HTTP API (see docs/http-api.md) on the store, and with --work N run
N exec jobs at once in the same process. Several servers may serve one store
directory: each answers for every job, whichever server it was submitted to.

It prints "listening on http://ADDR" with the real address, so --addr
127.0.0.1:0 picks a free port that scripts can read. With --addr unix:PATH it
listens on a Unix socket instead, created 0600 so that only this user (and
root) can connect, and prints "listening on unix:PATH".

Every request except GET /healthz needs "Authorization: Bearer TOKEN". The
tokens come from --token-file (one a line; the file must be private to this
user, mode 0600 or 0400, or with --group-access also readable by one of this
user's groups, as a Kubernetes Secret with an fsGroup is; an ACL may let this
user read it, as systemd's LoadCredential= does; and at most 64 KiB)
or $JOBDIR_TOKEN; each must be at least 16 bytes. Without one, serve refuses
to start unless --insecure-no-auth is given. HTTP clients may submit jobs only of the kinds
--allow-kind lists; "exec" jobs run programs, so they are refused unless
--allow-kind exec is given: whoever holds a token can then run any program as
this user. Without authentication, exec is refused except on a Unix socket,
since any local user can reach a loopback port, unless
--insecure-any-local-user-runs-programs says that is meant. The default
address is on loopback.

With --work, the store must be private to this user (see "jobdir work").

At most --max-requests requests are served at once (and --max-waits wait
long-polls); past that the server answers 503 with Retry-After.

Jobs run by --work get the environment "jobdir work --help" describes: never
$JOBDIR_TOKEN. They run as this user, though, so they can read what this user
can, a --token-file included: to keep tokens from jobs, run the workers as
another user (jobdir work, on the same store). GET /v1/jobs/ID/log serves a
job's output from the store's logs/ directory, or, for a store in
PostgreSQL, from the database, whichever machine ran the job.

The dashboard, web pages for people, is at /ui/ (and / redirects there): sign
in with one of the tokens; with --insecure-no-auth it needs no sign-in and
says so in a banner. Behind a proxy that ends TLS, --secure-cookie keeps the
session cookie off plain HTTP. docs/ui.md describes it.

On SIGINT or SIGTERM it stops accepting requests, finishes the ones in
flight, stops its workers as jobdir work does, and exits; a second signal ends
it at once, as jobdir work. As PID 1 of a container it reaps every orphan
process handed to it.`,
		Example: `  JOBDIR_TOKEN=$(cat ~/.jobdir-token) jobdir serve
  jobdir serve --addr 127.0.0.1:0 --token-file /run/secrets/jobdir --work 4 --allow-kind exec
  jobdir serve --addr unix:$XDG_RUNTIME_DIR/jobdir.sock --insecure-no-auth --allow-kind exec --work 2
  curl --unix-socket $XDG_RUNTIME_DIR/jobdir.sock http://localhost/v1/stats
  jobdir serve --insecure-no-auth --allow-kind '*'   # local development only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if workers < 0 {
				return usagef("--work must not be negative")
			}
			if err := wf.checkQueues(); err != nil {
				return err
			}
			if maxRequests < 0 || maxWaits < 0 {
				return usagef("--max-requests and --max-waits must not be negative")
			}
			tokens, err := loadTokens(tokenFile, a.groupAccess)
			if err != nil {
				return err
			}
			if len(tokens) > 0 && noAuth {
				return usagef("--insecure-no-auth cannot be combined with a token (--token-file or $JOBDIR_TOKEN)")
			}
			if len(tokens) == 0 && !noAuth {
				return usagef("serve needs a bearer token: put it in a file and pass --token-file FILE, or set $JOBDIR_TOKEN; " +
					"or pass --insecure-no-auth to serve without authentication (local development only)")
			}
			socket, isUnix := strings.CutPrefix(addr, "unix:")
			allowExec := slices.Contains(allowKinds, execjob.Kind)
			if noAuth && allowExec && !isUnix && !anyLocalUser {
				return usagef("--insecure-no-auth with --allow-kind exec would let every user of this machine, and every program that can reach %s, run programs as you: "+
					"listen on a Unix socket only you can open (--addr unix:PATH), or use a token; "+
					"--insecure-any-local-user-runs-programs accepts the risk", addr)
			}
			if anyLocalUser && !(noAuth && allowExec) {
				return usagef("--insecure-any-local-user-runs-programs is only for --insecure-no-auth with --allow-kind exec")
			}
			ln, shown, err := listen(addr, socket, isUnix)
			if err != nil {
				return err
			}
			defer ln.Close()
			defer reapOrphans()()
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				if workers > 0 {
					if err := checkTrust(st); err != nil {
						return err
					}
				}
				warnings(a.logger(slog.LevelWarn), ln, shown, noAuth, allowExec)
				return a.serve(ctx, st, ln, shown, serveConfig{workers: workers, tokens: tokens, noAuth: noAuth, kinds: allowKinds,
					maxRequests: maxRequests, maxWaits: maxWaits, verbose: verbose, secureCookie: secureCookie, wf: &wf})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "listen on `ADDR`: HOST:PORT (port 0 picks a free one), or unix:PATH for a Unix socket")
	f.IntVar(&workers, "work", 0, "run `N` exec jobs at once in this process (0: none)")
	f.StringVar(&tokenFile, "token-file", "", "`FILE` holding the accepted bearer tokens, one a line (default $JOBDIR_TOKEN)")
	f.BoolVar(&noAuth, "insecure-no-auth", false, "serve without authentication")
	f.BoolVar(&anyLocalUser, "insecure-any-local-user-runs-programs", false,
		"with --insecure-no-auth and --allow-kind exec on a TCP address: accept that every local user can run programs as you")
	f.StringArrayVar(&allowKinds, "allow-kind", nil, "`KIND` HTTP clients may submit (repeatable; default: every kind but exec, which must be named)")
	f.IntVar(&maxRequests, "max-requests", httpapi.DefaultMaxConcurrent, "serve at most `N` requests at once (wait long-polls apart); past that, 503")
	f.IntVar(&maxWaits, "max-waits", httpapi.DefaultMaxWaits, "serve at most `N` wait long-polls at once; past that, 503")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every request on stderr (by default only warnings and server errors)")
	f.BoolVar(&secureCookie, "secure-cookie", false, "mark the dashboard's session cookie Secure, for a server behind a proxy that ends TLS")
	wf.register(cmd)
	return cmd
}

// warnings logs what serving without authentication exposes.
func warnings(log *slog.Logger, ln net.Listener, shown string, noAuth, exec bool) {
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn(fmt.Sprintf("serving on %s, which is not loopback; use TLS in front of it and keep the tokens secret", ln.Addr()))
	}
	if !noAuth {
		return
	}
	who := "every user of this machine, and every program that can reach " + shown + ","
	if _, ok := ln.Addr().(*net.UnixAddr); ok {
		who = "every process that can open the socket " + strings.TrimPrefix(shown, "unix:") + " (mode 0600: yours and root's)"
	}
	if exec {
		log.Warn(fmt.Sprintf("serving exec jobs without authentication: %s can run any program as %s", who, currentUser()))
		return
	}
	log.Warn(fmt.Sprintf("serving without authentication: %s can submit, read and cancel jobs", who))
}

// currentUser names this process's user for a person.
func currentUser() string {
	if u, err := user.Current(); err == nil {
		return "user " + u.Username
	}
	return fmt.Sprintf("uid %d", os.Geteuid())
}

type serveConfig struct {
	workers     int
	tokens      []string
	noAuth      bool
	kinds       []string
	maxRequests int
	maxWaits    int
	verbose     bool
	// secureCookie marks the dashboard's session cookie Secure.
	secureCookie bool
	wf           *workerFlags
}

func (a *app) serve(ctx context.Context, st *cliStore, ln net.Listener, shown string, cfg serveConfig) error {
	// No --allow-kind leaves httpapi's default: any kind but exec.
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelDebug
	}
	stopTracing, err := cfg.wf.startTracing(ctx, a.logger(slog.LevelInfo))
	if err != nil {
		return err
	}
	// Run at return, after the workers' and the requests' last spans.
	defer stopTracing()
	var submitMW []jobstore.SubmitMiddleware
	if cfg.wf.tracing != nil {
		submitMW = append(submitMW, otelrunner.SubmitMiddleware(cfg.wf.tracing))
	}
	// Exec jobs run programs: "*" does not allow them, only --allow-kind exec.
	srv, err := httpapi.New(st.Store, &httpapi.Options{Tokens: cfg.tokens, InsecureNoAuth: cfg.noAuth, AllowedKinds: cfg.kinds,
		ExplicitKinds: []string{execjob.Kind}, Validators: execValidators,
		MaxConcurrent: cfg.maxRequests, MaxWaits: cfg.maxWaits, Logger: a.logger(level), Logs: st.logs(),
		SubmitMiddleware: submitMW})
	if err != nil {
		return usagef("%v", err)
	}
	ui, err := webui.New(st.Store, &webui.Options{Tokens: cfg.tokens, InsecureNoAuth: cfg.noAuth, AllowedKinds: cfg.kinds,
		ExplicitKinds: []string{execjob.Kind}, Log: srv, SecureCookie: cfg.secureCookie, Logger: a.logger(level),
		Deleted: st.deleteLog})
	if err != nil {
		return usagef("%v", err)
	}
	handler := withDashboard(srv, ui)
	if cfg.wf.tracing != nil {
		handler = tracedRequests(handler)
	}
	hs := httpapi.NewHTTPServer(ln.Addr().String(), handler)
	fmt.Fprintf(a.stdout, "listening on %s\n", shown)

	var (
		wg      sync.WaitGroup
		runErr  error
		serveCh = make(chan error, 1)
	)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if cfg.workers > 0 {
		cfg.wf.groupAccess = a.groupAccess
		h, contained, err := cfg.wf.handler(st)
		if err != nil {
			return err
		}
		log := a.logger(slog.LevelInfo)
		if !cfg.wf.quiet {
			a.sayContainment(log, contained)
		}
		r := cfg.wf.newRunner(st, h, cfg.workers, log, a.logFormat == logJSON, srv, nil)
		srv.KnownKinds(r.Kinds()...)
		wg.Go(func() {
			runErr = r.Run(runCtx)
			if runErr != nil {
				// A worker that cannot go on takes the server down
				// with it rather than serving a store nobody works.
				serveCh <- fmt.Errorf("worker: %w", runErr)
			}
		})
	} else if !cfg.wf.noSchedules {
		// No workers here, but the schedules' ticks are fired all the
		// same, as by every other process of the store.
		log := a.logger(slog.LevelInfo)
		logs := &logPruner{st: st}
		wg.Go(func() {
			err := runner.FireSchedules(runCtx, st.Store, &runner.Options{Logger: log, Metrics: srv, OnEvent: func(ev runner.Event) {
				if ev.Type == runner.EventPruned {
					logs.pruned(context.Background())
				}
				if line := eventLine(ev); line != "" && !cfg.wf.quiet {
					log.Info(line)
				}
			}})
			if err != nil && !errors.Is(err, errors.ErrUnsupported) {
				serveCh <- fmt.Errorf("schedules: %w", err)
			}
		})
	}
	go func() {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveCh <- err
		}
	}()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-serveCh:
	}
	shCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(shCtx); err != nil && serveErr == nil {
		serveErr = fmt.Errorf("http shutdown: %w", err)
	}
	stopRun()
	wg.Wait()
	if serveErr != nil {
		return serveErr
	}
	a.logger(slog.LevelInfo).Info("server stopped")
	return nil
}

// withDashboard serves the dashboard at /ui/ (its requests counted in
// the API's metrics), redirects / there and /favicon.ico to the
// dashboard's icon, and serves the API for every other path.
func withDashboard(api *httpapi.Server, ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(webui.Prefix, api.Instrument(ui))
	mux.Handle("GET /{$}", http.RedirectHandler(webui.Prefix, http.StatusFound))
	// A browser asks for it on any page it shows, before any sign-in.
	mux.Handle("GET /favicon.ico", http.RedirectHandler(webui.Prefix+"static/favicon.svg", http.StatusMovedPermanently))
	mux.Handle("/", api)
	return mux
}

// maxTokenFile is the largest token file serve reads.
const maxTokenFile = 64 << 10

// loadTokens reads the bearer tokens from file, one a line (blank lines and
// lines starting with # are skipped), or else from $JOBDIR_TOKEN. The file
// must be a private regular file of this user (or root) of at most 64 KiB
// (with groupAccess it may be readable by one of this process's groups),
// and every token at least httpapi.MinTokenLen bytes of printable ASCII.
func loadTokens(file string, groupAccess bool) ([]string, error) {
	if file == "" {
		t := strings.TrimSpace(os.Getenv("JOBDIR_TOKEN"))
		if t == "" {
			return nil, nil
		}
		if err := checkToken(t); err != nil {
			return nil, fmt.Errorf("$JOBDIR_TOKEN: %w", err)
		}
		return []string{t}, nil
	}
	data, err := readPrivateFile(file, maxTokenFile, groupAccess)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var tokens []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := checkToken(line); err != nil {
			return nil, fmt.Errorf("token file %s, line %d: %w", file, i+1, err)
		}
		tokens = append(tokens, line)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("token file %s holds no token", file)
	}
	return tokens, nil
}

// inGroup reports whether gid is one of this process's groups, effective
// or supplementary.
func inGroup(gid int) bool {
	if gid == os.Getegid() {
		return true
	}
	groups, _ := os.Getgroups()
	return slices.Contains(groups, gid)
}

// checkToken says what is wrong with a bearer token, in the words of a
// person who has to make a better one.
func checkToken(t string) error {
	if len(t) < httpapi.MinTokenLen {
		return fmt.Errorf("the token is %d bytes; a token must be at least %d bytes, to be hard to guess (make one with: openssl rand -hex 32)",
			len(t), httpapi.MinTokenLen)
	}
	for _, c := range []byte(t) {
		if c <= ' ' || c > '~' {
			return errors.New("the token holds a space, a control character or a character that is not ASCII; use letters, digits and punctuation (make one with: openssl rand -hex 32)")
		}
	}
	return nil
}

// readPrivateFile reads a secret file of at most limit bytes, refusing one
// that is not a regular file (a device such as /dev/zero, a pipe), that
// another user owns, or that its group or others may read or write.
//
// With groupAccess its group may read it if the file is root's and the
// group is one of this process's groups: a Kubernetes Secret volume of a
// pod with an fsGroup makes its files root's, in the fsGroup, and readable
// by it (0440 whatever the Secret's defaultMode), and with group access
// the members of that group are trusted with the store, so with running
// programs as this user, who can read the file. A file of this user's own
// that a group may read is refused all the same: that group (a primary
// group every user of the machine shares, say) is not one the system gave
// the file to, and the user can make the file private.
//
// A POSIX access ACL counts as its entries say (on Linux): one that lets
// only this user read it, as a systemd credential's does, keeps it private.
func readPrivateFile(path string, limit int64, groupAccess bool) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	others := fi.Mode().Perm() & 0o077
	acl := false
	groupRead := groupAccess && st != nil && st.Uid == 0
	if st != nil && fi.Mode().IsRegular() {
		group, ok, err := aclGroupClass(f, st.Gid, groupRead)
		if err != nil {
			return nil, err
		}
		if ok {
			// The group bits are the ACL's mask: what its entries
			// grant is what counts.
			others, acl = others&0o007|group, true
		}
	}
	if !acl && groupRead && others&0o040 != 0 && inGroup(int(st.Gid)) {
		others &^= 0o040
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%s); put the tokens in a plain file", path, fi.Mode().Type())
	case others != 0 && acl:
		return nil, fmt.Errorf("%s may be read or written by other users (mode %s and an ACL: getfacl %s); make it private: chmod 600 %s", path, fi.Mode().Perm(), path, path)
	case others != 0:
		return nil, fmt.Errorf("%s may be read or written by other users (mode %s); make it private: chmod 600 %s", path, fi.Mode().Perm(), path)
	case fi.Size() > limit:
		return nil, fmt.Errorf("%s is %d bytes, more than the %d KiB a token file may hold", path, fi.Size(), limit>>10)
	}
	if st != nil && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return nil, fmt.Errorf("%s belongs to another user (uid %d), who could change the tokens; it must be yours or root's", path, st.Uid)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is more than the %d KiB a token file may hold", path, limit>>10)
	}
	return data, nil
}

// listen opens the listener of serve: TCP on addr, or with isUnix a Unix
// socket at path that only this user (and root) can connect to. It
// returns the address to show as well.
func listen(addr, path string, isUnix bool) (net.Listener, string, error) {
	if !isUnix {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
		}
		return ln, "http://" + ln.Addr().String(), nil
	}
	if path == "" {
		return nil, "", usagef("--addr unix:PATH needs a PATH")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", fmt.Errorf("listen on unix:%s: %w", path, err)
	}
	ln, err := listenUnix(abs)
	if err != nil {
		return nil, "", fmt.Errorf("listen on unix:%s: %w", abs, err)
	}
	return ln, "unix:" + abs, nil
}

// listenUnix listens on a Unix socket at path with mode 0600. The socket
// is made in a private directory beside path, given its mode there and
// then renamed into place, so that it is never open to others, whatever
// the umask. A socket left at path by a server that is gone is replaced;
// one that a live server listens on, or any other file, is not.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; choose another path", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("another server listens on %s", path)
		}
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".jobdir-sock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = ul.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = ul.Close()
		return nil, err
	}
	return &unixListener{UnixListener: ul, path: path}, nil
}

// unixListener removes its socket file when closed.
type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

// checkTrust refuses to run jobs from a store that other users can
// write, explaining why and what to do.
//
// A PostgreSQL store is trusted as the database's access control says:
// whoever may write its schema chooses the programs its workers run.
func checkTrust(st *cliStore) error {
	if st.file == nil {
		return nil
	}
	err := st.file.CheckTrust()
	if err == nil {
		return nil
	}
	hint := "Whoever can write a store chooses the programs its workers run. Make the store and the directories above it " +
		"yours and writable only by you (for example: chmod -R go-w " + st.name + "), or run the worker as the user who owns them."
	var ue *filestore.UntrustedError
	if errors.As(err, &ue) && ue.GroupWritable {
		hint += "\nIf every member of its group may run programs as you, pass --group-access: with it, the members of the group share the store."
	}
	return withHint(fmt.Errorf("refusing to run jobs from %s: %w", st.name, err), hint)
}

// execValidators makes the HTTP API refuse an exec job whose payload a
// worker could never run (no argv, a relative directory, unknown fields)
// when it is submitted, not when it runs.
var execValidators = map[string]func(json.RawMessage) error{
	execjob.Kind: func(p json.RawMessage) error {
		_, err := execjob.ParsePayload(p)
		return err
	},
}
