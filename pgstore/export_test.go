package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CompactCounts runs one compaction of the count deltas on the store's
// pool, for the tests of package pgstore_test, and returns the rows it
// deleted and wrote.
func CompactCounts(ctx context.Context, s *Store) (deleted, written int64, err error) {
	return s.compactCounts(ctx, s.pool)
}

// CompactCountsIn is CompactCounts in the transaction tx, which the test
// commits.
func CompactCountsIn(ctx context.Context, s *Store, tx pgx.Tx) (deleted, written int64, err error) {
	return s.compactCounts(ctx, tx)
}

// MigrateTo brings schema to version v as the program of that version
// would have, and no further.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, schema string, v int) error {
	o, err := (&Options{Schema: schema}).withDefaults()
	if err != nil {
		return err
	}
	ms, err := loadMigrations(schema)
	if err != nil {
		return err
	}
	s := &Store{pool: pool, opts: o}
	return s.migrateTo(ctx, ms[:v])
}

// CompactAndVacuum is what the store's maintenance does every second to
// the count deltas.
func CompactAndVacuum(ctx context.Context, s *Store) error { return s.compactAndVacuum(ctx) }
