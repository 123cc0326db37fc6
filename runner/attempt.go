package runner

import (
	"context"

	"github.com/jobdir/jobdir/jobstore"
)

// attemptKey is the context key of the attempt a handler's ctx belongs to.
type attemptKey struct{}

// attempt is what a handler's ctx carries about its attempt: the lease and
// its store (for LeaseFile), and the functions AfterAttempt registered.
// One value for both, so that an attempt's ctx costs one allocation for
// them.
type attempt struct {
	store jobstore.Worker
	lease jobstore.Lease
	after afterHooks
}

// withAttempt returns ctx carrying the attempt that lease holds in store.
func withAttempt(ctx context.Context, store jobstore.Worker, lease jobstore.Lease) (context.Context, *attempt) {
	a := &attempt{store: store, lease: lease}
	return context.WithValue(ctx, attemptKey{}, a), a
}
