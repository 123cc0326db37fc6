package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// errDuration says what a duration flag accepts.
// errNegativeDuration is the error of a duration that starts with "-":
// every duration the command takes counts forward.
var errNegativeDuration = errors.New("must not be negative: it counts forward from now")

var errDuration = errors.New("want a duration such as 90s, 15m, 2h, 7d or 2w (d is 24h, w is 7d; units combine, as in 1d12h)")

// durationUnits are the units parseDuration accepts, longest first where
// one is a prefix of another.
var durationUnits = []struct {
	name string
	d    time.Duration
}{
	{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"ms", time.Millisecond},
	{"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour},
}

// parseDuration reads a non-negative duration as Go writes them, with d
// (24 hours) and w (7 days) as well: "7d", "1w2d", "36h", "1.5d", "0".
func parseDuration(s string) (time.Duration, error) {
	switch s {
	case "0":
		return 0, nil
	case "":
		return 0, errDuration
	}
	if strings.HasPrefix(s, "-") {
		return 0, errNegativeDuration
	}
	rest := s
	var total float64
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, errDuration
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, errDuration
		}
		rest = rest[i:]
		unit := time.Duration(0)
		for _, u := range durationUnits {
			if strings.HasPrefix(rest, u.name) { // ms and µs come before m and s
				unit, rest = u.d, rest[len(u.name):]
				break
			}
		}
		if unit == 0 {
			return 0, errDuration
		}
		total += n * float64(unit)
		if total > float64(1<<63-1) {
			return 0, errors.New("that duration is too long")
		}
	}
	return time.Duration(total), nil
}

// durationValue is a pflag.Value read by parseDuration.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// String is the value as Go writes durations, and "0" for none, which
// pflag leaves out of the help as a zero default.
func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}
func (d *durationValue) Type() string { return "duration" }

// durationVar defines a duration flag on f that accepts d and w.
func durationVar(f *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*durationValue)(p), name, usage)
}

// atLayouts are the local date and time forms --at accepts besides RFC 3339.
var atLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// parseAt reads the time of --at, relative to now in now's location: RFC
// 3339 ("2026-11-29T18:30:00Z"), a local date and time ("2026-11-29
// 18:30"), a time of day ("18:30", the next time the clock shows it), or
// "today 18:30" or "tomorrow 09:00".
func parseAt(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range atLayouts {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			return t, nil
		}
	}
	day, clock, hasDay := strings.Cut(s, " ")
	if !hasDay {
		day, clock = "", s
	}
	var hm time.Time
	var err error
	for _, layout := range []string{"15:04", "15:04:05"} {
		if hm, err = time.Parse(layout, clock); err == nil {
			break
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("want a time such as 18:30, tomorrow 09:00, 2026-11-29 18:30 or 2026-11-29T18:30:00Z")
	}
	at := func(d time.Time) time.Time {
		return time.Date(d.Year(), d.Month(), d.Day(), hm.Hour(), hm.Minute(), hm.Second(), 0, now.Location())
	}
	switch strings.ToLower(day) {
	case "":
		t := at(now)
		if !t.After(now) {
			t = at(now.AddDate(0, 0, 1))
		}
		return t, nil
	case "today":
		return at(now), nil
	case "tomorrow":
		return at(now.AddDate(0, 0, 1)), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a day: write today, tomorrow or a date such as 2026-11-29", day)
}

// byteSizeValue is a flag of a size in bytes: a whole number, with an
// optional unit K, M or G (1024-based, with or without B or iB, in either
// case), as in 10MiB, 10MB, 10M or 10485760.
type byteSizeValue int64

// byteUnits are the units byteSizeValue takes, longest first.
var byteUnits = []struct {
	name string
	n    int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

// errByteSize is the error of a size that does not parse.
var errByteSize = errors.New("want a size such as 10MiB, 512K or 1048576 (K, M and G are 1024-based)")

func parseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(t, u.name); ok {
			t, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errByteSize
	}
	return n * mult, nil
}

func (b *byteSizeValue) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSizeValue(n)
	return nil
}

// String writes the size in the largest unit that divides it.
func (b *byteSizeValue) String() string {
	n := int64(*b)
	for _, u := range []struct {
		name string
		n    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSizeValue) Type() string { return "size" }

// byteSizeVar defines a size flag on f (see byteSizeValue).
func byteSizeVar(f *pflag.FlagSet, p *int64, name string, value int64, usage string) {
	*p = value
	f.Var((*byteSizeValue)(p), name, usage)
}
