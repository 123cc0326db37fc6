package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.Scheduler = (*Store)(nil)

// schedulesFile, in the store's directory, holds the store's schedules as
// JSON (docs/format.md, "Schedules"): each with its latest fired tick. Like
// queuesFile it is replaced whole, never changed in place: written to
// tmp/, fsynced, renamed over the old one, and the store's directory
// fsynced, all under the exclusive lock of schedulesLock. Readers take no
// lock: a rename is atomic.
const schedulesFile = "SCHEDULES"

// schedulesLock, in the store's directory, is the lock file of changes to
// schedulesFile.
const schedulesLock = "SCHEDULES.lock"

// maxSchedulesFile bounds how much of schedulesFile is read.
const maxSchedulesFile = 16 << 20

// schedulesDoc is the contents of schedulesFile.
type schedulesDoc struct {
	// Schedules holds each schedule, by name.
	Schedules map[string]jobstore.ScheduleInfo `json:"schedules"`
	// Retention is the store's retention policy, which the processes that
	// fire the schedules apply; absent for none.
	Retention *jobstore.Retention `json:"retention,omitempty"`
}

// AddSchedule adds sc, or replaces the schedule of its name if replace,
// durably. It implements jobstore.Scheduler.
func (s *Store) AddSchedule(ctx context.Context, sc jobstore.Schedule, replace bool) (jobstore.ScheduleInfo, error) {
	sc, err := storekit.NewSchedule(sc, s.opts.MaxPayload, time.Now())
	if err != nil {
		return jobstore.ScheduleInfo{}, fmt.Errorf("filestore: add schedule: %w", err)
	}
	if err := s.enter(ctx, "add schedule"); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	var out jobstore.ScheduleInfo
	err = s.changeSchedules(ctx, func(doc *schedulesDoc) (bool, error) {
		old, ok := doc.Schedules[sc.Name]
		if ok && !replace {
			return false, jobstore.ErrScheduleExists
		}
		out = jobstore.ScheduleInfo{Schedule: sc, LastTick: old.LastTick, LastJob: old.LastJob}
		doc.Schedules[sc.Name] = out
		return true, nil
	})
	if err != nil {
		return jobstore.ScheduleInfo{}, fmt.Errorf("filestore: add schedule %s: %w", sc.Name, err)
	}
	return out, nil
}

// Schedules returns every schedule, sorted by name. It implements
// jobstore.Scheduler.
func (s *Store) Schedules(ctx context.Context) ([]jobstore.ScheduleInfo, error) {
	if err := s.enter(ctx, "schedules"); err != nil {
		return nil, err
	}
	doc, err := s.readSchedules()
	if err != nil {
		return nil, fmt.Errorf("filestore: schedules: %w", err)
	}
	out := make([]jobstore.ScheduleInfo, 0, len(doc.Schedules))
	for _, name := range slices.Sorted(maps.Keys(doc.Schedules)) {
		out = append(out, doc.Schedules[name])
	}
	return out, nil
}

// GetSchedule returns the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) GetSchedule(ctx context.Context, name string) (jobstore.ScheduleInfo, error) {
	if err := storekit.CheckScheduleName("filestore: get schedule", name); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	if err := s.enter(ctx, "get schedule"); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	doc, err := s.readSchedules()
	if err != nil {
		return jobstore.ScheduleInfo{}, fmt.Errorf("filestore: get schedule %s: %w", name, err)
	}
	info, ok := doc.Schedules[name]
	if !ok {
		return jobstore.ScheduleInfo{}, fmt.Errorf("filestore: get schedule: %w", storekit.ScheduleNotFound(name))
	}
	return info, nil
}

// PauseSchedule pauses or resumes the schedule name, durably. It
// implements jobstore.Scheduler.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool) (jobstore.ScheduleInfo, error) {
	var out jobstore.ScheduleInfo
	err := s.changeSchedule(ctx, "pause schedule", name, func(all map[string]jobstore.ScheduleInfo, info jobstore.ScheduleInfo) bool {
		changed := info.Paused != paused
		info.Paused = paused
		all[name], out = info, info
		return changed
	})
	return out, err
}

// RemoveSchedule removes the schedule name, durably. It implements
// jobstore.Scheduler.
func (s *Store) RemoveSchedule(ctx context.Context, name string) error {
	return s.changeSchedule(ctx, "remove schedule", name, func(all map[string]jobstore.ScheduleInfo, _ jobstore.ScheduleInfo) bool {
		delete(all, name)
		return true
	})
}

// RecordTick notes the tick at of the schedule name and its job, durably,
// if it is later than the latest noted. It writes nothing otherwise, so
// that of the processes that fire one tick only the first writes. It
// implements jobstore.Scheduler.
func (s *Store) RecordTick(ctx context.Context, name string, at time.Time, jobID string) error {
	return s.changeSchedule(ctx, "record tick", name, func(all map[string]jobstore.ScheduleInfo, info jobstore.ScheduleInfo) bool {
		if !at.After(info.LastTick) {
			return false
		}
		info.LastTick, info.LastJob = at.UTC(), jobID
		all[name] = info
		return true
	})
}

