package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// TestSubmitMiddleware: the middleware of WithSubmitMiddleware run in
// order around every Submit and SubmitBatch, may change the specs and see
// the results, and may refuse a submit, which then creates nothing; a
// batch reaches them as one call.
func TestSubmitMiddleware(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(nil)
	t.Cleanup(func() { _ = s.Close() })
	var calls []string
	trace := func(name string) jobstore.SubmitMiddleware {
		return func(next jobstore.SubmitFunc) jobstore.SubmitFunc {
			return func(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
				calls = append(calls, fmt.Sprintf("%s in %d", name, len(specs)))
				res, err := next(ctx, specs)
				calls = append(calls, fmt.Sprintf("%s out %d", name, len(res)))
				return res, err
			}
		}
	}
	urgent := func(next jobstore.SubmitFunc) jobstore.SubmitFunc {
		return func(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
			for i := range specs {
				if specs[i].Kind == "page.oncall" {
					specs[i].Priority = 100
				}
				if specs[i].Kind == "forbidden" {
					return nil, fmt.Errorf("spec %d: %w: kind forbidden here", i, jobstore.ErrInvalidInput)
				}
			}
			return next(ctx, specs)
		}
	}
	c, err := jobstore.WithSubmitMiddleware(s, trace("outer"), urgent, trace("inner"))
	require.NoError(t, err)

	j, created, err := c.Submit(ctx, jobstore.Spec{Kind: "page.oncall"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 100, j.Priority, "the middleware set it")
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, 100, got.Priority, "as stored")
	require.Equal(t, []string{"outer in 1", "inner in 1", "inner out 1", "outer out 1"}, calls)

	calls = nil
	specs := []jobstore.Spec{{Kind: "email.send"}, {Kind: "page.oncall"}, {Kind: "email.send", Key: "k"}}
	res, err := c.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, 100, res[1].Job.Priority)
	require.Zero(t, specs[1].Priority, "the caller's specs are its own")
	require.Equal(t, []string{"outer in 3", "inner in 3", "inner out 3", "outer out 3"}, calls, "one call for the batch")

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	before := st.Counts[jobstore.StateQueued]
	_, err = c.SubmitBatch(ctx, []jobstore.Spec{{Kind: "email.send"}, {Kind: "forbidden"}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, _, err = c.Submit(ctx, jobstore.Spec{Kind: "forbidden"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, before, st.Counts[jobstore.StateQueued], "a refused submit creates nothing")

	// The other methods are the store's.
	got, err = c.Get(ctx, res[0].Job.ID)
	require.NoError(t, err)
	require.Equal(t, "email.send", got.Kind)

	_, err = jobstore.WithSubmitMiddleware(s, nil)
	require.Error(t, err)
	_, err = jobstore.WithSubmitMiddleware(s, func(jobstore.SubmitFunc) jobstore.SubmitFunc { return nil })
	require.Error(t, err)
	wrong, err := jobstore.WithSubmitMiddleware(s, func(jobstore.SubmitFunc) jobstore.SubmitFunc {
		return func(context.Context, []jobstore.Spec) ([]jobstore.Submitted, error) { return nil, nil }
	})
	require.NoError(t, err)
	_, _, err = wrong.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.Error(t, err, "a middleware that returns no result for the spec")
	require.False(t, errors.Is(err, jobstore.ErrInvalidInput))
}
