package jobstore_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]jobstore.Rate{
		"100/1m":   {100, time.Minute},
		"10/s":     {10, time.Second},
		"10/1s":    {10, time.Second},
		" 5 / 1h ": {5, time.Hour},
		"1/1h30m":  {1, 90 * time.Minute},
		"3/250ms":  {3, 250 * time.Millisecond},
		"2/ms":     {2, time.Millisecond},
		"1/24h":    {1, 24 * time.Hour},
	} {
		got, err := jobstore.ParseRate(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		again, err := jobstore.ParseRate(got.String())
		require.NoError(t, err, "%s: its own text %q", in, got.String())
		require.Equal(t, got, again)
	}
	for _, in := range []string{"", "off", "10", "x/1s", "0/1s", "-1/1s", "10/", "10/x", "10/0s", "10/-1s", "10/1us", "10/25h", "10001/1s", "1.5/1s"} {
		_, err := jobstore.ParseRate(in)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "%q", in)
		require.Contains(t, err.Error(), "N/DURATION", "%q: the message says what to write", in)
	}
}

func TestRateText(t *testing.T) {
	require.Equal(t, "100/1m", jobstore.Rate{100, time.Minute}.String())
	require.Equal(t, "5/1h30m", jobstore.Rate{5, 90 * time.Minute}.String())
	require.Equal(t, "1/2h", jobstore.Rate{1, 2 * time.Hour}.String())
	require.Equal(t, "20/1s", jobstore.Rate{20, time.Second}.String())
	require.Equal(t, "", jobstore.Rate{}.String())
	b, err := json.Marshal(jobstore.QueueSettings{Rate: jobstore.Rate{20, time.Second}})
	require.NoError(t, err)
	require.Contains(t, string(b), `"rate":"20/1s"`)
	var back jobstore.QueueSettings
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, jobstore.Rate{20, time.Second}, back.Rate)
	b, err = json.Marshal(jobstore.QueueSettings{})
	require.NoError(t, err)
	require.NotContains(t, string(b), `"rate"`, "no rate, no field")
	require.ErrorIs(t, json.Unmarshal([]byte(`{"rate":"fast"}`), &back), jobstore.ErrInvalidInput)
}

// TestRateWindowAllow checks Allow against its definition, a count of the
// recorded starts in the window, over random starts recorded where Allow
// says: no window of length Per ever holds more than N of them, and a
// refused start is allowed at the time Allow gave, and not before.
func TestRateWindowAllow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		rate := jobstore.Rate{N: 1 + rng.IntN(5), Per: time.Duration(1+rng.IntN(100)) * time.Millisecond}
		base := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
		now := base
		var w jobstore.RateWindow
		var starts []time.Time
		inWindow := func(at time.Time) int {
			n := 0
			for _, s := range starts {
				if s.After(at.Add(-rate.Per)) && !s.After(at) {
					n++
				}
			}
			return n
		}
		for range 300 {
			now = now.Add(time.Duration(rng.IntN(int(rate.Per)/rate.N + 1)))
			at, ok, next := w.Allow(rate, now)
			require.Equal(t, inWindow(now) < rate.N, ok, "rate %s at +%s: %d in the window", rate, now.Sub(base), inWindow(now))
			if !ok {
				require.True(t, next.After(now), "the next start is later")
				require.Less(t, inWindow(next), rate.N, "allowed at %s", next)
				require.Equal(t, rate.N, inWindow(next.Add(-time.Nanosecond)), "and not before")
				continue
			}
			if at == len(w) {
				w = append(w, now)
			} else {
				w[at] = now
			}
			starts = append(starts, now)
			require.LessOrEqual(t, len(w), rate.N)
		}
	}
	// Starts later than now: the clock was set back. Less than a window
	// ahead, they count as now, so the queue waits one window at most;
	// further ahead, they count as none.
	rate := jobstore.Rate{N: 2, Per: time.Second}
	now := time.Unix(5000, 0)
	_, ok, _ := jobstore.RateWindow{now.Add(time.Hour), now.Add(time.Hour)}.Allow(rate, now)
	require.True(t, ok, "starts an hour ahead of the clock count as none")
	_, ok, next := jobstore.RateWindow{now.Add(500 * time.Millisecond), now.Add(900 * time.Millisecond)}.Allow(rate, now)
	require.False(t, ok)
	require.Equal(t, now.Add(time.Second), next, "starts a moment ahead hold the queue for one window from now, no more")
	at, ok, _ := jobstore.RateWindow{time.Unix(0, 1<<62), now.Add(-2 * time.Second)}.Allow(rate, now)
	require.True(t, ok, "a damaged start is none")
	require.Equal(t, 0, at, "and is the first to be written over")

	// A lowered N: the newest starts are kept.
	base := time.Unix(1000, 0)
	w := jobstore.RateWindow{base.Add(3), base.Add(1), base.Add(4), base.Add(2)}
	got := w.Trim(2)
	slices.SortFunc(got, time.Time.Compare)
	require.Equal(t, []time.Time{base.Add(3), base.Add(4)}, []time.Time(got))
}
