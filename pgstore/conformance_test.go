package pgstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
	"github.com/jobdir/jobdir/pgstore"
)

// TestConformance runs the jobstore conformance suite on pgstore, each
// subtest in a schema of its own.
func TestConformance(t *testing.T) {
	pgtest.Require(t)
	pool := pgtest.Pool(t, 8)
	storetest.Run(t, func(t *testing.T) jobstore.Store {
		s, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: pgtest.Schema(t)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
