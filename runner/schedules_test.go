package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// tickJobs returns the jobs of the schedule name in s, by their tick.
func tickJobs(t *testing.T, s jobstore.Store, name string) map[time.Time]jobstore.Job {
	t.Helper()
	page, err := s.List(t.Context(), jobstore.ListOptions{Limit: jobstore.MaxListLimit, Order: jobstore.OldestFirst})
	require.NoError(t, err)
	out := map[time.Time]jobstore.Job{}
	for _, j := range page.Jobs {
		var at string
		if _, err := fmt.Sscanf(j.Key, "schedule:"+name+":%s", &at); err != nil {
			continue
		}
		tick, err := time.Parse(time.RFC3339, at)
		require.NoError(t, err)
		require.NotContains(t, out, tick, "two jobs of one tick")
		out[tick] = j
	}
	return out
}

// scheduledRunner returns a runner with Options.Schedules on s that runs
// jobs of kind "tick" with run, and its events of ticks.
func scheduledRunner(s jobstore.Store, run func(context.Context, jobstore.Job) error, ev *events) *runner.Runner {
	r := runner.New(s, &runner.Options{Schedules: true, Concurrency: 4, OnEvent: ev.add})
	r.Handle("tick", runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		return nil, run(ctx, j)
	}))
	return r
}

// TestSchedulesFireEachTickOnce: three runners on one store fire an @every
// 1s schedule: each tick is one job, made when the tick comes, by
// whichever runner came first; a paused schedule fires nothing and a
// removed one stops.
func TestSchedulesFireEachTickOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ctx := t.Context()
		begin := time.Now()
		_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: "beat", Spec: "@every 1s", Job: jobstore.Spec{Kind: "tick", Tags: []string{"beat"}}}, false)
		require.NoError(t, err)
		ev := &events{}
		for range 3 {
			start(t, scheduledRunner(s, func(context.Context, jobstore.Job) error { return nil }, ev))
		}
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		jobs := tickJobs(t, s, "beat")
		require.Len(t, jobs, 10, "one job per tick")
		for tick, j := range jobs {
			require.True(t, tick.After(begin))
			require.WithinDuration(t, tick, j.CreatedAt, 10*time.Millisecond, "a tick's job is made at the tick")
			require.Equal(t, []string{"beat"}, j.Tags, "the schedule's job spec")
		}
		require.Len(t, ev.of(runner.EventTickFired), 10, "each tick reported once, by the runner that made its job")
		info, err := s.GetSchedule(ctx, "beat")
		require.NoError(t, err)
		require.Equal(t, begin.Truncate(time.Second).Add(10*time.Second).UTC(), info.LastTick)

		_, err = s.PauseSchedule(ctx, "beat", true)
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Len(t, tickJobs(t, s, "beat"), 10, "a paused schedule fired")
		_, err = s.PauseSchedule(ctx, "beat", false)
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		// Resumed: the ticks missed while paused are made up as one job
		// (CatchUpOne), and the ticks go on.
		require.Len(t, tickJobs(t, s, "beat"), 10+1+2)
		require.NoError(t, s.RemoveSchedule(ctx, "beat"))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Len(t, tickJobs(t, s, "beat"), 13, "a removed schedule fired")
	})
}

// TestSchedulesCatchUp: after 10 ticks with no runner, a runner makes up
// the missed ticks as each schedule's policy says.
func TestSchedulesCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ctx := t.Context()
		for _, c := range []jobstore.CatchUp{jobstore.CatchUpSkip, jobstore.CatchUpOne, jobstore.CatchUpAll} {
			_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: string(c), Spec: "@every 1s", CatchUp: c, Job: jobstore.Spec{Kind: "tick"}}, false)
			require.NoError(t, err)
		}
		time.Sleep(10*time.Second + 500*time.Millisecond) // all down
		ev := &events{}
		start(t, scheduledRunner(s, func(context.Context, jobstore.Job) error { return nil }, ev))
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		require.Len(t, tickJobs(t, s, "skip"), 1, "skip: the latest tick only")
		require.Len(t, tickJobs(t, s, "one"), 2, "one: one for the missed ticks, and the latest")
		require.Len(t, tickJobs(t, s, "all"), 10, "all: each tick")
		skipped := 0
		for _, e := range ev.of(runner.EventTicksSkipped) {
			skipped += e.Skipped
		}
		require.Equal(t, 9+8, skipped, "the ticks dropped by skip and one")
	})
}

