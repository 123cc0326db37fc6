//go:build unix && !linux

package filestore

import (
	"context"
	"os"
)

// rangeLocks is never made outside Linux: without open file description
// locks a store keeps a lock file per job (lockPath).
type rangeLocks struct{}

func openRangeLocks(string, os.FileMode) *rangeLocks { return nil }

func (*rangeLocks) lock(context.Context, int64, bool, bool) (func(), bool, error) {
	panic("filestore: range locks outside Linux")
}

func (*rangeLocks) close() {}
