package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Defaults of the limits in Options.
const (
	// DefaultMaxConcurrent is Options.MaxConcurrent when it is zero.
	DefaultMaxConcurrent = 16
	// DefaultMaxWaits is Options.MaxWaits when it is zero.
	DefaultMaxWaits = 256
	// DefaultMaxBodyBytesInFlight is Options.MaxBodyBytesInFlight when it
	// is zero.
	DefaultMaxBodyBytesInFlight = 128 << 20
	// DefaultMaxListBytes is Options.MaxListBytes when it is zero.
	DefaultMaxListBytes = 4 << 20
)

// retryAfter is the Retry-After of a request refused because the server
// is at one of its limits.
const retryAfter = time.Second

// budget is a count that requests take from and give back, without
// waiting: a request that does not fit is refused at once. It is safe for
// concurrent use.
type budget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

// take takes n from b and reports whether it fit.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// give returns n to b.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// admit takes what a request on route pattern needs from the server's
// budgets before it is served: a slot among MaxConcurrent (or MaxWaits for
// the wait long-poll), and for a submit its body's bytes from
// MaxBodyBytesInFlight. It returns the function that gives them back, or
// the error to refuse the request with: 503 busy when a budget is spent,
// 413 when the declared body is over the route's limit (refused before a
// byte of it is read).
func (s *Server) admit(r *http.Request, pattern string) (release func(), e *Error) {
	slots := &s.requests
	if pattern == routeWait {
		slots = &s.waits
	}
	if !slots.take(1) {
		if pattern == routeWait {
			return nil, busy("%d wait long-polls are in progress, the most this server serves at once", slots.max)
		}
		return nil, busy("%d requests are in progress, the most this server serves at once", slots.max)
	}
	var body int64
	switch pattern {
	case routeSubmit, routeBatch:
		limit := s.maxBody
		if pattern == routeBatch {
			limit = s.maxBatchBody
		}
		if r.ContentLength > limit {
			slots.give(1)
			return nil, newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
				"request body of %d bytes is over the limit of %d bytes", r.ContentLength, limit)
		}
		// A body of undeclared length may be as long as the limit.
		body = limit
		if r.ContentLength >= 0 {
			body = r.ContentLength
		}
		if !s.bodies.take(body) {
			slots.give(1)
			return nil, busy("request bodies of %d bytes are being read, the most this server holds at once; this one would take %d more", s.bodies.max, body)
		}
	}
	return func() {
		s.bodies.give(body)
		slots.give(1)
	}, nil
}

// busy returns the 503 busy error of a request refused at a limit.
func busy(format string, args ...any) *Error {
	e := newError(http.StatusServiceUnavailable, CodeBusy, format+"; try again later", args...)
	e.retryAfter = retryAfter
	return e
}

// reject answers r with e without reading its body: a refused request
// (no token, over a limit) must cost the server nothing more. If r has a
// body, the connection is closed after the answer, since what follows on
// it is the unread body; its read deadline is moved to now so that the
// server does not wait for a body the client trickles.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, e *Error) {
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	s.writeError(w, r, e)
}

// retryAfterValue is the Retry-After header value for d: whole seconds,
// at least 1.
func retryAfterValue(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