// TestSchedulesOverlap: a tick's job that runs for 2.5 ticks: with
// OverlapSkip the ticks meanwhile are dropped, with OverlapQueue they wait
// and run one after another, with OverlapAllow they run beside it.
func TestSchedulesOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ctx := t.Context()
		for _, o := range []jobstore.Overlap{jobstore.OverlapAllow, jobstore.OverlapSkip, jobstore.OverlapQueue} {
			_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: string(o), Spec: "@every 1s", Overlap: o, CatchUp: jobstore.CatchUpAll,
				Job: jobstore.Spec{Kind: "tick", Queue: string(o)}}, false)
			require.NoError(t, err)
		}
		var mu sync.Mutex
		running := map[string]int{}
		most := map[string]int{}
		ev := &events{}
		r := runner.New(s, &runner.Options{Schedules: true, Concurrency: 10, OnEvent: ev.add})
		r.Handle("tick", runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
			mu.Lock()
			running[j.Queue]++
			most[j.Queue] = max(most[j.Queue], running[j.Queue])
			mu.Unlock()
			time.Sleep(2500 * time.Millisecond)
			mu.Lock()
			running[j.Queue]--
			mu.Unlock()
			return nil, nil
		}))
		start(t, r)
		time.Sleep(6*time.Second + 500*time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Greater(t, most["allow"], 1, "allow: ticks overlap")
		require.Equal(t, 1, most["skip"], "skip: one at a time")
		require.Equal(t, 1, most["queue"], "queue: one at a time")
		require.Len(t, tickJobs(t, s, "allow"), 6)
		require.Len(t, tickJobs(t, s, "skip"), 2, "ticks 1 and 4; 2, 3, 5 and 6 dropped")
		require.Len(t, tickJobs(t, s, "queue"), 3, "ticks 1, 2 and 3, one after another; the rest wait")
	})
}

// TestSchedulesNeedAScheduler: Options.Schedules on a store that keeps no
// schedules fails Run at once.
func TestSchedulesNeedAScheduler(t *testing.T) {
	s := memstore.New(nil)
	defer s.Close()
	r := runner.New(struct{ jobstore.Worker }{s}, &runner.Options{Schedules: true})
	r.Handle("tick", runner.HandlerFunc(func(context.Context, jobstore.Job) (json.RawMessage, error) { return nil, nil }))
	err := r.Run(t.Context())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.Contains(t, err.Error(), "this store keeps no schedules")
}

// tickLog is a runner.Metrics and runner.ScheduleMetrics that counts the
// ticks reported to it.
type tickLog struct {
	callLog
	mu      sync.Mutex
	ticks   map[string]int
	skipped map[string]int
	lag     time.Duration
}

func (l *tickLog) ObserveTick(schedule string, lag time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ticks[schedule]++
	l.lag = max(l.lag, lag)
}

func (l *tickLog) ObserveTicksSkipped(schedule string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.skipped[schedule] += n
}

// TestScheduleMetrics: an Options.Metrics that is a ScheduleMetrics gets
// each tick whose job the runner made, with its lag, and the ticks its
// policies dropped; FireSchedules, for a process without handlers, does
// the same.
func TestScheduleMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ctx := t.Context()
		_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: "beat", Spec: "@every 1s", CatchUp: jobstore.CatchUpSkip, Job: jobstore.Spec{Kind: "tick"}}, false)
		require.NoError(t, err)
		time.Sleep(3*time.Second + 500*time.Millisecond) // three ticks come with nobody firing
		m := &tickLog{ticks: map[string]int{}, skipped: map[string]int{}}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runner.FireSchedules(runCtx, s, &runner.Options{Metrics: m}) }()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		stop()
		require.NoError(t, <-done)
		m.mu.Lock()
		defer m.mu.Unlock()
		require.Equal(t, 3, m.ticks["beat"], "the latest missed tick, then two on time")
		require.Equal(t, 2, m.skipped["beat"], "two missed ticks dropped by skip")
		require.Equal(t, 500*time.Millisecond, m.lag, "the late tick's lag")
		require.Len(t, tickJobs(t, s, "beat"), 3)

		require.ErrorIs(t, runner.FireSchedules(ctx, plainStore{s}, nil), errors.ErrUnsupported)
	})
}

// plainStore is a jobstore.Store that keeps no schedules.
type plainStore struct{ jobstore.Store }

