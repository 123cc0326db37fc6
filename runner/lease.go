package runner

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jobdir/jobdir/jobstore"
)

// LeaseFiler is implemented by a store whose lease on an attempt can be
// shared with another process. A handler that starts processes of its own
// (as execjob does) hands such a file to a process that outlives it only
// until the attempt's last process is gone, so that the store does not
// consider the attempt over, and let another worker run the job again, while
// any of them still runs.
type LeaseFiler interface {
	// LeaseFile returns a new open file whose descriptor keeps the attempt
	// that lease holds alive, in the eyes of every process sharing the
	// store, for as long as any process holds it open, including after the
	// process that claimed the job has died. The caller owns the file and
	// closes it. It does not extend a live attempt: once the claimant
	// completes the attempt, the lease is released whoever holds a copy.
	// Returns an error wrapping jobstore.ErrNotHeld if this process does
	// not hold lease.
	LeaseFile(ctx context.Context, lease jobstore.Lease) (*os.File, error)
}

// ErrNoLeaseFile is returned by LeaseFile when the attempt's store cannot
// share its lease (it does not implement LeaseFiler, or ctx is not a
// handler's). It wraps errors.ErrUnsupported.
var ErrNoLeaseFile = fmt.Errorf("runner: the store cannot share an attempt's lease with another process: %w", errors.ErrUnsupported)

// LeaseFile returns a new file that keeps the lease of the attempt whose
// handler ctx is alive while any process holds it open (see LeaseFiler).
// The caller closes it. Pass it to a child process that outlives the
// handler only while that child's work is part of the attempt: as long as
// the child holds it after the worker died, no other worker starts the job
// again. Returns ErrNoLeaseFile if the store cannot share its lease (an
// in-memory store, whose jobs die with its process anyway), and the store's
// error otherwise.
func LeaseFile(ctx context.Context) (*os.File, error) {
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok {
		return nil, ErrNoLeaseFile
	}
	lf, ok := a.store.(LeaseFiler)
	if !ok {
		return nil, ErrNoLeaseFile
	}
	f, err := lf.LeaseFile(ctx, a.lease)
	if err != nil {
		return nil, fmt.Errorf("runner: lease file of job %s: %w", a.lease.ID, err)
	}
	return f, nil
}
