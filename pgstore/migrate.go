package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrSchemaTooNew is returned by Open for a schema that a newer version of
// pgstore migrated: this version does not know its tables and refuses to
// touch them.
var ErrSchemaTooNew = errors.New("pgstore: schema written by a newer version")

// ErrNoSchema is returned by Open with Options.MustExist for a schema that
// does not exist or holds no store: Open does not create it.
var ErrNoSchema = errors.New("pgstore: no store in the schema")

// ErrSchemaTooOld is returned by Open with Options.MustExist for a schema
// that an older version migrated: Open does not upgrade it.
var ErrSchemaTooOld = errors.New("pgstore: schema written by an older version")

// migrations are the versioned schema changes, applied in the order of
// their names (NNNN_what.sql), each once.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migration is one embedded schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in order, with {{schema}}
// replaced by the quoted schema name.
func loadMigrations(schema string) ([]migration, error) {
	ents, err := migrations.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range ents {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name must start with a version number and an underscore", e.Name())
		}
		b, err := migrations.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(),
			sql: strings.ReplaceAll(string(b), "{{schema}}", pgx.Identifier{schema}.Sanitize())})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d", m.name, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the schema version this package writes and reads: the
// number of its migrations.
func SchemaVersion() int {
	ms, err := loadMigrations(DefaultSchema)
	if err != nil {
		panic(err)
	}
	return len(ms)
}

// migrate brings the schema to this version, or fails with
// ErrSchemaTooNew. A schema already at this version costs one query;
// otherwise the changes run in one transaction that holds an advisory lock
// on the schema's name, so that processes opening the store at once apply
// each change once.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations(s.opts.Schema)
	if err != nil {
		return fmt.Errorf("pgstore: open: %w", err)
	}
	return s.migrateTo(ctx, ms)
}

// migrateTo is migrate to the version of the last of ms, the migrations
// from the first on; tests pass fewer to make an older version's schema.
func (s *Store) migrateTo(ctx context.Context, ms []migration) error {
	latest := len(ms)
	v, err := s.schemaVersion(ctx, s.pool)
	switch {
	case err != nil && !isUndefinedTable(err):
		return fmt.Errorf("pgstore: open: read schema version: %w", err)
	case err == nil && v == latest:
		return nil
	case err == nil && v > latest:
		return s.tooNew(v, latest)
	case s.opts.MustExist && err != nil:
		return fmt.Errorf("%w: schema %q has no jobdir tables (or does not exist)", ErrNoSchema, s.opts.Schema)
	case s.opts.MustExist:
		return fmt.Errorf("%w: schema %q is at version %d, older than this program's %d, and is not upgraded when it must exist",
			ErrSchemaTooOld, s.opts.Schema, v, latest)
	}
	// READ COMMITTED whatever the server's default: a migration that
	// locks a table and then reads it (0004 seeds the counts) must see
	// what was committed before the lock.
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey(s.opts.Schema)); err != nil {
			return err
		}
		quoted := pgx.Identifier{s.opts.Schema}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoted); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+quoted+`.migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		v, err := s.schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if v > latest {
			return s.tooNew(v, latest)
		}
		for _, m := range ms[v:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+`.migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
			s.opts.Logger.Info("pgstore: schema migrated", "schema", s.opts.Schema, "migration", m.name)
		}
		return nil
	})
	if errors.Is(err, ErrSchemaTooNew) {
		return err
	}
	if err != nil {
		return fmt.Errorf("pgstore: open: migrate schema %s: %w", s.opts.Schema, err)
	}
	return nil
}

func (s *Store) tooNew(v, latest int) error {
	return fmt.Errorf("%w: schema %q is at version %d, this program knows versions up to %d; upgrade the program",
		ErrSchemaTooNew, s.opts.Schema, v, latest)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion returns the highest applied migration.
func (s *Store) schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{s.opts.Schema}.Sanitize()+`.migrations`).Scan(&v)
	return v, err
}

// migrationLockKey is the advisory lock that serializes migrations of one
// schema. It cannot use the schema's OID: the schema may not exist yet.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("jobdir pgstore migrate " + schema))
	return int64(h.Sum64())
}

// isUndefinedTable reports whether err says a table or schema is missing.
func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000")
}
