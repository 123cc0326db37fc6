package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"0": 0, "90s": 90 * time.Second, "15m": 15 * time.Minute, "1m30s": 90 * time.Second, "250ms": 250 * time.Millisecond,
		"7d": 7 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1w2d3h": (9*24 + 3) * time.Hour, "1.5d": 36 * time.Hour,
		"168h": 168 * time.Hour, "3µs": 3 * time.Microsecond,
	}
	for in, want := range good {
		got, err := parseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "7", "d", "-1h", "1y", "1d-2h", "1..5d", "99999999w"} {
		_, err := parseDuration(in)
		require.Error(t, err, in)
	}
}

func TestParseAt(t *testing.T) {
	loc := time.FixedZone("here", 3600)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, loc)
	good := map[string]time.Time{
		"2026-12-24T18:30:00Z":      time.Date(2026, 12, 24, 18, 30, 0, 0, time.UTC),
		"2026-12-24 18:30":          time.Date(2026, 12, 24, 18, 30, 0, 0, loc),
		"2026-12-24T18:30:15":       time.Date(2026, 12, 24, 18, 30, 15, 0, loc),
		"2026-12-24":                time.Date(2026, 12, 24, 0, 0, 0, 0, loc),
		"15:04":                     time.Date(2026, 12, 1, 15, 4, 0, 0, loc),
		"09:30":                     time.Date(2026, 12, 2, 9, 30, 0, 0, loc), // passed today: tomorrow's
		"today 09:30":               time.Date(2026, 12, 1, 9, 30, 0, 0, loc),
		"tomorrow 09:00":            time.Date(2026, 12, 2, 9, 0, 0, 0, loc),
		"Tomorrow 09:00:30":         time.Date(2026, 12, 2, 9, 0, 30, 0, loc),
		"2026-12-24T18:30:00+01:00": time.Date(2026, 12, 24, 18, 30, 0, 0, loc),
	}
	for in, want := range good {
		got, err := parseAt(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: got %s, want %s", in, got, want)
	}
	for _, in := range []string{"", "tomorrow", "noon", "25:00", "someday 09:00", "2026-13-01"} {
		_, err := parseAt(in, now)
		require.Error(t, err, in)
	}
}

// TestInputsForPeople: durations take d and w, --at takes local times, and
// --max-attempts 0 is refused rather than read as the default.
func TestInputsForPeople(t *testing.T) {
	dir := newStoreDir(t)
	before := time.Now()
	r := jdOK(t, dir, "submit", "--json", "--delay", "1d", "--timeout", "1w", "--", "true")
	j := wireJob(t, r.stdout)
	require.WithinDuration(t, before.Add(24*time.Hour), j.RunAt, time.Minute)
	require.Equal(t, 7*24*time.Hour, j.Timeout)

	r = jdOK(t, dir, "submit", "--json", "--at", "tomorrow 09:00", "--", "true")
	j = wireJob(t, r.stdout)
	tomorrow := time.Now().AddDate(0, 0, 1)
	require.True(t, time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 9, 0, 0, 0, time.Local).Equal(j.RunAt), "run_at %s", j.RunAt)

	jdOK(t, dir, "prune", "--older-than", "2w")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--max-attempts", "0", "true"}, "--max-attempts 0: a job needs at least 1 attempt"},
		{[]string{"submit", "--delay", "3 days", "true"}, `--delay "3 days": want a duration such as 90s, 15m, 2h, 7d or 2w`},
		{[]string{"prune", "--older-than", "7x"}, `--older-than "7x": want a duration`},
		{[]string{"submit", "--at", "someday 09:00", "true"}, `--at "someday 09:00": "someday" is not a day`},
	} {
		r := jd(t, dir, tt.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tt.args, r)
		require.Contains(t, r.stderr, tt.want)
	}
}
