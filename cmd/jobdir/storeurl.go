package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
	"github.com/jobdir/jobdir/storeurl"
)

// envStore names the environment variable that selects the store as
// --store does.
const envStore = "JOBDIR_STORE"

// location is a store as --store, --dir or the environment name it.
type location = storeurl.Location

const (
	fileStore     = storeurl.File
	postgresStore = storeurl.Postgres
)

// parseStoreURL reads what --store or $JOBDIR_STORE says (see
// storeurl.Parse), in words for a person: without the library's
// "invalid input".
func parseStoreURL(s string) (location, error) {
	loc, err := storeurl.Parse(s)
	if err != nil {
		return loc, errors.New(strings.TrimPrefix(err.Error(), jobstore.ErrInvalidInput.Error()+": "))
	}
	return loc, nil
}

// registerStoreFlag adds --store to root.
func (a *app) registerStoreFlag(root *cobra.Command) {
	root.PersistentFlags().StringVar(&a.store, "store", "",
		"use the store at `URL`: a directory (a path or file:///path) or postgres://USER@HOST/DB[?schema=NAME] (default $JOBDIR_STORE, else --dir)")
}

// location returns the store the flags and the environment select: --store,
// else --dir, else $JOBDIR_STORE, else $JOBDIR_DIR or the default directory.
func (a *app) location() (location, error) {
	switch {
	case a.store != "" && a.dir != "":
		return location{}, usagef("--store and --dir both name the store: give one of them")
	case a.store != "":
		loc, err := parseStoreURL(a.store)
		if err != nil {
			return location{}, usagef("--store: %v", err)
		}
		return loc, nil
	case a.dir != "":
		return location{Kind: fileStore, Dir: a.dir}, nil
	}
	if env := os.Getenv(envStore); env != "" {
		loc, err := parseStoreURL(env)
		if err != nil {
			return location{}, fmt.Errorf("$%s: %w", envStore, err)
		}
		return loc, nil
	}
	return location{Kind: fileStore}, nil
}

// cliStore is the store a command works on: a file store or a PostgreSQL
// store, and what the commands need of each beyond jobstore.Store.
type cliStore struct {
	jobstore.Store
	// file is the file store, nil for PostgreSQL.
	file *filestore.Store
	// pg is the PostgreSQL store, nil for a file store.
	pg *pgstore.Store
	// name says where the store is, for people: a directory, or the URL
	// without its password and the schema.
	name string
}

// openCLIStore opens the store the flags and the environment select.
func (a *app) openCLIStore(ctx context.Context) (*cliStore, error) {
	loc, err := a.location()
	if err != nil {
		return nil, err
	}
	if loc.Kind == fileStore {
		if loc.Dir != "" {
			a.dir = loc.Dir // openStore reads it, wherever it finds the store
		}
		st, err := a.openStore(ctx)
		if err != nil {
			return nil, err
		}
		return &cliStore{Store: st, file: st, name: st.Dir()}, nil
	}
	st, err := pgstore.OpenDSN(ctx, loc.DSN, &pgstore.Options{Schema: loc.Schema, Logger: a.logger(slog.LevelWarn)})
	if err != nil {
		return nil, explainOpenPG(loc, err)
	}
	cs := &cliStore{Store: st, pg: st, name: loc.String()}
	a.storeName = cs.name
	if a.verbose {
		fmt.Fprintf(a.stderr, "jobdir: store %s\n", a.storeName)
	}
	return cs, nil
}

// explainOpenPG rewrites the error of opening a PostgreSQL store for a
// person.
func explainOpenPG(loc location, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	where := loc.String()
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// pgx's own words, without the chain of what was being done.
		return withHint(fmt.Errorf("cannot connect to PostgreSQL for the store at %s: %s", where, uniqueLines(errors.Unwrap(ce).Error())),
			"Check that the server runs and listens there, and that this user may connect to the database.")
	}
	wrapped := fmt.Errorf("cannot open the store in PostgreSQL at %s: %w", where, err)
	switch {
	case errors.Is(err, pgstore.ErrSchemaTooNew):
		return withHint(wrapped, "The schema was written by a newer jobdir; use that version, or upgrade this one.")
	case errors.Is(err, jobstore.ErrInvalidInput):
		return withHint(wrapped, "Check the URL: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME], and the schema name (lower-case letters, digits and _).")
	}
	return withHint(wrapped, "Check that the server runs and that this user may connect to the database and create a schema in it.")
}

// logDir returns the directory of the exec jobs' logs of a file store, and
// "" for a PostgreSQL store.
func (s *cliStore) logDir() string {
	if s.file == nil {
		return ""
	}
	return filepath.Join(s.file.Dir(), logsDirName)
}

// deleteLog removes the log file of the deleted job id from a file store;
// PostgreSQL deletes a job's log with the job.
func (s *cliStore) deleteLog(_ context.Context, id string) error {
	if s.file == nil {
		return nil
	}
	p, err := joblog.Path(s.logDir(), id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// logs returns where the store keeps the exec jobs' output: files in the
// store directory, or the database.
func (s *cliStore) logs() joblog.Logs {
	if s.pg != nil {
		return s.pg.Logs()
	}
	return joblog.Dir{Path: s.logDir()}
}

// uniqueLines returns s without the lines that repeat an earlier one: pgx
// says the same dial error once per attempt (with TLS, then without).
func uniqueLines(s string) string {
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
