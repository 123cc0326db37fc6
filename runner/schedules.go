package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// scheduleRecheck is the longest a runner that fires schedules goes
// without reading them: a schedule added, changed or resumed elsewhere is
// seen within it. Between, it wakes at the next tick of the schedules it
// read.
const scheduleRecheck = time.Second

// retentionEvery is how often a runner that fires schedules applies the
// store's retention policy (jobstore.RetentionKeeper): at its start, then
// at this interval.
const retentionEvery = time.Minute

// heldRecheck is how often a runner looks again at a schedule whose due
// tick waits for the previous tick's job (OverlapQueue): the tick fires
// within it of that job's end.
const heldRecheck = 100 * time.Millisecond

// scheduleStore is what firing schedules needs of a store: its schedules,
// and the submits and reads of a client.
type scheduleStore interface {
	jobstore.Scheduler
	Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error)
	Get(ctx context.Context, id string) (jobstore.Job, error)
}

// FireSchedules fires the due ticks of store's schedules until ctx ends,
// as a Runner with Options.Schedules does, for a process that runs no
// jobs (jobdir serve without --work): each tick is a Submit of the
// schedule's job keyed by the tick (jobstore.TickKey), so that of every
// process firing it one job is made. Of opts (nil means none) it uses
// Logger, OnEvent (EventTickFired, EventTicksSkipped and EventStoreError)
// and Metrics (ObserveStoreError, and the ticks if it is a
// ScheduleMetrics). It returns nil when ctx ends, an error wrapping
// errors.ErrUnsupported at once if store keeps no schedules
// (jobstore.Scheduler), and one wrapping jobstore.ErrClosed if the store
// is closed.
func FireSchedules(ctx context.Context, store jobstore.Store, opts *Options) error {
	sc, ok := store.(scheduleStore)
	if !ok {
		return fmt.Errorf("runner: this store keeps no schedules: %w", errors.ErrUnsupported)
	}
	r := &Runner{store: store, s: opts.settings()}
	return r.fireSchedules(ctx, sc)
}

// applyRetention prunes the finished jobs that the store's retention
// policy no longer keeps, if the store keeps one and prunes by state, and
// reports how many it pruned (EventPruned).
func (r *Runner) applyRetention(ctx context.Context) error {
	rk, ok := r.store.(jobstore.RetentionKeeper)
	sp, ok2 := r.store.(jobstore.StatePruner)
	if !ok || !ok2 {
		return nil
	}
	pol, err := rk.Retention(ctx)
	if err != nil || pol.IsZero() {
		return err
	}
	n := 0
	for _, st := range []jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled} {
		d := pol.Of(st)
		if d == 0 {
			continue
		}
		k, err := sp.PruneStates(ctx, d, []jobstore.State{st})
		n += k
		if err != nil {
			return fmt.Errorf("retention: %w", err)
		}
	}
	if n > 0 {
		r.s.log.Info("pruned finished jobs as the store's retention policy says", "jobs", n)
		r.emit(Event{Type: EventPruned, Pruned: n})
	}
	return nil
}

// fireSchedules fires the due ticks of the store's schedules (sc) until
// ctx ends (it returns nil) or the store is closed.
func (r *Runner) fireSchedules(ctx context.Context, sc scheduleStore) error {
	var retained time.Time
	for failures := 0; ; {
		if time.Since(retained) >= retentionEvery {
			retained = time.Now()
			if err := r.applyRetention(ctx); err != nil && ctx.Err() == nil {
				r.s.log.Warn("applying the retention policy failed; trying again later", "err", err)
				r.emit(Event{Type: EventStoreError, Err: fmt.Errorf("runner: %w", err)})
			}
		}
		next, err := r.fireDue(ctx, sc, time.Now())
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jobstore.ErrClosed):
			return err
		case err != nil:
			failures++
			r.s.log.Warn("firing schedules failed; retrying", "err", err, "failures", failures)
			r.emit(Event{Type: EventStoreError, Err: fmt.Errorf("runner: schedules: %w", err)})
			next = time.Now().Add(retryDelay(failures))
		default:
			failures = 0
		}
		wait := min(time.Until(next), scheduleRecheck)
		if !sleep(ctx, max(wait, time.Millisecond)) {
			return nil
		}
	}
}

