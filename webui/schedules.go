package webui

import (
	"net/http"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// scheduleRow is one schedule on the schedules page.
type scheduleRow struct {
	Name, Spec, TZ string
	// Job is what its ticks make: an exec job's command line, else the
	// kind.
	Job    string
	Paused bool
	// Next and Last are its next tick and its latest fired one, in words
	// ("in 5m", "2m ago"), with their RFC 3339 forms; empty for none.
	Next, NextAt, Last, LastAt string
	// LastJob is the job of its latest tick.
	LastJob string
	// CatchUp and Overlap are its policies.
	CatchUp, Overlap string
	// CanRun says whether this server submits jobs of its kind.
	CanRun bool
}

// schedulesData is the data of the schedules page.
type schedulesData struct {
	// Supported is false for a store that keeps no schedules.
	Supported bool
	Schedules []scheduleRow
	// Paused counts the paused schedules.
	Paused int
}

func (h *Handler) handleSchedules(w http.ResponseWriter, r *http.Request) {
	sc, ok := h.store.(jobstore.Scheduler)
	if !ok {
		h.render(w, r, http.StatusOK, "schedules", "Schedules", schedulesData{})
		return
	}
	all, err := sc.Schedules(r.Context())
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	d := schedulesData{Supported: true}
	now := time.Now()
	for _, s := range all {
		catchUp, overlap := s.Policies()
		row := scheduleRow{Name: s.Name, Spec: s.Spec, TZ: s.Zone(), Job: s.Job.Kind, Paused: s.Paused, LastJob: s.LastJob,
			CatchUp: string(catchUp), Overlap: string(overlap), CanRun: h.kindAllowed(s.Job.Kind)}
		if argv, ok := execArgv(jobstore.Job{Kind: s.Job.Kind, Payload: s.Job.Payload}); ok {
			row.Job = clip(shellQuote(argv), rowCommandLen)
		}
		if n := s.Next(now); !n.IsZero() {
			row.Next, row.NextAt = "in "+ago(n.Sub(now)), n.Format(time.RFC3339)
		}
		if !s.LastTick.IsZero() {
			row.Last, row.LastAt = ago(now.Sub(s.LastTick))+" ago", s.LastTick.Format(time.RFC3339)
		}
		if s.Paused {
			d.Paused++
		}
		d.Schedules = append(d.Schedules, row)
	}
	h.render(w, r, http.StatusOK, "schedules", "Schedules", d)
}

// handleScheduleAction pauses, resumes or runs the schedule of the path,
// and sends the browser back to the schedules page (or, for a run, to the
// job it made; JSON to the page's script).
func (h *Handler) handleScheduleAction(w http.ResponseWriter, r *http.Request) {
	sc, ok := h.store.(jobstore.Scheduler)
	if !ok {
		h.refuse(w, r, http.StatusNotImplemented, "this store keeps no schedules")
		return
	}
	name := r.PathValue("name")
	if err := jobstore.ValidateScheduleName(name); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "a schedule name has only letters, digits and ._-")
		return
	}
	var (
		res actionResult
		err error
	)
	loc := Prefix + "schedules"
	switch r.PathValue("action") {
	case "pause":
		_, err = sc.PauseSchedule(r.Context(), name, true)
		res.Message = "Paused " + name + ": none of its ticks fires until it is resumed."
	case "resume":
		_, err = sc.PauseSchedule(r.Context(), name, false)
		res.Message = "Resumed " + name + "."
	case "run":
		var s jobstore.ScheduleInfo
		s, err = sc.GetSchedule(r.Context(), name)
		if err == nil && !h.kindAllowed(s.Job.Kind) {
			h.refuse(w, r, http.StatusForbidden, "this server does not submit jobs of kind "+s.Job.Kind)
			return
		}
		if err == nil {
			var j jobstore.Job
			if j, _, err = h.store.Submit(r.Context(), s.JobAt(time.Now())); err == nil {
				res.Message = "Made the job of " + name + " now: " + j.ID + "."
				res.Location = Prefix + "jobs/" + j.ID
				loc = res.Location
			}
		}
	default:
		h.refuse(w, r, http.StatusNotFound, "no such action: pause, resume or run")
		return
	}
	h.answerAction(w, r, res, err, loc)
}
