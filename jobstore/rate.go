package jobstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rate is a queue's rate limit: at most N of its jobs start in any window
// of length Per, in every process of the store together (a sliding
// window, not fixed buckets). The zero value is no rate limit.
//
// Its text form, in flags, JSON and the queue settings, is "N/DURATION",
// such as "100/1m", "20/1s" or "5/1h30m"; a unit alone stands for one of
// it ("10/s" is "10/1s").
type Rate struct {
	// N is the most starts in a window, 1 to MaxRateStarts.
	N int
	// Per is the window's length, MinRateWindow to MaxRateWindow.
	Per time.Duration
}

// Bounds of a Rate.
const (
	// MaxRateStarts is the largest N of a Rate.
	MaxRateStarts = 10000
	// MinRateWindow is the shortest window of a Rate.
	MinRateWindow = time.Millisecond
	// MaxRateWindow is the longest window of a Rate.
	MaxRateWindow = 24 * time.Hour
)

// IsZero reports whether r is no rate limit.
func (r Rate) IsZero() bool { return r == Rate{} }

// String returns r's text form, "N/DURATION" with the duration written
// without zero units ("100/1m", "5/1h30m"), or "" for the zero Rate.
func (r Rate) String() string {
	if r.IsZero() {
		return ""
	}
	return strconv.Itoa(r.N) + "/" + shortDuration(r.Per)
}

// shortDuration writes d as time.Duration does, less the zero units that
// end it: "1m", not "1m0s"; "1h30m", not "1h30m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Validate checks r: the zero Rate, or N of 1 to MaxRateStarts and Per of
// MinRateWindow to MaxRateWindow. Its error wraps ErrInvalidInput.
func (r Rate) Validate() error {
	if r.IsZero() {
		return nil
	}
	if r.N < 1 || r.N > MaxRateStarts {
		return fmt.Errorf("%w: rate %d starts out of range 1..%d", ErrInvalidInput, r.N, MaxRateStarts)
	}
	if r.Per < MinRateWindow || r.Per > MaxRateWindow {
		return fmt.Errorf("%w: rate window %s out of range %s..%s", ErrInvalidInput, r.Per, MinRateWindow, shortDuration(MaxRateWindow))
	}
	return nil
}

// ParseRate parses a rate's text form, "N/DURATION": "100/1m", "20/1s",
// "10/s" (a unit alone is one of it). The rate must pass Validate. Its
// error wraps ErrInvalidInput and says what to write.
func ParseRate(s string) (Rate, error) {
	bad := func(why string) (Rate, error) {
		return Rate{}, fmt.Errorf("%w: rate %q %s; write N/DURATION, such as 100/1m or 10/s (at most N starts in any window of that length)", ErrInvalidInput, s, why)
	}
	ns, ds, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return bad("has no /")
	}
	n, err := strconv.Atoi(strings.TrimSpace(ns))
	if err != nil {
		return bad("does not start with a whole number")
	}
	ds = strings.TrimSpace(ds)
	if ds != "" && strings.IndexFunc(ds[:1], func(r rune) bool { return r >= '0' && r <= '9' || r == '.' }) < 0 {
		ds = "1" + ds // "s" is "1s"
	}
	per, err := time.ParseDuration(ds)
	if err != nil {
		return bad("has no duration after the / (such as 1s, 1m or 1h)")
	}
	if n < 1 || n > MaxRateStarts {
		return bad(fmt.Sprintf("has N out of range 1..%d", MaxRateStarts))
	}
	if per < MinRateWindow || per > MaxRateWindow {
		return bad(fmt.Sprintf("has a window out of range %s..%s", MinRateWindow, shortDuration(MaxRateWindow)))
	}
	return Rate{N: n, Per: per}, nil
}

// MarshalText encodes r in its text form ("" for none).
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText decodes r's text form; "" is the zero Rate.
func (r *Rate) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = Rate{}
		return nil
	}
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// RateWindow is what a store keeps of a rate-limited queue's recent
// starts: the times of up to N of them, in no order, where N is the
// rate's. Stores use it to decide a claim: Allow says whether a start at
// now keeps the rate, and when the next one will if not.
type RateWindow []time.Time

// Allow reports whether a start at now keeps rate: fewer than rate.N of
// the starts in w are later than now minus rate.Per. If so, it returns
// the index in w where now is to be recorded: len(w) while w holds fewer
// than rate.N starts, else its oldest start, which no window that now is
// in can count any more. If not, it returns the time the next start is
// allowed, when one of those starts leaves the window.
//
// A start later than now (the clock was set back since, or the record is
// damaged) counts as a start at now if it is less than rate.Per ahead,
// and as none if it is further: so a clock set back holds the queue for
// at most rate.Per.
func (w RateWindow) Allow(rate Rate, now time.Time) (at int, ok bool, next time.Time) {
	since := now.Add(-rate.Per)
	var in []time.Time
	oldest := -1
	var oldestAt time.Time
	for i, t := range w {
		if t.After(now) {
			if t.Sub(now) < rate.Per {
				t = now
			} else {
				t = time.Time{}
			}
		}
		if t.After(since) {
			in = append(in, t)
		}
		if oldest < 0 || t.Before(oldestAt) {
			oldest, oldestAt = i, t
		}
	}
	if len(in) >= rate.N {
		slices.SortFunc(in, time.Time.Compare)
		return 0, false, in[len(in)-rate.N].Add(rate.Per)
	}
	if len(w) < rate.N {
		return len(w), true, time.Time{}
	}
	return oldest, true, time.Time{}
}

// Trim returns the newest n starts of w, for a rate whose N was lowered
// to n.
func (w RateWindow) Trim(n int) RateWindow {
	if len(w) <= n {
		return w
	}
	w = slices.Clone(w)
	slices.SortFunc(w, func(a, b time.Time) int { return b.Compare(a) })
	return w[:n]
}
