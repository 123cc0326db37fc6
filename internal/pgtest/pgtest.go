// Package pgtest gives tests a PostgreSQL server to work in: the DSN, a
// schema of their own that is dropped after, and a small pool.
//
// The server is the one JOBDIR_TEST_POSTGRES names (a URL or key=value
// DSN), by default the local socket and the database "test". Outside CI a
// server that does not answer skips the tests that need it, with one loud
// line on standard error; with CI=true it fails them.
//
// Bouncer puts a PgBouncer process of the test's own in front of that
// server, in session or transaction mode; it likewise skips or fails the
// test where pgbouncer is not installed.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvDSN names the environment variable that holds the test server's DSN.
const EnvDSN = "JOBDIR_TEST_POSTGRES"

// DefaultDSN is the test server when EnvDSN is unset.
const DefaultDSN = "host=/var/run/postgresql dbname=test"

// schemaPrefix starts the name of every schema a test makes; the Unix time
// of its creation follows, so that a later run drops what a killed run
// left.
const schemaPrefix = "jobdir_t"

// DSN returns the test server's DSN.
func DSN() string {
	if d := os.Getenv(EnvDSN); d != "" {
		return d
	}
	return DefaultDSN
}

var (
	probeOnce sync.Once
	probeErr  error
)

// probe connects once per process, and drops the test schemas that runs
// killed more than an hour ago left behind.
func probe() error {
	probeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, DSN())
		if err != nil {
			probeErr = err
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, schemaPrefix+"%")
		if err != nil {
			probeErr = err
			return
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			probeErr = err
			return
		}
		for _, n := range names {
			rest := strings.TrimPrefix(n, schemaPrefix)
			sec, _, _ := strings.Cut(rest, "_")
			at, err := strconv.ParseInt(sec, 10, 64)
			if err == nil && time.Since(time.Unix(at, 0)) > time.Hour {
				_, _ = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{n}.Sanitize()+` CASCADE`)
			}
		}
	})
	return probeErr
}

var loudOnce sync.Once

// Require returns the test server's DSN, or skips t (outside CI) or fails
// it (CI=true) if the server does not answer.
func Require(t testing.TB) string {
	t.Helper()
	if err := probe(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at %q does not answer, and CI=true: %v", DSN(), err)
		}
		loudOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "\n*** SKIPPING the PostgreSQL tests: no server at %q (%v); set %s ***\n\n", DSN(), err, EnvDSN)
		})
		t.Skipf("no PostgreSQL server at %q: %v", DSN(), err)
	}
	return DSN()
}

// Schema returns the name of a new, unused schema (not yet created) and
// drops it, with everything in it, when t ends.
func Schema(t testing.TB) string {
	t.Helper()
	Require(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("%s%d_%s", schemaPrefix, time.Now().Unix(), hex.EncodeToString(b[:]))
	t.Cleanup(func() { Drop(t, name) })
	return name
}

// Drop drops the schema name, with everything in it.
func Drop(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN())
	if err != nil {
		t.Errorf("drop schema %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
		t.Errorf("drop schema %s: %v", name, err)
	}
}

// Pool returns a pool of at most maxConns connections to the test server,
// closed when t ends. The server is shared: keep maxConns small.
func Pool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := NewPool(context.Background(), maxConns)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewPool returns a pool of at most maxConns connections to the test
// server, for child processes that have no testing.TB.
func NewPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(DSN())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// StoreURL returns the postgres:// URL of the test server, with the
// schema parameter that names schema, as jobdir's --store and the
// storeurl package take it. It skips the test (fails it under CI=true)
// without a server.
func StoreURL(t testing.TB, schema string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(Require(t))
	if err != nil {
		t.Fatalf("parse the test server's DSN: %v", err)
	}
	q := url.Values{}
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		q.Set("port", strconv.Itoa(int(cfg.Port)))
	} else {
		u.Host = cfg.Host + ":" + strconv.Itoa(int(cfg.Port))
	}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
