package storekit_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

func TestPageBuilder(t *testing.T) {
	t.Run("limit", func(t *testing.T) {
		b := storekit.NewPageBuilder(jobstore.ListOptions{Limit: 2})
		require.True(t, b.Add(sized(t, 1, 1000)))
		require.True(t, b.Add(sized(t, 2, 1000)))
		require.False(t, b.Add(sized(t, 3, 1000)))
		p := b.Page()
		require.Len(t, p.Jobs, 2)
		require.Equal(t, p.Jobs[1].ID, p.Next)
		require.False(t, p.ByteLimited, "a page cut by its limit is not byte-limited")
	})
	t.Run("bytes", func(t *testing.T) {
		b := storekit.NewPageBuilder(jobstore.ListOptions{Limit: 10, MaxBytes: 2500})
		require.True(t, b.Add(sized(t, 1, 1000)))
		require.True(t, b.Add(sized(t, 2, 1500)), "exactly at the budget fits")
		require.False(t, b.Add(sized(t, 3, 600)))
		p := b.Page()
		require.Len(t, p.Jobs, 2)
		require.Equal(t, p.Jobs[1].ID, p.Next)
		require.True(t, p.ByteLimited)
	})
	t.Run("first job always fits", func(t *testing.T) {
		b := storekit.NewPageBuilder(jobstore.ListOptions{Limit: 10, MaxBytes: 100})
		require.True(t, b.Add(sized(t, 1, 5000)), "a page is never empty while jobs remain")
		require.False(t, b.Add(sized(t, 2, 600)))
		require.Equal(t, sized(t, 1, 5000).ID, b.Page().Next)
	})
	t.Run("empty", func(t *testing.T) {
		p := storekit.NewPageBuilder(jobstore.ListOptions{Limit: 10}).Page()
		require.NotNil(t, p.Jobs)
		require.Empty(t, p.Jobs)
		require.Empty(t, p.Next)
	})
}

// sized returns a job whose Size is exactly n (at least the overhead).
func sized(t *testing.T, i, n int) jobstore.Job {
	t.Helper()
	j := jobstore.Job{ID: fmt.Sprintf("%026d", i)}
	pad := n - j.Size()
	require.GreaterOrEqual(t, pad, 2)
	j.Payload = json.RawMessage(`"` + strings.Repeat("x", pad-2) + `"`)
	require.Equal(t, n, j.Size())
	return j
}
