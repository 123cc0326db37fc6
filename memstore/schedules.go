package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.Scheduler = (*Store)(nil)

// AddSchedule adds s, or replaces the schedule of its name if replace. It
// implements jobstore.Scheduler.
func (s *Store) AddSchedule(ctx context.Context, sc jobstore.Schedule, replace bool) (jobstore.ScheduleInfo, error) {
	sc, err := storekit.NewSchedule(sc, s.maxPayload, time.Now())
	if err != nil {
		return jobstore.ScheduleInfo{}, fmt.Errorf("memstore: add schedule: %w", err)
	}
	if err := s.lock(ctx, "add schedule"); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	defer s.mu.Unlock()
	old, ok := s.schedules[sc.Name]
	if ok && !replace {
		return jobstore.ScheduleInfo{}, fmt.Errorf("memstore: add schedule %s: %w", sc.Name, jobstore.ErrScheduleExists)
	}
	if s.schedules == nil {
		s.schedules = make(map[string]jobstore.ScheduleInfo)
	}
	info := jobstore.ScheduleInfo{Schedule: sc, LastTick: old.LastTick, LastJob: old.LastJob}
	s.schedules[sc.Name] = info
	return cloneSchedule(info), nil
}

// Schedules returns every schedule, sorted by name. It implements
// jobstore.Scheduler.
func (s *Store) Schedules(ctx context.Context) ([]jobstore.ScheduleInfo, error) {
	if err := s.lock(ctx, "schedules"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]jobstore.ScheduleInfo, 0, len(s.schedules))
	for _, name := range slices.Sorted(maps.Keys(s.schedules)) {
		out = append(out, cloneSchedule(s.schedules[name]))
	}
	return out, nil
}

// GetSchedule returns the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) GetSchedule(ctx context.Context, name string) (jobstore.ScheduleInfo, error) {
	var out jobstore.ScheduleInfo
	err := s.changeSchedule(ctx, "get schedule", name, func(info *jobstore.ScheduleInfo) { out = cloneSchedule(*info) })
	return out, err
}

// PauseSchedule pauses or resumes the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool) (jobstore.ScheduleInfo, error) {
	var out jobstore.ScheduleInfo
	err := s.changeSchedule(ctx, "pause schedule", name, func(info *jobstore.ScheduleInfo) {
		info.Paused = paused
		out = cloneSchedule(*info)
	})
	return out, err
}

// RemoveSchedule removes the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) RemoveSchedule(ctx context.Context, name string) error {
	return s.changeSchedule(ctx, "remove schedule", name, func(info *jobstore.ScheduleInfo) {
		delete(s.schedules, info.Name)
	})
}

// RecordTick notes the tick at of the schedule name and its job. It
// implements jobstore.Scheduler.
func (s *Store) RecordTick(ctx context.Context, name string, at time.Time, jobID string) error {
	return s.changeSchedule(ctx, "record tick", name, func(info *jobstore.ScheduleInfo) {
		if at.After(info.LastTick) {
			info.LastTick, info.LastJob = at.UTC(), jobID
		}
	})
}

// changeSchedule calls change with the schedule name, under s.mu, and
// keeps what it made of it (unless it removed it).
func (s *Store) changeSchedule(ctx context.Context, op, name string, change func(*jobstore.ScheduleInfo)) error {
	if err := storekit.CheckScheduleName("memstore: "+op, name); err != nil {
		return err
	}
	if err := s.lock(ctx, op); err != nil {
		return err
	}
	defer s.mu.Unlock()
	info, ok := s.schedules[name]
	if !ok {
		return fmt.Errorf("memstore: %s: %w", op, storekit.ScheduleNotFound(name))
	}
	change(&info)
	if _, still := s.schedules[name]; still {
		s.schedules[name] = info
	}
	return nil
}

// cloneSchedule returns a copy of info that shares no memory with it.
func cloneSchedule(info jobstore.ScheduleInfo) jobstore.ScheduleInfo {
	info.Job.Tags = slices.Clone(info.Job.Tags)
	info.Job.Meta = maps.Clone(info.Job.Meta)
	info.Job.Payload = slices.Clone(info.Job.Payload)
	return info
}

var _ jobstore.RetentionKeeper = (*Store)(nil)

// Retention returns the store's retention policy. It implements
// jobstore.RetentionKeeper.
func (s *Store) Retention(ctx context.Context) (jobstore.Retention, error) {
	if err := s.lock(ctx, "retention"); err != nil {
		return jobstore.Retention{}, err
	}
	defer s.mu.Unlock()
	return s.retention, nil
}

// SetRetention replaces the store's retention policy. It implements
// jobstore.RetentionKeeper.
func (s *Store) SetRetention(ctx context.Context, r jobstore.Retention) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("memstore: set retention: %w", err)
	}
	if err := s.lock(ctx, "set retention"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.retention = r
	return nil
}