// fireDue fires what is due at now of every schedule and returns the
// earliest next tick of them (now plus scheduleRecheck if none).
func (r *Runner) fireDue(ctx context.Context, sc scheduleStore, now time.Time) (time.Time, error) {
	all, err := sc.Schedules(ctx)
	if err != nil {
		return time.Time{}, err
	}
	next := now.Add(scheduleRecheck)
	var errs []error
	for _, info := range all {
		held, err := r.fireOne(ctx, sc, info, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("schedule %s: %w", info.Name, err))
		}
		if held && now.Add(heldRecheck).Before(next) {
			next = now.Add(heldRecheck)
		}
		if t := info.Next(now); !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	return next, errors.Join(errs...)
}

// fireOne fires what is due at now of one schedule, as its catch-up and
// overlap policies say, and records the latest tick it fired. It reports
// held when a due tick waits for the previous tick's job (OverlapQueue).
func (r *Runner) fireOne(ctx context.Context, sc scheduleStore, info jobstore.ScheduleInfo, now time.Time) (held bool, err error) {
	plan := info.Plan(info.LastTick, now)
	if len(plan.Fire) == 0 {
		return false, nil
	}
	last := plan.Fire[len(plan.Fire)-1]
	if info.Overlap == jobstore.OverlapSkip || info.Overlap == jobstore.OverlapQueue {
		busy, err := tickRunning(ctx, sc, info.LastJob)
		if err != nil {
			return false, err
		}
		switch {
		case busy && info.Overlap == jobstore.OverlapSkip:
			// The due ticks are dropped; the running job stays the one
			// the next tick waits for.
			r.emit(Event{Type: EventTicksSkipped, Schedule: info.Name, Tick: last.At, Skipped: plan.Skipped + len(plan.Fire)})
			return false, sc.RecordTick(ctx, info.Name, last.At, info.LastJob)
		case busy:
			return true, nil // queue: the ticks wait for it
		case info.Overlap == jobstore.OverlapSkip:
			// One at a time: the latest.
			plan.Skipped += len(plan.Fire) - 1
			plan.Fire = plan.Fire[len(plan.Fire)-1:]
		default:
			// One at a time: the oldest; the others wait for it.
			held = len(plan.Fire) > 1
			plan.Fire = plan.Fire[:1]
		}
	}
	if plan.Skipped > 0 {
		r.emit(Event{Type: EventTicksSkipped, Schedule: info.Name, Tick: plan.Fire[0].At, Skipped: plan.Skipped})
	}
	// The latest tick fired is recorded once, after the submits (or
	// after the last one that went through): one write of the
	// schedules, not one per made-up tick.
	var fired jobstore.Job
	var firedAt time.Time
	for _, tick := range plan.Fire {
		job, created, serr := sc.Submit(ctx, info.JobAt(tick.At))
		if serr != nil {
			err = fmt.Errorf("tick %s: %w", tick.At.Format(time.RFC3339), serr)
			break
		}
		if created {
			r.s.log.Info("schedule fired", "schedule", info.Name, "tick", tick.At, "job", job.ID, "catch_up", tick.CatchUp)
			r.emit(Event{Type: EventTickFired, Job: job, Schedule: info.Name, Tick: tick.At, QueueWait: max(job.CreatedAt.Sub(tick.At), 0)})
		}
		fired, firedAt = job, tick.At
	}
	if fired.ID != "" {
		if rerr := sc.RecordTick(ctx, info.Name, firedAt, fired.ID); rerr != nil && !errors.Is(rerr, jobstore.ErrNotFound) {
			err = errors.Join(err, rerr)
		}
	}
	return held, err
}

// tickRunning reports whether the job id (a schedule's latest tick's; none
// if empty) is queued or running.
func tickRunning(ctx context.Context, sc scheduleStore, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	j, err := sc.Get(ctx, id)
	if errors.Is(err, jobstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !j.State.Terminal(), nil
}
