package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// scheduleTests check jobstore.Scheduler, for the stores that implement
// it; the others skip them.
var scheduleTests = []test{
	{"AddAndList", scheduler(testSchedulesAdd)},
	{"NameTakenOrReplaced", scheduler(testSchedulesReplace)},
	{"Invalid", scheduler(testSchedulesInvalid)},
	{"PauseAndResume", scheduler(testSchedulesPause)},
	{"Remove", scheduler(testSchedulesRemove)},
	{"RecordTickOnlyForward", scheduler(testSchedulesRecordTick)},
	{"Copies", scheduler(testSchedulesCopies)},
	{"AfterClose", scheduler(testSchedulesClose)},
}

// scheduler adapts a test of a Scheduler, skipping stores that are not.
func scheduler(fn func(t *testing.T, s jobstore.Store, sc jobstore.Scheduler)) func(t *testing.T, s jobstore.Store) {
	return func(t *testing.T, s jobstore.Store) {
		sc, ok := s.(jobstore.Scheduler)
		if !ok {
			t.Skip("the store is not a jobstore.Scheduler")
		}
		fn(t, s, sc)
	}
}

// nightly is a schedule with every field set.
func nightly(name string) jobstore.Schedule {
	return jobstore.Schedule{Name: name, Spec: "0 3 * * *", TZ: "Europe/Berlin",
		Job: jobstore.Spec{Kind: "report", Queue: "reports", Partition: "p1", Tags: []string{"nightly"}, Meta: map[string]string{"team": "ops"},
			Payload: json.RawMessage(`{"full":true}`), MaxAttempts: 2, Priority: 5, Timeout: time.Hour},
		CatchUp: jobstore.CatchUpAll, CatchUpWindow: 48 * time.Hour, Overlap: jobstore.OverlapSkip}
}

// requireSchedule checks that got is want as kept: want's fields, a
// CreatedAt within a minute of now, and no tick yet.
func requireSchedule(t *testing.T, want jobstore.Schedule, got jobstore.ScheduleInfo) {
	t.Helper()
	require.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)
	gotS := got.Schedule
	gotS.CreatedAt = time.Time{}
	requireJSONEqual(t, want.Job.Payload, gotS.Job.Payload, "job payload")
	want.Job.Payload, gotS.Job.Payload = nil, nil
	require.Equal(t, want, gotS)
}

func testSchedulesAdd(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	all, err := sc.Schedules(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
	b := nightly("b-nightly")
	got, err := sc.AddSchedule(ctx, b, false)
	require.NoError(t, err)
	requireSchedule(t, b, got)
	require.True(t, got.LastTick.IsZero())
	a := jobstore.Schedule{Name: "a.every", Spec: "@every 30s", Job: jobstore.Spec{Kind: "ping"}}
	_, err = sc.AddSchedule(ctx, a, false)
	require.NoError(t, err)

	all, err = sc.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "a.every", all[0].Name, "sorted by name")
	requireSchedule(t, a, all[0])
	requireSchedule(t, b, all[1])
	one, err := sc.GetSchedule(ctx, "b-nightly")
	require.NoError(t, err)
	require.Equal(t, all[1], one)
	require.Equal(t, got.CreatedAt, one.CreatedAt.UTC())
}

func testSchedulesReplace(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	first, err := sc.AddSchedule(ctx, nightly("n"), false)
	require.NoError(t, err)
	tick := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	require.NoError(t, sc.RecordTick(ctx, "n", tick, "01M95JCT6D2FHCZ1F2C9JSR0P6"))
	other := nightly("n")
	other.Spec = "@hourly"
	_, err = sc.AddSchedule(ctx, other, false)
	require.ErrorIs(t, err, jobstore.ErrScheduleExists)
	kept, err := sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, "0 3 * * *", kept.Spec, "a refused add changed the schedule")

	time.Sleep(2 * time.Millisecond)
	replaced, err := sc.AddSchedule(ctx, other, true)
	require.NoError(t, err)
	require.Equal(t, "@hourly", replaced.Spec)
	require.True(t, replaced.CreatedAt.After(first.CreatedAt), "a replaced schedule starts anew")
	require.True(t, tick.Equal(replaced.LastTick), "a replace keeps the ticks fired")
	require.Equal(t, "01M95JCT6D2FHCZ1F2C9JSR0P6", replaced.LastJob)
	got, err := sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, "@hourly", got.Spec)
}

