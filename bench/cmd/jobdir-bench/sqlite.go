package main

import (
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// openSQLite opens the database file name in dir in WAL mode with the given
// synchronous setting (FULL or NORMAL), through one connection as both peers
// recommend for SQLite. Every transaction begins IMMEDIATE so that two
// processes writing at once wait on busy_timeout instead of failing with
// SQLITE_BUSY on a lock upgrade.
func openSQLite(dir, name, synchronous string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+synchronous+")")
	q.Add("_pragma", "busy_timeout(30000)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + filepath.Join(dir, name) + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	return db, nil
}
