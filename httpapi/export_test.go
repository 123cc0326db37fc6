package httpapi

// BodyBytesInFlight returns the bytes of request bodies admitted and not
// yet released, so that a test can tell when a request got in.
func (s *Server) BodyBytesInFlight() int64 {
	s.bodies.mu.Lock()
	defer s.bodies.mu.Unlock()
	return s.bodies.used
}
