//go:build unix && !linux

package filestore

// watchEnds has no close events to watch outside Linux: the periodic
// recovery pass alone finds a dead worker's job. It starts nothing.
func (s *Store) watchEnds() (func(), error) { return func() {}, nil }
