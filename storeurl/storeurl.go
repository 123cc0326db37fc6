// Package storeurl opens a jobdir store from the string that names it, the
// one the jobdir command's --store flag and $JOBDIR_STORE take: a directory
// (a path, or a file:// URL) for a file store, or a postgres:// or
// postgresql:// URL for a store in PostgreSQL, whose query parameter
// schema names the store's schema (pgstore.DefaultSchema without it).
//
//	store, err := storeurl.Open(ctx, os.Getenv("JOBDIR_STORE"), nil)
//
// The store Open returns is a *filestore.Store or a *pgstore.Store; a
// program that needs more than jobstore.Store asserts its type.
package storeurl

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// Kind says which store a Location names.
type Kind int

// The kinds of store.
const (
	// File is a file store: a directory (filestore).
	File Kind = iota
	// Postgres is a store in a PostgreSQL schema (pgstore).
	Postgres
)

// SchemaParam is the query parameter of a postgres:// URL that names the
// store's schema. It is jobdir's, not PostgreSQL's: Parse takes it out of
// the URL it connects with.
const SchemaParam = pgstore.SchemaParam

// Location is a store as a string names it.
type Location struct {
	// Kind says which store it is.
	Kind Kind
	// Dir is a file store's directory, as given (it may be relative).
	Dir string
	// DSN is a PostgreSQL store's connection URL, without the schema
	// parameter.
	DSN string
	// Schema is a PostgreSQL store's schema; empty means
	// pgstore.DefaultSchema.
	Schema string
}

// Parse reads s: a path or a file:// URL (file:///path, or
// file://localhost/path) names a file store, a postgres:// or
// postgresql:// URL a PostgreSQL store. Its errors, which wrap
// jobstore.ErrInvalidInput, are in plain words and never show a password.
func Parse(s string) (Location, error) {
	scheme, _, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if s == "" {
			return Location{}, invalid("the store is empty: give a directory or a postgres:// URL")
		}
		return Location{Kind: File, Dir: s}, nil
	}
	switch strings.ToLower(scheme) {
	case "file":
		u, err := url.Parse(s)
		if err != nil {
			return Location{}, invalid("store %q: not a URL", redacted(s))
		}
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, invalid("store %q: a file:// URL names a directory on this machine: write file:///path (three slashes) or just the path", s)
		}
		if u.Path == "" || u.RawQuery != "" {
			return Location{}, invalid("store %q: want file:///path/to/dir", s)
		}
		return Location{Kind: File, Dir: u.Path}, nil
	case "postgres", "postgresql":
		dsn, schema, err := pgstore.SplitSchema(s)
		if err != nil {
			return Location{}, err
		}
		return Location{Kind: Postgres, DSN: dsn, Schema: schema}, nil
	}
	return Location{}, invalid("store %q: unknown kind of store %q: give a directory, a file:// URL or a postgres:// URL", redacted(s), scheme)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", jobstore.ErrInvalidInput, fmt.Sprintf(format, args...))
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

// String names the store for people: its directory, or its URL without
// the password and with its schema.
func (l Location) String() string {
	if l.Kind == File {
		return l.Dir
	}
	shown := l.DSN
	if u, err := url.Parse(l.DSN); err == nil {
		shown = u.Redacted()
		if q, err := url.QueryUnescape(u.RawQuery); err == nil && u.RawQuery != "" {
			u.RawQuery = ""
			shown = u.Redacted() + "?" + q
		}
	}
	return shown + " (schema " + cmp.Or(l.Schema, pgstore.DefaultSchema) + ")"
}

// Options configures Open: the options of each kind of store (nil for
// the defaults). A URL's schema parameter takes the place of
// Postgres.Schema.
type Options struct {
	File     *filestore.Options
	Postgres *pgstore.Options
}

// Open parses s (see Parse) and opens the store it names: filestore.Open
// of the directory, or pgstore.OpenDSN of the URL, with a pool of its own
// that the store's Close closes.
func Open(ctx context.Context, s string, opts *Options) (jobstore.Store, error) {
	l, err := Parse(s)
	if err != nil {
		return nil, fmt.Errorf("storeurl: %w", err)
	}
	return l.Open(ctx, opts)
}

// Open opens the store at l, as the package's Open does.
func (l Location) Open(ctx context.Context, opts *Options) (jobstore.Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	switch l.Kind {
	case File:
		if l.Dir == "" {
			return nil, fmt.Errorf("storeurl: %w: no directory", jobstore.ErrInvalidInput)
		}
		st, err := filestore.Open(ctx, l.Dir, opts.File)
		if err != nil {
			return nil, err
		}
		return st, nil
	case Postgres:
		var po pgstore.Options
		if opts.Postgres != nil {
			po = *opts.Postgres
		}
		if l.Schema != "" {
			po.Schema = l.Schema
		}
		st, err := pgstore.OpenDSN(ctx, l.DSN, &po)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	return nil, fmt.Errorf("storeurl: %w: unknown kind of store %d", jobstore.ErrInvalidInput, l.Kind)
}
