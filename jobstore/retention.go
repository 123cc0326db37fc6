package jobstore

import (
	"context"
	"fmt"
	"time"
)

// Retention is a store-wide policy of how long finished jobs are kept:
// the processes that fire schedules (runner.Options.Schedules, jobdir work
// and serve) prune the jobs of each end state that finished longer ago
// than its duration, so that no outside cron is needed to keep a store
// small. Zero keeps that state's jobs.
type Retention struct {
	Succeeded time.Duration `json:"succeeded_ns,omitempty"`
	Failed    time.Duration `json:"failed_ns,omitempty"`
	Canceled  time.Duration `json:"canceled_ns,omitempty"`
}

// MinRetention is the shortest duration a Retention keeps jobs for: a job
// is never pruned less than this after it finished, so that a waiter or a
// person sees how it ended.
const MinRetention = time.Minute

// Validate checks r: each duration zero, or at least MinRetention. Its
// error wraps ErrInvalidInput.
func (r Retention) Validate() error {
	for _, d := range []struct {
		state State
		d     time.Duration
	}{{StateSucceeded, r.Succeeded}, {StateFailed, r.Failed}, {StateCanceled, r.Canceled}} {
		if d.d != 0 && d.d < MinRetention {
			return fmt.Errorf("%w: %s jobs would be kept %s, less than %s (0 keeps them)", ErrInvalidInput, d.state, d.d, MinRetention)
		}
	}
	return nil
}

// IsZero reports whether r prunes nothing.
func (r Retention) IsZero() bool { return r == Retention{} }

// Of returns how long r keeps the jobs of state, zero if it keeps them.
func (r Retention) Of(state State) time.Duration {
	switch state {
	case StateSucceeded:
		return r.Succeeded
	case StateFailed:
		return r.Failed
	case StateCanceled:
		return r.Canceled
	}
	return 0
}

// RetentionKeeper is a Store that keeps a Retention policy: memstore,
// filestore and pgstore implement it. A change is durable when
// SetRetention returns, and every process of the store sees it.
type RetentionKeeper interface {
	// Retention returns the store's policy; the zero Retention if none
	// was set.
	Retention(ctx context.Context) (Retention, error)
	// SetRetention replaces the store's policy with r; an invalid r gives
	// an error wrapping ErrInvalidInput and changes nothing.
	SetRetention(ctx context.Context, r Retention) error
}
