package pgstore

import (
	"context"
	"fmt"
	"time"
)

// compactEvery is the least time between two compactions of the count
// deltas by one store (see compactCounts).
const compactEvery = time.Second

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
