package jobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// TestScheduleNext: the forms of a spec, read in the schedule's zone;
// @every ticks at the multiples of its duration since the Unix epoch.
func TestScheduleNext(t *testing.T) {
	for _, tc := range []struct {
		spec, tz, after, want string
	}{
		{"0 3 * * *", "", "2026-12-01T12:00:00Z", "2026-12-02T03:00:00Z"},
		{"0 3 * * *", "Europe/Berlin", "2026-12-01T12:00:00Z", "2026-12-02T02:00:00Z"},
		{"0 3 * * *", "Europe/Berlin", "2026-07-01T12:00:00Z", "2026-07-02T01:00:00Z"},
		{"*/15 9-17 * * 1-5", "", "2026-12-04T17:50:00Z", "2026-12-07T09:00:00Z"}, // Friday to Monday
		{"*/10 * * * * *", "", "2026-12-01T12:00:03Z", "2026-12-01T12:00:10Z"},
		{"@hourly", "", "2026-12-01T12:00:00Z", "2026-12-01T13:00:00Z"},
		{"@daily", "America/New_York", "2026-12-01T12:00:00Z", "2026-12-02T05:00:00Z"},
		{"@every 1h", "", "2026-12-01T10:17:05Z", "2026-12-01T11:00:00Z"},
		{"@every 1h", "Asia/Kolkata", "2026-12-01T10:17:05Z", "2026-12-01T11:00:00Z"}, // UTC multiples, whatever the zone
		{"@every 90s", "", "2026-12-01T00:00:00Z", "2026-12-01T00:01:30Z"},
		{"@every 7s", "", "2026-12-01T00:00:00Z", time.Unix((utc("2026-12-01T00:00:00Z").Unix()/7+1)*7, 0).UTC().Format(time.RFC3339)},
		{"@every 1s", "", "2026-12-01T00:00:00.5Z", "2026-12-01T00:00:01Z"},
	} {
		s := jobstore.Schedule{Name: "n", Spec: tc.spec, TZ: tc.tz, Job: jobstore.Spec{Kind: "k"}}
		require.NoError(t, s.Validate(0), tc.spec)
		after, err := time.Parse(time.RFC3339Nano, tc.after)
		require.NoError(t, err)
		require.Equal(t, utc(tc.want), s.Next(after), "%s in %q after %s", tc.spec, tc.tz, tc.after)
	}
}

// TestScheduleDaylightSaving: in a zone with daylight saving, a time that
// the spring change skips does not tick that day, and one that the autumn
// change repeats ticks twice, an hour apart (New York, 2026: 8 March 02:00
// becomes 03:00; 1 November 02:00 becomes 01:00).
func TestScheduleDaylightSaving(t *testing.T) {
	skipped := jobstore.Schedule{Name: "n", Spec: "30 2 * * *", TZ: "America/New_York", Job: jobstore.Spec{Kind: "k"}}
	t1 := skipped.Next(utc("2026-03-06T12:00:00Z"))
	require.Equal(t, utc("2026-03-07T07:30:00Z"), t1, "02:30 EST on the 7th")
	require.Equal(t, utc("2026-03-09T06:30:00Z"), skipped.Next(t1), "no 02:30 on the 8th: the 9th, 02:30 EDT")

	repeated := jobstore.Schedule{Name: "n", Spec: "30 1 * * *", TZ: "America/New_York", Job: jobstore.Spec{Kind: "k"}}
	t1 = repeated.Next(utc("2026-10-31T12:00:00Z"))
	require.Equal(t, utc("2026-11-01T05:30:00Z"), t1, "01:30 EDT")
	t2 := repeated.Next(t1)
	require.Equal(t, utc("2026-11-01T06:30:00Z"), t2, "01:30 EST, an hour later")
	require.Equal(t, utc("2026-11-02T06:30:00Z"), repeated.Next(t2))
	require.NotEqual(t, jobstore.TickKey("n", t1), jobstore.TickKey("n", t2), "two ticks, two jobs")
}

