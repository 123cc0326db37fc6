package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// leaseFileStore is a memstore that hands out a file per lease, recording
// which leases it was asked for.
type leaseFileStore struct {
	*memstore.Store
	dir    string
	leases chan jobstore.Lease
}

func (s *leaseFileStore) LeaseFile(ctx context.Context, lease jobstore.Lease) (*os.File, error) {
	j, err := s.Get(ctx, lease.ID)
	if err != nil {
		return nil, err
	}
	if !j.Holds(lease) {
		return nil, jobstore.ErrNotHeld
	}
	s.leases <- lease
	return os.Create(filepath.Join(s.dir, lease.ID))
}

// TestLeaseFile checks that a handler reaches its attempt's lease file
// through its ctx when the store can share one, and gets ErrNoLeaseFile
// otherwise.
func TestLeaseFile(t *testing.T) {
	_, err := runner.LeaseFile(t.Context())
	require.ErrorIs(t, err, runner.ErrNoLeaseFile, "outside a handler")
	require.ErrorIs(t, err, errors.ErrUnsupported)

	for _, shares := range []bool{true, false} {
		mem := newStore(t, nil)
		var store jobstore.Store = mem
		lfs := &leaseFileStore{Store: mem, dir: t.TempDir(), leases: make(chan jobstore.Lease, 1)}
		if shares {
			store = lfs
		}
		r := runner.New(store, nil)
		r.Handle("work", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
			f, err := runner.LeaseFile(ctx)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return json.Marshal(filepath.Base(f.Name()))
		}))
		start(t, r)
		j := wait(t, store, submit(t, store, jobstore.Spec{Kind: "work", MaxAttempts: 1}).ID)
		if !shares {
			require.Equal(t, jobstore.StateFailed, j.State)
			require.Contains(t, j.LastError, runner.ErrNoLeaseFile.Error())
			continue
		}
		require.Equal(t, jobstore.StateSucceeded, j.State, j.LastError)
		require.JSONEq(t, `"`+j.ID+`"`, string(j.Result))
		require.Equal(t, jobstore.Lease{ID: j.ID, Worker: r.Worker(), Attempt: 1}, <-lfs.leases)
	}
}