// TestRetentionApplied: a runner that fires schedules prunes, at its start
// and every minute, the finished jobs the store's retention policy no
// longer keeps, state by state, and reports each pass that pruned.
func TestRetentionApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		ctx := t.Context()
		require.NoError(t, s.SetRetention(ctx, jobstore.Retention{Succeeded: time.Hour}))
		finish := func(errText string) jobstore.Job {
			j := submit(t, s, jobstore.Spec{Kind: "k", MaxAttempts: 1})
			c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			require.NoError(t, err)
			require.Equal(t, j.ID, c.ID)
			done, err := s.Complete(ctx, c.Lease(), jobstore.Outcome{Error: errText})
			require.NoError(t, err)
			return done
		}
		old, failed := finish(""), finish("boom")
		time.Sleep(2 * time.Hour)
		recent := finish("")

		ev := &events{}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runner.FireSchedules(runCtx, s, &runner.Options{OnEvent: ev.add}) }()
		synctest.Wait()
		_, err := s.Get(ctx, old.ID)
		require.ErrorIs(t, err, jobstore.ErrNotFound, "a succeeded job older than the policy's hour")
		_, err = s.Get(ctx, failed.ID)
		require.NoError(t, err, "failed jobs are kept: the policy keeps them")
		require.Len(t, ev.of(runner.EventPruned), 1)
		require.Equal(t, 1, ev.of(runner.EventPruned)[0].Pruned)

		time.Sleep(30 * time.Minute)
		synctest.Wait()
		_, err = s.Get(ctx, recent.ID)
		require.NoError(t, err, "pruned before its hour")
		time.Sleep(31 * time.Minute)
		synctest.Wait()
		_, err = s.Get(ctx, recent.ID)
		require.ErrorIs(t, err, jobstore.ErrNotFound, "not pruned within a minute of its hour")
		require.Len(t, ev.of(runner.EventPruned), 2)
		stop()
		require.NoError(t, <-done)
	})
}

// failingSchedules is a store whose Schedules fails its first fails calls.
type failingSchedules struct {
	*memstore.Store
	mu    sync.Mutex
	fails int
}

func (f *failingSchedules) Schedules(ctx context.Context) ([]jobstore.ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return nil, errors.New("disk on fire")
	}
	return f.Store.Schedules(ctx)
}

// TestSchedulesRetryAStoreError: a store that fails to read the schedules
// is reported (EventStoreError) and read again; the ticks fire once it
// answers, the missed one made up as the schedule's catch-up says.
func TestSchedulesRetryAStoreError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &failingSchedules{Store: newStore(t, nil), fails: 3}
		ctx := t.Context()
		_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: "beat", Spec: "@every 1s", Job: jobstore.Spec{Kind: "tick"}}, false)
		require.NoError(t, err)
		ev := &events{}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runner.FireSchedules(runCtx, s, &runner.Options{OnEvent: ev.add}) }()
		time.Sleep(5*time.Second + 500*time.Millisecond)
		synctest.Wait()
		stop()
		require.NoError(t, <-done)
		require.Len(t, ev.of(runner.EventStoreError), 3)
		require.ErrorContains(t, ev.of(runner.EventStoreError)[0].Err, "disk on fire")
		jobs := tickJobs(t, s.Store, "beat")
		require.NotEmpty(t, jobs)
		require.Contains(t, jobs, time.Now().Truncate(time.Second).UTC(), "the ticks go on once the store answers")
	})
}

// failingSubmit is a store whose failAt'th Submit fails.
type failingSubmit struct {
	*memstore.Store
	mu     sync.Mutex
	calls  int
	failAt int
}

func (f *failingSubmit) Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls == f.failAt
	f.mu.Unlock()
	if fail {
		return jobstore.Job{}, false, errors.New("disk full")
	}
	return f.Store.Submit(ctx, spec)
}

// TestSchedulesSubmitFailsHalfway: of the missed ticks a CatchUpAll
// schedule makes up, the submit of the third fails: the schedule's last
// tick is the second's (recorded once, not per tick), the error is
// reported, and the next pass makes the rest, each tick once.
func TestSchedulesSubmitFailsHalfway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &failingSubmit{Store: newStore(t, nil), failAt: 3}
		ctx := t.Context()
		_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: "all", Spec: "@every 1s", CatchUp: jobstore.CatchUpAll, Job: jobstore.Spec{Kind: "tick"}}, false)
		require.NoError(t, err)
		begin := time.Now()
		time.Sleep(5*time.Second + 500*time.Millisecond) // five ticks with nobody firing
		ev := &events{}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runner.FireSchedules(runCtx, s, &runner.Options{OnEvent: ev.add}) }()
		synctest.Wait()
		info, err := s.GetSchedule(ctx, "all")
		require.NoError(t, err)
		require.Equal(t, begin.Add(2*time.Second).UTC(), info.LastTick, "the last tick made before the failure")
		require.Len(t, tickJobs(t, s.Store, "all"), 2)
		require.Len(t, ev.of(runner.EventStoreError), 1)
		require.ErrorContains(t, ev.of(runner.EventStoreError)[0].Err, "disk full")
		time.Sleep(400 * time.Millisecond) // the retry
		synctest.Wait()
		require.Len(t, tickJobs(t, s.Store, "all"), 5, "the next pass makes the rest")
		stop()
		require.NoError(t, <-done)
	})
}