func testSchedulesInvalid(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	for name, s := range map[string]jobstore.Schedule{
		"no name":     {Spec: "@daily", Job: jobstore.Spec{Kind: "k"}},
		"bad spec":    {Name: "x", Spec: "61 * * * *", Job: jobstore.Spec{Kind: "k"}},
		"bad zone":    {Name: "x", Spec: "@daily", TZ: "Nowhere/Else", Job: jobstore.Spec{Kind: "k"}},
		"keyed job":   {Name: "x", Spec: "@daily", Job: jobstore.Spec{Kind: "k", Key: "k"}},
		"bad job":     {Name: "x", Spec: "@daily", Job: jobstore.Spec{Kind: "a b"}},
		"big payload": {Name: "x", Spec: "@daily", Job: jobstore.Spec{Kind: "k", Payload: jsonString(jobstore.DefaultMaxPayload + 1)}},
	} {
		_, err := sc.AddSchedule(ctx, s, true)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
	}
	all, err := sc.Schedules(ctx)
	require.NoError(t, err)
	require.Empty(t, all, "an invalid schedule was added")

	_, err = sc.GetSchedule(ctx, "a b")
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, err = sc.PauseSchedule(ctx, "", true)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	require.ErrorIs(t, sc.RemoveSchedule(ctx, "a:b"), jobstore.ErrInvalidInput)
	require.ErrorIs(t, sc.RecordTick(ctx, "a/b", time.Now(), "x"), jobstore.ErrInvalidInput)

	_, err = sc.GetSchedule(ctx, "missing")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = sc.PauseSchedule(ctx, "missing", true)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.ErrorIs(t, sc.RemoveSchedule(ctx, "missing"), jobstore.ErrNotFound)
	require.ErrorIs(t, sc.RecordTick(ctx, "missing", time.Now(), "x"), jobstore.ErrNotFound)
}

func testSchedulesPause(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	_, err := sc.AddSchedule(ctx, nightly("n"), false)
	require.NoError(t, err)
	for range 2 {
		got, err := sc.PauseSchedule(ctx, "n", true)
		require.NoError(t, err)
		require.True(t, got.Paused)
	}
	got, err := sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.True(t, got.Paused)
	for range 2 {
		got, err = sc.PauseSchedule(ctx, "n", false)
		require.NoError(t, err)
		require.False(t, got.Paused)
	}
	got, err = sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.False(t, got.Paused)
	require.Equal(t, "0 3 * * *", got.Spec, "a pause changed the rest")
}

func testSchedulesRemove(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	_, err := sc.AddSchedule(ctx, nightly("n"), false)
	require.NoError(t, err)
	_, err = sc.AddSchedule(ctx, nightly("m"), false)
	require.NoError(t, err)
	require.NoError(t, sc.RemoveSchedule(ctx, "n"))
	_, err = sc.GetSchedule(ctx, "n")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.ErrorIs(t, sc.RemoveSchedule(ctx, "n"), jobstore.ErrNotFound)
	all, err := sc.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "m", all[0].Name)
	// The name is free again.
	_, err = sc.AddSchedule(ctx, nightly("n"), false)
	require.NoError(t, err)
}

