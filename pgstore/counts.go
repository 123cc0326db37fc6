package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// compactEvery is the least time between two compactions of the count
// deltas by one store (see compactCounts).
const compactEvery = time.Second

// vacuumAfter is how many deltas a compaction deletes before the store
// vacuums the table: under a steady load of writes, autovacuum (which
// looks at most once a minute by default) would let a minute of dead
// rows pile up, and every Stats would read them.
const vacuumAfter = 1000

// compactCounts replaces the count deltas that writes appended since the
// last compaction by one row per (kind, state), so that Stats sums a few
// rows. It is one statement: safe while jobs change and while other stores
// compact (see queries.compact). It returns how many rows it deleted and
// wrote.
func (s *Store) compactCounts(ctx context.Context, db querier) (deleted, written int64, err error) {
	if err := db.QueryRow(ctx, s.q.compact).Scan(&deleted, &written); err != nil {
		return 0, 0, fmt.Errorf("pgstore: compact counts: %w", err)
	}
	return deleted, written, nil
}

// compactAndVacuum compacts the count deltas, and vacuums their table if
// the compaction deleted many, so that it stays a few pages long. A
// vacuum that another store runs meanwhile is not waited for (SKIP_LOCKED),
// and one that the user may not run is skipped by the server with a
// warning.
func (s *Store) compactAndVacuum(ctx context.Context) error {
	deleted, _, err := s.compactCounts(ctx, s.pool)
	if err != nil || deleted < vacuumAfter {
		return err
	}
	// VACUUM runs outside any transaction block: one statement of the
	// simple protocol.
	if _, err := s.pool.Exec(ctx, s.q.vacuumCounts, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("pgstore: vacuum counts: %w", err)
	}
	return nil
}