func TestTickKey(t *testing.T) {
	require.Equal(t, "schedule:nightly:2026-12-01T03:00:00Z", jobstore.TickKey("nightly", utc("2026-12-01T03:00:00Z")))
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	require.Equal(t, "schedule:nightly:2026-12-01T03:00:00Z",
		jobstore.TickKey("nightly", time.Date(2026, 12, 1, 4, 0, 0, 999, berlin)), "UTC, to the second")
	require.NoError(t, jobstore.ValidateKey(jobstore.TickKey(strings.Repeat("n", jobstore.MaxScheduleNameLen), time.Now())))
}

// TestScheduleInvalid: each bad schedule is refused with ErrInvalidInput
// and words that say what is wrong.
func TestScheduleInvalid(t *testing.T) {
	good := jobstore.Schedule{Name: "nightly", Spec: "0 3 * * *", Job: jobstore.Spec{Kind: "report"}}
	require.NoError(t, good.Validate(0))
	for name, tc := range map[string]struct {
		edit func(*jobstore.Schedule)
		says string
	}{
		"no name":          {func(s *jobstore.Schedule) { s.Name = "" }, "needs a name"},
		"name with colon":  {func(s *jobstore.Schedule) { s.Name = "a:b" }, "only letters, digits and ._-"},
		"name too long":    {func(s *jobstore.Schedule) { s.Name = strings.Repeat("n", jobstore.MaxScheduleNameLen+1) }, "limit"},
		"no spec":          {func(s *jobstore.Schedule) { s.Spec = " " }, "needs a spec"},
		"minute 61":        {func(s *jobstore.Schedule) { s.Spec = "61 * * * *" }, "is not a cron expression"},
		"four fields":      {func(s *jobstore.Schedule) { s.Spec = "0 3 * *" }, "is not a cron expression"},
		"every half":       {func(s *jobstore.Schedule) { s.Spec = "@every 1500ms" }, "whole seconds"},
		"every word":       {func(s *jobstore.Schedule) { s.Spec = "@every often" }, "not a duration"},
		"zone in spec":     {func(s *jobstore.Schedule) { s.Spec = "CRON_TZ=UTC 0 3 * * *" }, "time zone on its own"},
		"unknown zone":     {func(s *jobstore.Schedule) { s.TZ = "Mars/Olympus" }, "IANA name"},
		"local zone":       {func(s *jobstore.Schedule) { s.TZ = "Local" }, "IANA name"},
		"bad catch-up":     {func(s *jobstore.Schedule) { s.CatchUp = "some" }, "want skip, one or all"},
		"negative window":  {func(s *jobstore.Schedule) { s.CatchUpWindow = -time.Second }, "negative"},
		"bad overlap":      {func(s *jobstore.Schedule) { s.Overlap = "never" }, "want allow, skip or queue"},
		"job with a key":   {func(s *jobstore.Schedule) { s.Job.Key = "k" }, "keyed by its tick"},
		"job without kind": {func(s *jobstore.Schedule) { s.Job.Kind = "" }, "kind is required"},
	} {
		s := good
		tc.edit(&s)
		err := s.Validate(0)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
		require.Contains(t, err.Error(), tc.says, name)
		require.NotContains(t, err.Error(), "cron:", name)
	}
	bad := good
	bad.Spec = "61 * * * *"
	require.True(t, bad.Next(time.Now()).IsZero(), "an invalid spec has no next tick")
	require.Empty(t, bad.Plan(time.Time{}, time.Now()).Fire, "nor a plan")
}

