package torture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// schemaFile, in a run's store directory, names the PostgreSQL schema that
// PGBackend put the run's store in.
const schemaFile = "pgstore-schema"

// pgSchemaPrefix starts the name of the schema of every run of PGBackend;
// the Unix time of the run's start follows.
const pgSchemaPrefix = "jobdir_t"

// PGBackend returns the Backend of pgstore on the database dsn names. The
// first Open of a run makes a new schema, whose name it writes in the
// store directory for the run's other processes (PGSchema reads it); each
// process has a pool of its own of at most 4 connections, and a short
// backoff after failures, as FileBackend. Its chaos cuts the connections
// of a worker process with pg_terminate_backend (Backend.Cut), and, if
// restart is not empty, restarts the server by running that command
// through sh -c (Backend.Restart). Errors that are not jobstore errors
// (a connection cut, a server restarting) are transient: the children
// retry them.
func PGBackend(dsn, restart string) Backend {
	b := Backend{
		Open: func(ctx context.Context, dir string) (jobstore.Store, error) {
			schema, err := pgSchema(dir, true)
			if err != nil {
				return nil, err
			}
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				return nil, err
			}
			cfg.MaxConns = 4
			cfg.ConnConfig.RuntimeParams["application_name"] = pgAppName(os.Getpid())
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return nil, err
			}
			st, err := pgstore.Open(ctx, pool, &pgstore.Options{
				Schema:  schema,
				Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * 50 * time.Millisecond },
				// The store's warnings (a lease session lost, a job
				// recovered) go to the child's output, kept with the
				// records: what the checks find is read beside them.
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				pool.Close()
				return nil, err
			}
			return poolClosingStore{st, pool}, nil
		},
		Cut: func(ctx context.Context, dir string, pid int) (int, error) {
			return pgTerminate(ctx, dsn, `application_name = $1`, pgAppName(pid))
		},
		Transient: pgTransient,
		LeaseLost: func(err error) bool { return errors.Is(err, pgstore.ErrLeaseLost) },
	}
	if restart != "" {
		b.Restart = func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "sh", "-c", restart).CombinedOutput()
			if err != nil {
				return fmt.Errorf("restart the server: %w: %s", err, out)
			}
			return nil
		}
	}
	return b
}

// EnvPostgres, when set in a torture process's environment, holds the DSN
// of the PostgreSQL database that BackendFromEnv puts the store in.
const EnvPostgres = "JOBDIR_TORTURE_POSTGRES"

// BackendFromEnv returns PGBackend on the database EnvPostgres names if it
// is set, and FileBackend otherwise. A driver that runs on pgstore sets
// EnvPostgres, so that its children, which inherit its environment, open
// the same store.
func BackendFromEnv() Backend {
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		return PGBackend(dsn, "")
	}
	return FileBackend()
}

// PGSchema returns the schema of the PGBackend run whose store directory is
// dir, or "" if it has none.
func PGSchema(dir string) string {
	s, _ := pgSchema(dir, false)
	return s
}

// pgSchema reads the run's schema name from dir, or makes one if create and
// there is none yet.
func pgSchema(dir string, create bool) (string, error) {
	path := filepath.Join(dir, schemaFile)
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return "", err
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("%s%d_%s", pgSchemaPrefix, time.Now().Unix(), hex.EncodeToString(r[:]))
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return pgSchema(dir, false)
}

// pgAppName is the application_name of the connections of process pid.
func pgAppName(pid int) string { return "jobdir-torture-" + strconv.Itoa(pid) }

// pgTerminate ends the backends (other than its own) that where selects in
// pg_stat_activity, and returns how many.
func pgTerminate(ctx context.Context, dsn, where string, args ...any) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	// In the select list, not the WHERE clause: the server may evaluate
	// the conditions of a WHERE clause in any order. With a timeout,
	// pg_terminate_backend returns once the backend has exited (and its
	// locks are free), not when it was merely signalled: the cut's end,
	// which the checks compare with claims, must follow its effect.
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE ended) FROM (
		SELECT pg_terminate_backend(pid, 5000) AS ended FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND `+where+`) t`, args...).Scan(&n)
	return n, err
}

// pgTransient reports whether err is not a jobstore error: with pgstore,
// the failure of a connection or of the server, which a retry may outlive.
func pgTransient(err error) bool {
	for _, e := range []error{jobstore.ErrNotFound, jobstore.ErrInvalidTransition, jobstore.ErrInvalidInput,
		jobstore.ErrNoJob, jobstore.ErrNotHeld, jobstore.ErrClosed, jobstore.ErrCorrupt,
		context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return false
		}
	}
	return err != nil
}

// poolClosingStore closes its pool after the store.
type poolClosingStore struct {
	*pgstore.Store
	pool *pgxpool.Pool
}

func (s poolClosingStore) Close() error {
	err := s.Store.Close()
	s.pool.Close()
	return err
}
