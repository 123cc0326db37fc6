package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
)

// httpShutdownTimeout bounds how long serve waits for requests in flight
// when it stops.
const httpShutdownTimeout = 10 * time.Second

func (a *app) serveCommand() *cobra.Command {
	var (
		wf         workerFlags
		addr       string
		workers    int
		tokenFile  string
		noAuth     bool
		allowKinds []string
		verbose    bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API on the store",
		Long: `Serve the HTTP API (see docs/http-api.md) on the store, and with --work N run
N exec jobs at once in the same process. Several servers may serve one store
directory: each answers for every job, whichever server it was submitted to.

It prints "listening on http://ADDR" with the real address, so --addr
127.0.0.1:0 picks a free port that scripts can read.

Every request except GET /healthz needs "Authorization: Bearer TOKEN". The
tokens come from --token-file (one a line) or $JOBDIR_TOKEN; without one,
serve refuses to start unless --insecure-no-auth is given. HTTP clients may
submit jobs only of the kinds --allow-kind lists; "exec" jobs run programs,
so they are refused unless --allow-kind exec is given: whoever holds a token
can then run any program as this user. The default address is on loopback
for the same reason.

Jobs run by --work get the environment "jobdir work --help" describes: never
$JOBDIR_TOKEN. They run as this user, though, so they can read what this user
can, a --token-file included: to keep tokens from jobs, run the workers as
another user (jobdir work, on the same store). GET /v1/jobs/ID/log serves a
job's output from the store's logs/ directory.

On SIGINT or SIGTERM it stops accepting requests, finishes the ones in
flight, stops its workers as jobdir work does, and exits.`,
		Example: `  JOBDIR_TOKEN=$(cat ~/.jobdir-token) jobdir serve
  jobdir serve --addr 127.0.0.1:0 --token-file /run/secrets/jobdir --work 4 --allow-kind exec
  jobdir serve --insecure-no-auth --allow-kind '*'   # local development only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if workers < 0 {
				return usagef("--work must not be negative")
			}
			tokens, err := loadTokens(tokenFile)
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
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *filestore.Store) error {
				return a.serve(ctx, st, serveConfig{addr: addr, workers: workers, tokens: tokens, noAuth: noAuth, kinds: allowKinds, verbose: verbose, wf: &wf})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "listen on `ADDR` (port 0 picks a free one)")
	f.IntVar(&workers, "work", 0, "run `N` exec jobs at once in this process (0: none)")
	f.StringVar(&tokenFile, "token-file", "", "`FILE` holding the accepted bearer tokens, one a line (default $JOBDIR_TOKEN)")
	f.BoolVar(&noAuth, "insecure-no-auth", false, "serve without authentication")
	f.StringArrayVar(&allowKinds, "allow-kind", nil, "`KIND` HTTP clients may submit (repeatable; default: every kind but exec, which must be named)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every request on stderr (by default only warnings and server errors)")
	wf.register(cmd)
	return cmd
}

type serveConfig struct {
	addr    string
	workers int
	tokens  []string
	noAuth  bool
	kinds   []string
	verbose bool
	wf      *workerFlags
}

func (a *app) serve(ctx context.Context, st *filestore.Store, cfg serveConfig) error {
	// No --allow-kind leaves httpapi's default: any kind but exec.
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelDebug
	}
	srv, err := httpapi.New(st, &httpapi.Options{Tokens: cfg.tokens, InsecureNoAuth: cfg.noAuth, AllowedKinds: cfg.kinds, Validators: execValidators, Logger: a.logger(level), LogDir: logDir(st)})
	if err != nil {
		return usagef("%v", err)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	hs := httpapi.NewHTTPServer(cfg.addr, srv)
	fmt.Fprintf(a.stdout, "listening on http://%s\n", ln.Addr())
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(a.stderr, "jobdir: warning: serving on %s, which is not loopback; use TLS in front of it and keep the tokens secret\n", ln.Addr())
	}

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
		if !cfg.wf.quiet {
			fmt.Fprintf(a.stderr, "jobdir: containment: %s\n", contained)
		}
		r := cfg.wf.newRunner(st, h, cfg.workers, a.stderr, srv.ObserveRunner)
		wg.Go(func() {
			runErr = r.Run(runCtx)
			if runErr != nil {
				// A worker that cannot go on takes the server down
				// with it rather than serving a store nobody works.
				serveCh <- fmt.Errorf("worker: %w", runErr)
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
	fmt.Fprintln(a.stderr, "jobdir: server stopped")
	return nil
}

// loadTokens reads the bearer tokens from file, one a line (blank lines and
// lines starting with # are skipped), or else from $JOBDIR_TOKEN.
func loadTokens(file string) ([]string, error) {
	if file == "" {
		if t := strings.TrimSpace(os.Getenv("JOBDIR_TOKEN")); t != "" {
			return []string{t}, nil
		}
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var tokens []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tokens = append(tokens, line)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("token file %s holds no token", file)
	}
	return tokens, nil
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
