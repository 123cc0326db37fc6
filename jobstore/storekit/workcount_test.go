package storekit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// TestWorkCount: a plain waiter wakes once per signal since the latest
// empty Claim; a waiter with its own NoJobError wakes for any signal since
// its Claim began, whatever other waiters took.
func TestWorkCount(t *testing.T) {
	var w storekit.WorkCount
	require.False(t, w.Arrived(nil), "no signal yet")

	a := &jobstore.NoJobError{Since: w.Seq()}
	w.NoJob(a.Since)
	b := &jobstore.NoJobError{Since: w.Seq()}
	w.NoJob(b.Since)
	w.Signal()

	require.True(t, w.Arrived(a))
	require.True(t, w.Arrived(nil), "a signal since the latest empty Claim")
	require.False(t, w.Arrived(nil), "a plain waiter takes the signal once")
	require.True(t, w.Arrived(b), "b's own account still holds the signal")

	// a claims again and finds nothing: it has seen the signal.
	a = &jobstore.NoJobError{Since: w.Seq()}
	w.NoJob(a.Since)
	require.False(t, w.Arrived(a))
	require.False(t, w.Arrived(nil))

	// A Claim that began before a signal and ended after it does not count
	// it as seen.
	began := w.Seq()
	w.Signal()
	w.NoJob(began)
	require.True(t, w.Arrived(&jobstore.NoJobError{Since: began}))
	require.True(t, w.Arrived(nil))
}
