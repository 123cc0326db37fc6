package otelrunner

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/runner"
)

// TestOutcomeOf covers the outcomes TestSpanPerAttempt does not make: a
// handler that returns once its ctx ended says why by the ctx's cause.
func TestOutcomeOf(t *testing.T) {
	ended := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	stop := errors.New("stopped")
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{context.Background(), nil, OutcomeSucceeded},
		{context.Background(), stop, OutcomeFailed},
		{ended(runner.ErrCanceled), stop, OutcomeCanceled},
		{ended(runner.ErrShutdown), stop, OutcomeInterrupted},
		{ended(errors.Join(runner.ErrLeaseLost, errors.New("not held"))), stop, OutcomeLeaseLost},
		{ended(runner.ErrTimeout), stop, OutcomeTimedOut},
		{ended(runner.ErrCanceled), nil, OutcomeSucceeded}, // a success is a success
	} {
		require.Equal(t, c.want, outcomeOf(c.ctx, c.err))
	}
}
