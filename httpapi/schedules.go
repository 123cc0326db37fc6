package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// The routes of the schedules (jobstore.Scheduler).
const (
	routeSchedules      = "GET /v1/schedules"
	routeScheduleAdd    = "POST /v1/schedules"
	routeSchedule       = "GET /v1/schedules/{name}"
	routeScheduleRemove = "DELETE /v1/schedules/{name}"
	routeSchedulePause  = "POST /v1/schedules/{name}/pause"
	routeScheduleResume = "POST /v1/schedules/{name}/resume"
	routeScheduleRun    = "POST /v1/schedules/{name}/run"
)

// ScheduleRequest is the body of POST /v1/schedules: a schedule to add
// (see jobstore.Schedule).
type ScheduleRequest struct {
	// Name names the schedule; required.
	Name string `json:"name"`
	// Spec says when it ticks: a cron expression, a descriptor such as
	// "@daily", or "@every 1h"; required.
	Spec string `json:"spec"`
	// TZ is the IANA zone Spec is read in; empty means UTC.
	TZ string `json:"tz,omitempty"`
	// Job is the job each tick makes, as a submit would (no key: each
	// tick's job is keyed by its tick).
	Job SubmitRequest `json:"job"`
	// CatchUp is "one" (empty), "skip" or "all".
	CatchUp string `json:"catch_up,omitempty"`
	// CatchUpWindow bounds "all"; zero means 24h.
	CatchUpWindow Duration `json:"catch_up_window,omitzero"`
	// Overlap is "allow" (empty), "skip" or "queue".
	Overlap string `json:"overlap,omitempty"`
	// Replace replaces a schedule of the same name, keeping its ticks
	// fired; without it such a schedule is a 409 schedule_exists.
	Replace bool `json:"replace,omitempty"`
}

// Schedule is a schedule as the API sends it.
type Schedule struct {
	Name          string        `json:"name"`
	Spec          string        `json:"spec"`
	TZ            string        `json:"tz"`
	Job           SubmitRequest `json:"job"`
	CatchUp       string        `json:"catch_up"`
	CatchUpWindow Duration      `json:"catch_up_window,omitzero"`
	Overlap       string        `json:"overlap"`
	Paused        bool          `json:"paused"`
	CreatedAt     time.Time     `json:"created_at"`
	// Next is its next tick; null while paused.
	Next *time.Time `json:"next"`
	// Last is its latest fired tick, null if none; LastJob that tick's job.
	Last    *time.Time `json:"last"`
	LastJob string     `json:"last_job,omitempty"`
}

// FromSchedule returns info as the API sends it, with its next tick after
// now.
func FromSchedule(info jobstore.ScheduleInfo, now time.Time) Schedule {
	catchUp, overlap := info.Policies()
	v := Schedule{Name: info.Name, Spec: info.Spec, TZ: info.Zone(), Job: FromSpec(info.Job), CatchUp: string(catchUp),
		CatchUpWindow: Duration(info.CatchUpWindow), Overlap: string(overlap), Paused: info.Paused,
		CreatedAt: info.CreatedAt, LastJob: info.LastJob}
	if n := info.Next(now); !n.IsZero() {
		v.Next = &n
	}
	if !info.LastTick.IsZero() {
		last := info.LastTick
		v.Last = &last
	}
	return v
}

// SchedulesResponse is the body of the answer to GET /v1/schedules.
type SchedulesResponse struct {
	// Schedules holds every schedule, sorted by name; never null.
	Schedules []Schedule `json:"schedules"`
}

// scheduleRequest is how the server reads a ScheduleRequest: strictly,
// with the job read as a submit is.
type scheduleRequest struct {
	Name          strictString  `json:"name"`
	Spec          strictString  `json:"spec"`
	TZ            strictString  `json:"tz"`
	Job           submitRequest `json:"job"`
	CatchUp       strictString  `json:"catch_up"`
	CatchUpWindow durationText  `json:"catch_up_window"`
	Overlap       strictString  `json:"overlap"`
	Replace       bool          `json:"replace"`
}