// TestSchedulePlan: what is due after a tick, after downtime under each
// catch-up policy, and when paused.
func TestSchedulePlan(t *testing.T) {
	s := jobstore.Schedule{Name: "m", Spec: "@every 1m", Job: jobstore.Spec{Kind: "k"}, CreatedAt: utc("2026-12-01T10:00:30Z")}
	at := func(p jobstore.TickPlan) []string {
		var out []string
		for _, tk := range p.Fire {
			s := tk.At.Format("15:04")
			if tk.CatchUp {
				s += "*"
			}
			out = append(out, s)
		}
		return out
	}
	last := utc("2026-12-01T10:05:00Z")

	p := s.Plan(last, utc("2026-12-01T10:05:59Z"))
	require.Empty(t, p.Fire, "nothing due")
	p = s.Plan(last, utc("2026-12-01T10:06:00.4Z"))
	require.Equal(t, []string{"10:06"}, at(p))
	require.Equal(t, "schedule:m:2026-12-01T10:06:00Z", p.Fire[0].Key)
	require.Zero(t, p.Skipped)
	p = s.Plan(time.Time{}, utc("2026-12-01T10:01:10Z"))
	require.Equal(t, []string{"10:01"}, at(p), "never fired: the ticks after CreatedAt")

	// Down from 10:05 to 10:15:30: 10:06 to 10:14 were missed, 10:15 is due.
	now := utc("2026-12-01T10:15:30Z")
	s.CatchUp = jobstore.CatchUpSkip
	p = s.Plan(last, now)
	require.Equal(t, []string{"10:15"}, at(p))
	require.Equal(t, 9, p.Skipped)
	s.CatchUp = ""
	p = s.Plan(last, now)
	require.Equal(t, []string{"10:14*", "10:15"}, at(p), "one: the latest missed tick stands for them all")
	require.Equal(t, 8, p.Skipped)
	s.CatchUp = jobstore.CatchUpAll
	p = s.Plan(last, now)
	require.Equal(t, []string{"10:06*", "10:07*", "10:08*", "10:09*", "10:10*", "10:11*", "10:12*", "10:13*", "10:14*", "10:15"}, at(p))
	require.Zero(t, p.Skipped)
	s.CatchUpWindow = 3 * time.Minute
	p = s.Plan(last, now)
	require.Equal(t, []string{"10:13*", "10:14*", "10:15"}, at(p), "all, within the window")
	require.Equal(t, 7, p.Skipped)

	s.Paused = true
	require.Empty(t, s.Plan(last, now).Fire, "a paused schedule fires nothing")

	// A daily schedule down for three days, in a zone.
	d := jobstore.Schedule{Name: "d", Spec: "0 3 * * *", TZ: "Europe/Berlin", Job: jobstore.Spec{Kind: "k"}, CreatedAt: utc("2026-11-01T00:00:00Z")}
	p = d.Plan(utc("2026-11-28T02:00:00Z"), utc("2026-12-01T12:00:00Z"))
	require.Equal(t, []string{"02:00*", "02:00"}, at(p))
	require.Equal(t, utc("2026-11-30T02:00:00Z"), p.Fire[0].At)
	require.Equal(t, utc("2026-12-01T02:00:00Z"), p.Fire[1].At)
	require.Equal(t, 1, p.Skipped)

	// Long downtime of a schedule that ticks every second stays cheap and
	// bounded.
	for _, spec := range []string{"@every 1s", "* * * * * *"} {
		f := jobstore.Schedule{Name: "f", Spec: spec, Job: jobstore.Spec{Kind: "k"}, CatchUp: jobstore.CatchUpAll}
		begin := time.Now()
		p = f.Plan(utc("2026-11-01T00:00:00Z"), utc("2026-12-01T00:00:00.5Z"))
		require.Len(t, p.Fire, jobstore.MaxCatchUpTicks+1, spec)
		require.Equal(t, utc("2026-12-01T00:00:00Z"), p.Fire[len(p.Fire)-1].At, spec)
		require.Greater(t, p.Skipped, 80_000, spec)
		t.Logf("%s: a month of missed ticks planned in %v", spec, time.Since(begin))
	}
}

// TestScheduleDefaults: a schedule's zone and policies as shown, the spec
// of a tick's job, and no next tick while paused.
func TestScheduleDefaults(t *testing.T) {
	s := jobstore.Schedule{Name: "n", Spec: "@hourly", Job: jobstore.Spec{Kind: "k", Queue: "q"}}
	require.Equal(t, "UTC", s.Zone())
	c, o := s.Policies()
	require.Equal(t, jobstore.CatchUpOne, c)
	require.Equal(t, jobstore.OverlapAllow, o)
	tick := utc("2026-12-01T03:00:00Z")
	require.Equal(t, jobstore.Spec{Kind: "k", Queue: "q", Key: "schedule:n:2026-12-01T03:00:00Z"}, s.JobAt(tick))
	require.Empty(t, s.Job.Key, "JobAt changed the schedule's job")
	require.False(t, s.Next(tick).IsZero())
	s.Paused = true
	require.True(t, s.Next(tick).IsZero(), "a paused schedule has no next tick")
}
