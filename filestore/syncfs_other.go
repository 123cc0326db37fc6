//go:build !linux

package filestore

import "errors"

// openSyncFS reports that there is no syncfs(2): SubmitBatch then fsyncs
// each record.
func openSyncFS(string) (syncer, error) { return nil, errors.ErrUnsupported }
