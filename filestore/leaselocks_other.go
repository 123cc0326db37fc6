//go:build unix && !linux

package filestore

import "os"

// Outside Linux a store has no range locks (rangeLocks), so each lease is
// the flock of a lease file (tryLockFile); these are never called.

func tryRangeLease(*leaseSpares, string, int64, os.FileMode) (*os.File, bool, error) {
	panic("filestore: range leases outside Linux")
}

func unlockRangeLease(*os.File, int64) { panic("filestore: range leases outside Linux") }

func rangeLeaseHeld(string, int64) (bool, error) {
	panic("filestore: range leases outside Linux")
}

// leaseSpares keeps nothing outside Linux, where leases are lease files.
type leaseSpares struct{}

func (*leaseSpares) close() {}
