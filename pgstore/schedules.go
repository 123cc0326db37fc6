package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.Scheduler = (*Store)(nil)

// AddSchedule adds sc, or replaces the schedule of its name if replace,
// keeping its latest tick. It implements jobstore.Scheduler.
func (s *Store) AddSchedule(ctx context.Context, sc jobstore.Schedule, replace bool) (jobstore.ScheduleInfo, error) {
	const op = "add schedule"
	sc, err := storekit.NewSchedule(sc, s.opts.MaxPayload, time.Now())
	if err != nil {
		return jobstore.ScheduleInfo{}, fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if err := s.check(ctx, op); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	doc, err := json.Marshal(sc)
	if err != nil {
		return jobstore.ScheduleInfo{}, fmt.Errorf("pgstore: %s: %w", op, err)
	}
	q := s.q.addSchedule
	if replace {
		q = s.q.putSchedule
	}
	info, err := scanSchedule(s.pool.QueryRow(ctx, q, sc.Name, doc))
	if errors.Is(err, pgx.ErrNoRows) {
		return jobstore.ScheduleInfo{}, fmt.Errorf("pgstore: %s %s: %w", op, sc.Name, jobstore.ErrScheduleExists)
	}
	if err != nil {
		return jobstore.ScheduleInfo{}, s.fail(ctx, op+" "+sc.Name, err)
	}
	return info, nil
}

// Schedules returns every schedule, sorted by name. It implements
// jobstore.Scheduler.
func (s *Store) Schedules(ctx context.Context) ([]jobstore.ScheduleInfo, error) {
	const op = "schedules"
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.schedules)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobstore.ScheduleInfo, error) { return scanSchedule(row) })
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// GetSchedule returns the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) GetSchedule(ctx context.Context, name string) (jobstore.ScheduleInfo, error) {
	return s.scheduleRow(ctx, "get schedule", name, s.q.getSchedule)
}

// PauseSchedule pauses or resumes the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool) (jobstore.ScheduleInfo, error) {
	return s.scheduleRow(ctx, "pause schedule", name, s.q.pauseSchedule, paused)
}

// RemoveSchedule removes the schedule name. It implements
// jobstore.Scheduler.
func (s *Store) RemoveSchedule(ctx context.Context, name string) error {
	_, err := s.scheduleRow(ctx, "remove schedule", name, s.q.removeSchedule)
	return err
}

// RecordTick notes the tick at of the schedule name and its job, if it is
// later than the latest noted. It implements jobstore.Scheduler.
func (s *Store) RecordTick(ctx context.Context, name string, at time.Time, jobID string) error {
	_, err := s.scheduleRow(ctx, "record tick", name, s.q.recordTick, at, jobID)
	return err
}

// scheduleRow runs q, a statement about the schedule name ($1) that
// returns its row, with args after the name.
func (s *Store) scheduleRow(ctx context.Context, op, name, q string, args ...any) (jobstore.ScheduleInfo, error) {
	if err := storekit.CheckScheduleName("pgstore: "+op, name); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	if err := s.check(ctx, op); err != nil {
		return jobstore.ScheduleInfo{}, err
	}
	info, err := scanSchedule(s.pool.QueryRow(ctx, q, append([]any{name}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return jobstore.ScheduleInfo{}, fmt.Errorf("pgstore: %s: %w", op, storekit.ScheduleNotFound(name))
	}
	if err != nil {
		return jobstore.ScheduleInfo{}, s.fail(ctx, op+" "+name, err)
	}
	return info, nil
}

// scheduleCols are the columns scanSchedule reads.
const scheduleCols = `doc, last_tick, last_job`

// scanSchedule reads a row of scheduleCols.
func scanSchedule(r pgx.Row) (jobstore.ScheduleInfo, error) {
	var (
		info jobstore.ScheduleInfo
		doc  []byte
		last *time.Time
		job  *string
	)
	if err := r.Scan(&doc, &last, &job); err != nil {
		return info, err
	}
	if err := json.Unmarshal(doc, &info.Schedule); err != nil {
		return info, fmt.Errorf("%w: a schedule's doc column: %v", jobstore.ErrCorrupt, err)
	}
	info.CreatedAt = info.CreatedAt.UTC()
	if last != nil {
		info.LastTick = last.UTC()
	}
	if job != nil {
		info.LastJob = *job
	}
	return info, nil
}

// scheduleQueries sets the statements of schedules in q, for the schema
// s (quoted).
func scheduleQueries(q *queries, s string) {
	t := s + ".schedules"
	q.addSchedule = `INSERT INTO ` + t + ` (name, doc) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING ` + scheduleCols
	q.putSchedule = `INSERT INTO ` + t + ` (name, doc) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc RETURNING ` + scheduleCols
	q.schedules = `SELECT ` + scheduleCols + ` FROM ` + t + ` ORDER BY name`
	q.getSchedule = `SELECT ` + scheduleCols + ` FROM ` + t + ` WHERE name = $1`
	q.pauseSchedule = `UPDATE ` + t + ` SET doc = jsonb_set(doc, '{paused}', to_jsonb($2::bool)) WHERE name = $1 RETURNING ` + scheduleCols
	q.removeSchedule = `DELETE FROM ` + t + ` WHERE name = $1 RETURNING ` + scheduleCols
	// recordTick moves the latest tick forward only; a tick at or before
	// it leaves the row as it is, and returns it.
	q.recordTick = `WITH moved AS (
			UPDATE ` + t + ` SET last_tick = $2, last_job = $3
			WHERE name = $1 AND (last_tick IS NULL OR last_tick < $2)
			RETURNING ` + scheduleCols + `)
		SELECT ` + scheduleCols + ` FROM moved
		UNION ALL
		SELECT ` + scheduleCols + ` FROM ` + t + ` WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM moved)`
}

var _ jobstore.RetentionKeeper = (*Store)(nil)

// Retention returns the store's retention policy (the row 'retention' of
// the settings table). It implements jobstore.RetentionKeeper.
func (s *Store) Retention(ctx context.Context) (jobstore.Retention, error) {
	const op = "retention"
	var r jobstore.Retention
	if err := s.check(ctx, op); err != nil {
		return r, err
	}
	var doc []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM `+s.q.schema+`.settings WHERE name = 'retention'`).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, s.fail(ctx, op, err)
	}
	if err := json.Unmarshal(doc, &r); err != nil || r.Validate() != nil {
		return jobstore.Retention{}, fmt.Errorf("pgstore: %s: %w: the settings row retention does not hold a valid policy", op, jobstore.ErrCorrupt)
	}
	return r, nil
}

// SetRetention replaces the store's retention policy. It implements
// jobstore.RetentionKeeper.
func (s *Store) SetRetention(ctx context.Context, r jobstore.Retention) error {
	const op = "set retention"
	if err := r.Validate(); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if err := s.check(ctx, op); err != nil {
		return err
	}
	doc, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO `+s.q.schema+`.settings (name, value) VALUES ('retention', $1)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, doc)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}
