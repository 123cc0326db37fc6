package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// envStore names the environment variable that selects the store as
// --store does.
const envStore = "JOBDIR_STORE"

// schemaParam is the query parameter of a postgres:// store URL that names
// the schema; it is jobdir's, not PostgreSQL's, so it is taken out of the
// URL before connecting.
const schemaParam = "schema"

// storeKind says which implementation a store location names.
type storeKind int

const (
	fileStore storeKind = iota
	postgresStore
)

// location is a store as --store, --dir or the environment name it.
type location struct {
	kind storeKind
	// dir is the directory of a file store ("" for the default one).
	dir string
	// dsn is the connection URL of a PostgreSQL store, without the
	// schema parameter.
	dsn string
	// schema is the PostgreSQL schema ("" for pgstore's default).
	schema string
}

// parseStoreURL reads what --store or $JOBDIR_STORE says: a directory (a
// path or a file:// URL) or a postgres:// (postgresql://) URL. A schema
// query parameter of a PostgreSQL URL names the store's schema.
func parseStoreURL(s string) (location, error) {
	scheme, _, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if s == "" {
			return location{}, errors.New("the store is empty: give a directory or a postgres:// URL")
		}
		return location{kind: fileStore, dir: s}, nil
	}
	switch strings.ToLower(scheme) {
	case "file":
		u, err := url.Parse(s)
		if err != nil {
			return location{}, fmt.Errorf("store %q: not a URL", redacted(s))
		}
		if u.Host != "" && u.Host != "localhost" {
			return location{}, fmt.Errorf("store %q: a file:// URL names a directory on this machine: write file:///path (three slashes) or just the path", s)
		}
		if u.Path == "" || u.RawQuery != "" {
			return location{}, fmt.Errorf("store %q: want file:///path/to/dir", s)
		}
		return location{kind: fileStore, dir: u.Path}, nil
	case "postgres", "postgresql":
		u, err := url.Parse(s)
		if err != nil {
			// url.Parse quotes the URL, password included: say less.
			return location{}, fmt.Errorf("the PostgreSQL URL given as the store cannot be read; want postgres://USER@HOST:PORT/DATABASE")
		}
		q := u.Query()
		schema := q.Get(schemaParam)
		if len(q[schemaParam]) > 1 {
			return location{}, fmt.Errorf("store %s: give the schema once", u.Redacted())
		}
		q.Del(schemaParam)
		u.RawQuery = q.Encode()
		return location{kind: postgresStore, dsn: u.String(), schema: schema}, nil
	}
	return location{}, fmt.Errorf("store %q: unknown kind of store %q: give a directory, a file:// URL or a postgres:// URL", redacted(s), scheme)
}

// redacted returns the URL s without its password, if it has one.
func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		scheme, _, _ := strings.Cut(s, "://")
		return scheme + "://..."
	}
	return u.Redacted()
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
		return location{kind: fileStore, dir: a.dir}, nil
	}
	if env := os.Getenv(envStore); env != "" {
		loc, err := parseStoreURL(env)
		if err != nil {
			return location{}, fmt.Errorf("$%s: %w", envStore, err)
		}
		return loc, nil
	}
	return location{kind: fileStore}, nil
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
	if loc.kind == fileStore {
		if loc.dir != "" {
			a.dir = loc.dir // openStore reads it, wherever it finds the store
		}
		st, err := a.openStore(ctx)
		if err != nil {
			return nil, err
		}
		return &cliStore{Store: st, file: st, name: st.Dir()}, nil
	}
	st, err := pgstore.OpenDSN(ctx, loc.dsn, &pgstore.Options{Schema: loc.schema, Logger: a.logger(slog.LevelWarn)})
	if err != nil {
		return nil, explainOpenPG(loc, err)
	}
	cs := &cliStore{Store: st, pg: st, name: pgName(loc.dsn, st.Schema())}
	a.storeName = cs.name
	if a.verbose {
		fmt.Fprintf(a.stderr, "jobdir: store %s\n", a.storeName)
	}
	return cs, nil
}

// pgName names a PostgreSQL store for people: its URL without the password,
// and its schema.
func pgName(dsn, schema string) string {
	shown := dsn
	if u, err := url.Parse(dsn); err == nil {
		shown = u.Redacted()
		if q, err := url.QueryUnescape(u.RawQuery); err == nil && u.RawQuery != "" {
			u.RawQuery = ""
			shown = u.Redacted() + "?" + q
		}
	}
	return shown + " (schema " + schema + ")"
}

// explainOpenPG rewrites the error of opening a PostgreSQL store for a
// person.
func explainOpenPG(loc location, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	where := pgName(loc.dsn, cmp.Or(loc.schema, pgstore.DefaultSchema))
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// pgx's own words, without the chain of what was being done.
		return withHint(fmt.Errorf("cannot connect to PostgreSQL for the store at %s: %w", where, errors.Unwrap(ce)),
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

// logs returns where the store keeps the exec jobs' output: files in the
// store directory, or the database.
func (s *cliStore) logs() joblog.Logs {
	if s.pg != nil {
		return s.pg.Logs()
	}
	return joblog.Dir{Path: s.logDir()}
}