// changeSchedule applies change to the schedule name (whose absence is an
// error wrapping jobstore.ErrNotFound), as changeSchedules does; change
// reports whether it changed anything.
func (s *Store) changeSchedule(ctx context.Context, op, name string, change func(map[string]jobstore.ScheduleInfo, jobstore.ScheduleInfo) bool) error {
	if err := storekit.CheckScheduleName("filestore: "+op, name); err != nil {
		return err
	}
	if err := s.enter(ctx, op); err != nil {
		return err
	}
	err := s.changeSchedules(ctx, func(doc *schedulesDoc) (bool, error) {
		info, ok := doc.Schedules[name]
		if !ok {
			return false, storekit.ScheduleNotFound(name)
		}
		return change(doc.Schedules, info), nil
	})
	if err != nil {
		return fmt.Errorf("filestore: %s: %w", op, err)
	}
	return nil
}

// changeSchedules applies change to the schedules and the retention
// policy, under schedulesLock, and, if it reports a change, replaces
// schedulesFile with the result, durably. A change that returns an error
// writes nothing.
func (s *Store) changeSchedules(ctx context.Context, change func(*schedulesDoc) (bool, error)) error {
	unlock, err := lockRecord(ctx, filepath.Join(s.dir, schedulesLock), true, true, s.filePerm)
	if err != nil {
		return err
	}
	defer unlock()
	doc, err := s.readSchedules()
	if err != nil {
		return err
	}
	changed, err := change(&doc)
	if err != nil || !changed {
		return err
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if len(data) > maxSchedulesFile {
		return fmt.Errorf("%w: the schedules would take %d bytes, more than %d", jobstore.ErrInvalidInput, len(data), maxSchedulesFile)
	}
	if err := s.fs.WriteFile(filepath.Join(s.dir, schedulesFile), s.tmpDir, append(data, '\n'), s.filePerm, s.durable.file()); err != nil {
		return err
	}
	return s.durable.dir(".")
}

// readSchedules reads schedulesFile, its Schedules never nil: no file is
// no schedules and no retention policy; a file that is not a regular file
// (a link is never followed) or does not decode is an error wrapping
// jobstore.ErrCorrupt that names it.
func (s *Store) readSchedules() (schedulesDoc, error) {
	path := filepath.Join(s.dir, schedulesFile)
	none := schedulesDoc{Schedules: map[string]jobstore.ScheduleInfo{}}
	f, err := s.root.OpenFile(schedulesFile, os.O_RDONLY|noFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return none, nil
	}
	if err != nil {
		return none, &schedulesError{path: path, reason: err.Error()}
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return none, &schedulesError{path: path, reason: "is not a regular file"}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSchedulesFile+1))
	if err != nil {
		return none, err
	}
	if len(data) > maxSchedulesFile {
		return none, &schedulesError{path: path, reason: fmt.Sprintf("is larger than %d bytes", maxSchedulesFile)}
	}
	var doc schedulesDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return none, &schedulesError{path: path, reason: "is not valid JSON: " + err.Error()}
	}
	for name, info := range doc.Schedules {
		if info.Name != name || info.Validate(s.opts.MaxPayload) != nil {
			return none, &schedulesError{path: path, reason: fmt.Sprintf("holds a schedule %q that is not valid", name)}
		}
	}
	if doc.Retention != nil && doc.Retention.Validate() != nil {
		return none, &schedulesError{path: path, reason: "holds a retention policy that is not valid"}
	}
	if doc.Schedules == nil {
		doc.Schedules = none.Schedules
	}
	return doc, nil
}

var _ jobstore.RetentionKeeper = (*Store)(nil)

// Retention returns the store's retention policy, kept in schedulesFile.
// It implements jobstore.RetentionKeeper.
func (s *Store) Retention(ctx context.Context) (jobstore.Retention, error) {
	if err := s.enter(ctx, "retention"); err != nil {
		return jobstore.Retention{}, err
	}
	doc, err := s.readSchedules()
	if err != nil {
		return jobstore.Retention{}, fmt.Errorf("filestore: retention: %w", err)
	}
	if doc.Retention == nil {
		return jobstore.Retention{}, nil
	}
	return *doc.Retention, nil
}

// SetRetention replaces the store's retention policy, durably. It
// implements jobstore.RetentionKeeper.
func (s *Store) SetRetention(ctx context.Context, r jobstore.Retention) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("filestore: set retention: %w", err)
	}
	if err := s.enter(ctx, "set retention"); err != nil {
		return err
	}
	err := s.changeSchedules(ctx, func(doc *schedulesDoc) (bool, error) {
		if doc.Retention != nil && *doc.Retention == r || doc.Retention == nil && r.IsZero() {
			return false, nil
		}
		doc.Retention = &r
		if r.IsZero() {
			doc.Retention = nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("filestore: set retention: %w", err)
	}
	return nil
}

// schedulesError says that schedulesFile cannot be used as it is. It wraps
// jobstore.ErrCorrupt.
type schedulesError struct {
	path, reason string
}

func (e *schedulesError) Error() string {
	return fmt.Sprintf("the schedules %s cannot be read: it %s", e.path, e.reason)
}

func (e *schedulesError) Unwrap() error { return jobstore.ErrCorrupt }
