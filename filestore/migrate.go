package filestore

import "context"

// migrateLegacy migrates a directory written by the old single-process
// file store.
func (s *Store) migrateLegacy(context.Context) error { return nil }
