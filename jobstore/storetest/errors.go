package storetest

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var errorTests = []test{
	{"PrefixedOnce", testErrorsPrefixedOnce},
}

// storePrefix is the start of a store's error message: the store's package
// name and a colon, as in "filestore: get: ...".
var storePrefix = regexp.MustCompile(`^([a-z][a-z0-9]*): `)

// testErrorsPrefixedOnce: an error of an exported method names the store's
// package once, at the start ("pkg: op: ..."), however many layers it came
// through, for a few representative errors: not found, invalid input, a
// lease that holds nothing.
func testErrorsPrefixedOnce(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	id := jobstore.NewID(time.Now())
	lease := jobstore.Lease{ID: id, Worker: "w", Attempt: 1}
	calls := map[string]func() error{
		"Get not found":       func() error { _, err := s.Get(ctx, id); return err },
		"Get bad ID":          func() error { _, err := s.Get(ctx, "bad"); return err },
		"Cancel not found":    func() error { _, err := s.Cancel(ctx, id); return err },
		"Retry not found":     func() error { _, err := s.Retry(ctx, id); return err },
		"Wait not found":      func() error { _, err := s.Wait(ctx, id); return err },
		"Submit no kind":      func() error { _, _, err := s.Submit(ctx, jobstore.Spec{}); return err },
		"Claim no worker":     func() error { _, err := s.Claim(ctx, jobstore.ClaimRequest{}); return err },
		"Complete no job":     func() error { _, err := s.Complete(ctx, lease, jobstore.Succeeded(nil)); return err },
		"WatchCancel no job":  func() error { return s.WatchCancel(ctx, lease) },
		"Release no job":      func() error { return s.Release(ctx, lease) },
		"Complete bad lease":  func() error { _, err := s.Complete(ctx, jobstore.Lease{}, jobstore.Succeeded(nil)); return err },
		"Prune negative age":  func() error { _, err := s.Prune(ctx, -time.Second); return err },
		"List negative limit": func() error { _, err := s.List(ctx, jobstore.ListOptions{Limit: -1}); return err },
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		msg := err.Error()
		m := storePrefix.FindStringSubmatch(msg)
		require.NotNil(t, m, "%s: %q does not start with the store's package name", name, msg)
		require.Equal(t, 1, strings.Count(msg, m[0]), "%s: %q names %q more than once", name, msg, m[1])
	}
}
