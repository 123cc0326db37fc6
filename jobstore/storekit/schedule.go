package storekit

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// NewSchedule returns s as a store adds it at now (see
// jobstore.Scheduler.AddSchedule): checked against the payload limit
// maxPayload (zero means jobstore.DefaultMaxPayload), CreatedAt now in UTC
// to the microsecond, and its job's tags, metadata and payload copied.
// Its error wraps jobstore.ErrInvalidInput.
func NewSchedule(s jobstore.Schedule, maxPayload int, now time.Time) (jobstore.Schedule, error) {
	if err := s.Validate(maxPayload); err != nil {
		return jobstore.Schedule{}, err
	}
	s.CreatedAt = now.UTC().Truncate(time.Microsecond)
	s.Job.Tags = slices.Clone(s.Job.Tags)
	s.Job.Payload = slices.Clone(s.Job.Payload)
	s.Job.Meta = maps.Clone(s.Job.Meta)
	return s, nil
}

// CheckScheduleName checks the name of a schedule a store is asked about,
// with op for the error.
func CheckScheduleName(op, name string) error {
	if err := jobstore.ValidateScheduleName(name); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// ScheduleNotFound is the error of a store that has no schedule name: it
// says so, and is jobstore.ErrNotFound for errors.Is.
func ScheduleNotFound(name string) error {
	return &noScheduleError{name: name}
}

type noScheduleError struct{ name string }

func (e *noScheduleError) Error() string { return "no schedule is named " + e.name }

func (e *noScheduleError) Is(target error) bool { return target == jobstore.ErrNotFound }
