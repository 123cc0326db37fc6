package filestore

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupSync: concurrent callers share fsyncs, every caller is covered
// by an fsync that started after it arrived, and a failed fsync is
// reported to every caller it covered.
func TestGroupSync(t *testing.T) {
	g := newGroupSync()
	var calls, inFlight atomic.Int32
	var mu sync.Mutex
	changes := 0 // "directory changes" made so far
	synced := 0  // changes covered by the last finished fsync
	fsync := func() error {
		assert.Equal(t, int32(1), inFlight.Add(1), "fsyncs overlap")
		defer inFlight.Add(-1)
		calls.Add(1)
		mu.Lock()
		upTo := changes
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		synced = max(synced, upTo)
		mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	const n = 64
	for range n {
		wg.Go(func() {
			mu.Lock()
			changes++
			mine := changes
			mu.Unlock()
			assert.NoError(t, g.sync(fsync)) // assert: not on the test goroutine
			mu.Lock()
			assert.GreaterOrEqual(t, synced, mine, "returned before its change was synced")
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Less(t, calls.Load(), int32(n), "no fsync was shared")
	t.Logf("%d callers, %d fsyncs", n, calls.Load())

	boom := errors.New("EIO")
	require.ErrorIs(t, g.sync(func() error { return boom }), boom)
	require.NoError(t, g.sync(func() error { return nil }), "a later fsync is not failed by an earlier one")
}