func testSchedulesRecordTick(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	_, err := sc.AddSchedule(ctx, nightly("n"), false)
	require.NoError(t, err)
	t1 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	t0 := t1.Add(-24 * time.Hour)
	require.NoError(t, sc.RecordTick(ctx, "n", t1, "job-1"))
	require.NoError(t, sc.RecordTick(ctx, "n", t0, "job-0"))
	got, err := sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.True(t, t1.Equal(got.LastTick), "an earlier tick moved LastTick back")
	require.Equal(t, "job-1", got.LastJob)
	require.NoError(t, sc.RecordTick(ctx, "n", t1.Add(24*time.Hour), "job-2"))
	got, err = sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.True(t, t1.Add(24*time.Hour).Equal(got.LastTick))
	require.Equal(t, "job-2", got.LastJob)
}

func testSchedulesCopies(t *testing.T, _ jobstore.Store, sc jobstore.Scheduler) {
	ctx := t.Context()
	s := nightly("n")
	got, err := sc.AddSchedule(ctx, s, false)
	require.NoError(t, err)
	s.Job.Meta["team"], s.Job.Tags[0] = "changed", "changed"
	got.Job.Meta["team"], got.Job.Tags[0] = "changed", "changed"
	kept, err := sc.GetSchedule(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, "ops", kept.Job.Meta["team"], "the store aliases a schedule's job")
	require.Equal(t, []string{"nightly"}, kept.Job.Tags)
}

func testSchedulesClose(t *testing.T, s jobstore.Store, sc jobstore.Scheduler) {
	require.NoError(t, s.Close())
	_, err := sc.AddSchedule(t.Context(), nightly("n"), false)
	require.ErrorIs(t, err, jobstore.ErrClosed)
	_, err = sc.Schedules(t.Context())
	require.ErrorIs(t, err, jobstore.ErrClosed)
}

// retentionTests check jobstore.RetentionKeeper, for the stores that
// implement it; the others skip them.
var retentionTests = []test{
	{"SetAndRead", retentionKeeper(testRetentionSetAndRead)},
	{"Invalid", retentionKeeper(testRetentionInvalid)},
}

// retentionKeeper adapts a test of a RetentionKeeper, skipping stores that
// are not.
func retentionKeeper(fn func(t *testing.T, rk jobstore.RetentionKeeper)) func(t *testing.T, s jobstore.Store) {
	return func(t *testing.T, s jobstore.Store) {
		rk, ok := s.(jobstore.RetentionKeeper)
		if !ok {
			t.Skip("the store is not a jobstore.RetentionKeeper")
		}
		fn(t, rk)
	}
}

func testRetentionSetAndRead(t *testing.T, rk jobstore.RetentionKeeper) {
	ctx := t.Context()
	r, err := rk.Retention(ctx)
	require.NoError(t, err)
	require.True(t, r.IsZero(), "a new store keeps every job")
	want := jobstore.Retention{Succeeded: 7 * 24 * time.Hour, Failed: 30 * 24 * time.Hour}
	require.NoError(t, rk.SetRetention(ctx, want))
	r, err = rk.Retention(ctx)
	require.NoError(t, err)
	require.Equal(t, want, r)
	if sc, ok := rk.(jobstore.Scheduler); ok {
		_, err := sc.AddSchedule(ctx, nightly("n"), false)
		require.NoError(t, err)
		r, err = rk.Retention(ctx)
		require.NoError(t, err)
		require.Equal(t, want, r, "a schedule's change kept the policy")
	}
	require.NoError(t, rk.SetRetention(ctx, jobstore.Retention{}))
	r, err = rk.Retention(ctx)
	require.NoError(t, err)
	require.True(t, r.IsZero())
}

func testRetentionInvalid(t *testing.T, rk jobstore.RetentionKeeper) {
	ctx := t.Context()
	want := jobstore.Retention{Canceled: time.Hour}
	require.NoError(t, rk.SetRetention(ctx, want))
	for _, bad := range []jobstore.Retention{{Succeeded: -time.Hour}, {Failed: time.Second}} {
		require.ErrorIs(t, rk.SetRetention(ctx, bad), jobstore.ErrInvalidInput)
	}
	r, err := rk.Retention(ctx)
	require.NoError(t, err)
	require.Equal(t, want, r, "a refused policy changed the one kept")
}
