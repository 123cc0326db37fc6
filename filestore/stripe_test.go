package filestore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestStripeNameIsStable pins the mapping from job ID to record lock file:
// it is part of the on-disk format, and processes that disagree on it would
// not exclude each other.
func TestStripeNameIsStable(t *testing.T) {
	require.Equal(t, "rec-1d2.lock", stripeName("01M8MF4X6JB95R7N94JRT3F3R4"))
	// The IDs of a burst of submits spread over the stripes.
	seen := map[string]int{}
	now := time.Now()
	for range 10 * lockStripes {
		name := stripeName(jobstore.NewID(now))
		require.Regexp(t, `^rec-[0-9a-f]{3}\.lock$`, name)
		seen[name]++
	}
	require.Greater(t, len(seen), lockStripes*9/10)
	for name, n := range seen {
		require.Less(t, n, 40, name)
	}
}