// decodeSchedule reads a ScheduleRequest from r: the schedule it
// describes, and whether to replace one of its name.
func decodeSchedule(r io.Reader) (jobstore.Schedule, bool, error) {
	var req scheduleRequest
	if err := decodeBody(&utf8Reader{r: r}, &req); err != nil {
		return jobstore.Schedule{}, false, err
	}
	job, err := req.Job.spec()
	if err != nil {
		return jobstore.Schedule{}, false, fmt.Errorf("job: %w", err)
	}
	var window time.Duration
	if req.CatchUpWindow != "" {
		if window, err = time.ParseDuration(string(req.CatchUpWindow)); err != nil {
			return jobstore.Schedule{}, false, fmt.Errorf("%w: catch_up_window %q is not a duration such as 48h", jobstore.ErrInvalidInput, truncate(string(req.CatchUpWindow), 32))
		}
	}
	return jobstore.Schedule{Name: string(req.Name), Spec: string(req.Spec), TZ: string(req.TZ), Job: job,
		CatchUp: jobstore.CatchUp(req.CatchUp), CatchUpWindow: window, Overlap: jobstore.Overlap(req.Overlap)}, req.Replace, nil
}

// scheduler returns the store's schedules, or answers 501 not_implemented
// for a store that keeps none.
func (s *Server) scheduler(w http.ResponseWriter, r *http.Request) (jobstore.Scheduler, bool) {
	sc, ok := s.store.(jobstore.Scheduler)
	if !ok {
		s.writeError(w, r, newError(http.StatusNotImplemented, CodeNotImplemented, "this store keeps no schedules"))
	}
	return sc, ok
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.scheduler(w, r)
	if !ok {
		return
	}
	all, err := sc.Schedules(r.Context())
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	now := time.Now()
	out := SchedulesResponse{Schedules: make([]Schedule, len(all))}
	for i, info := range all {
		out.Schedules[i] = FromSchedule(info, now)
	}
	s.writeJSON(w, http.StatusOK, out)
}

// handleScheduleAdd adds a schedule (201), or replaces one (200); its
// job's kind must be one this server accepts from HTTP, as a submit's.
func (s *Server) handleScheduleAdd(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.scheduler(w, r)
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
	sched, replace, err := decodeSchedule(r.Body)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	if e := s.checkSpec(sched.Job); e != nil {
		s.writeError(w, r, e)
		return
	}
	status := http.StatusCreated
	if replace {
		if _, err := sc.GetSchedule(r.Context(), sched.Name); err == nil {
			status = http.StatusOK
		}
	}
	info, err := sc.AddSchedule(r.Context(), sched, replace)
	if err != nil {
		s.fail(w, r, err, http.StatusUnprocessableEntity, CodeInvalidSpec)
		return
	}
	if status == http.StatusCreated {
		w.Header().Set("Location", "schedules/"+info.Name)
	}
	s.writeJSON(w, status, FromSchedule(info, time.Now()))
}

func (s *Server) handleSchedule(w http.ResponseWriter, r *http.Request) {
	s.onSchedule(w, r, func(sc jobstore.Scheduler, name string) (jobstore.ScheduleInfo, error) {
		return sc.GetSchedule(r.Context(), name)
	})
}

func (s *Server) handleSchedulePause(w http.ResponseWriter, r *http.Request) {
	s.onSchedule(w, r, func(sc jobstore.Scheduler, name string) (jobstore.ScheduleInfo, error) {
		return sc.PauseSchedule(r.Context(), name, true)
	})
}

func (s *Server) handleScheduleResume(w http.ResponseWriter, r *http.Request) {
	s.onSchedule(w, r, func(sc jobstore.Scheduler, name string) (jobstore.ScheduleInfo, error) {
		return sc.PauseSchedule(r.Context(), name, false)
	})
}

// handleScheduleRemove removes a schedule (204); the jobs of its ticks
// stay.
func (s *Server) handleScheduleRemove(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.scheduler(w, r)
	if !ok {
		return
	}
	if err := sc.RemoveSchedule(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleScheduleRun makes the schedule's job now, once, keyed as a tick of
// this second, as jobdir schedule run does: 201 with the job (200 if a
// tick of this second made it already).
func (s *Server) handleScheduleRun(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.scheduler(w, r)
	if !ok {
		return
	}
	info, err := sc.GetSchedule(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	// No Location: a reference relative to this route would not name
	// the job.
	s.submitOne(w, r, info.JobAt(time.Now()), "")
}

// onSchedule answers with the schedule of the request's path as change
// leaves it.
func (s *Server) onSchedule(w http.ResponseWriter, r *http.Request, change func(jobstore.Scheduler, string) (jobstore.ScheduleInfo, error)) {
	sc, ok := s.scheduler(w, r)
	if !ok {
		return
	}
	info, err := change(sc, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, FromSchedule(info, time.Now()))
}
