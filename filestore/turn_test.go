package filestore

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Shared holders hold the turn together: a second reader does not wait for
// the first.
func TestTurnReadersShare(t *testing.T) {
	var tn turn
	ctx := t.Context()
	require.NoError(t, tn.lock(ctx, false))
	require.NoError(t, tn.lock(ctx, false))
	// With an ended ctx, lock succeeds only if it need not wait.
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, tn.lock(done, true), context.Canceled, "the exclusive turn is not free while readers hold it")
	tn.unlock(false)
	tn.unlock(false)
	require.NoError(t, tn.lock(done, true), "free again")
	require.ErrorIs(t, tn.lock(done, false), context.Canceled, "readers wait for the exclusive holder")
	tn.unlock(true)
}

// A waiting exclusive holder (a Complete) goes before readers that arrive
// after it, however many keep coming: it waits only for the reads under
// way.
func TestTurnWriterBeatsLaterReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tn turn
		ctx := t.Context()
		require.NoError(t, tn.lock(ctx, false)) // a read under way
		got := make(chan string, 3)
		go func() {
			require.NoError(t, tn.lock(ctx, true))
			got <- "writer"
			time.Sleep(time.Millisecond)
			tn.unlock(true)
		}()
		synctest.Wait() // the writer waits
		go func() {
			require.NoError(t, tn.lock(ctx, false))
			got <- "later reader"
			tn.unlock(false)
		}()
		synctest.Wait() // the later reader waits behind the writer
		require.Empty(t, got)
		tn.unlock(false) // the read under way ends
		require.Equal(t, "writer", <-got)
		require.Equal(t, "later reader", <-got)
	})
}

// A writer that gives up waiting lets the readers it held back go, and
// leaves the turn as it found it.
func TestTurnWriterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tn turn
		require.NoError(t, tn.lock(t.Context(), false))
		wctx, cancel := context.WithCancel(t.Context())
		werr := make(chan error, 1)
		go func() { werr <- tn.lock(wctx, true) }()
		synctest.Wait()
		rdone := make(chan struct{})
		go func() {
			require.NoError(t, tn.lock(t.Context(), false))
			close(rdone)
		}()
		synctest.Wait()
		select {
		case <-rdone:
			t.Fatal("a reader went ahead of a waiting writer")
		default:
		}
		cancel()
		require.ErrorIs(t, <-werr, context.Canceled)
		<-rdone
		tn.unlock(false)
		tn.unlock(false)
		require.NoError(t, tn.lock(t.Context(), true))
		tn.unlock(true)
		require.Zero(t, tn.writersWaiting)
	})
}
