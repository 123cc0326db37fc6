package jobstore

import (
	"math/rand/v2"
	"time"
)

// MaxBackoff caps the delay Backoff returns.
const MaxBackoff = time.Hour

// BackoffFunc returns how long a job waits before attempt+1 after attempt
// failed.
type BackoffFunc func(attempt int) time.Duration

// Backoff is the default BackoffFunc: attempt⁴ seconds (1s, 16s, 81s,
// 256s, …, as River does), capped at MaxBackoff, then spread by ±10% of
// jitter so that jobs that failed together do not retry together.
func Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := MaxBackoff
	if attempt < 60 { // 60^4 s is far past the cap; avoids overflow
		if s := time.Duration(attempt*attempt*attempt*attempt) * time.Second; s < d {
			d = s
		}
	}
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(d))
	return d + jitter
}
