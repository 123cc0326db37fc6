package webui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

// queueRow is one queue on the queues page.
type queueRow struct {
	Queue string
	// Path is Queue escaped for a URL path segment: a queue name may hold
	// a slash.
	Path         string
	Paused       bool
	Limit        int
	PerPartition int
	// Rate is the rate limit's text form, "" for none.
	Rate            string
	Queued, Running int
	// Wait is how long its oldest due job has waited; empty when none is
	// due.
	Wait string
}

// queuesData is the data of the queues page.
type queuesData struct {
	// Supported is false for a store that keeps no queue settings.
	Supported bool
	Queues    []queueRow
	// Paused counts the paused queues.
	Paused int
	// Limits is set when the store keeps concurrency limits.
	Limits bool
}

func (h *Handler) handleQueues(w http.ResponseWriter, r *http.Request) {
	qc, ok := h.store.(jobstore.QueueController)
	if !ok {
		h.render(w, r, http.StatusOK, "queues", "Queues", queuesData{})
		return
	}
	qs, err := qc.Queues(r.Context())
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	_, limits := h.store.(jobstore.QueueLimiter)
	d := queuesData{Supported: true, Limits: limits}
	now := time.Now()
	for _, q := range qs {
		row := queueRow{Queue: q.Queue, Path: url.PathEscape(q.Queue), Paused: q.Paused, Limit: q.Limit, PerPartition: q.PerPartition, Rate: q.Rate.String(), Queued: q.Queued, Running: q.Running}
		if !q.OldestDueAt.IsZero() {
			row.Wait = ago(now.Sub(q.OldestDueAt))
		}
		if q.Paused {
			d.Paused++
		}
		d.Queues = append(d.Queues, row)
	}
	h.render(w, r, http.StatusOK, "queues", "Queues", d)
}

// handleQueueAction pauses or resumes the queue of the path, and sends the
// browser back to the queues page (or answers JSON to the page's script).
func (h *Handler) handleQueueAction(w http.ResponseWriter, r *http.Request) {
	qc, ok := h.store.(jobstore.QueueController)
	if !ok {
		h.refuse(w, r, http.StatusNotImplemented, "this store keeps no queue settings")
		return
	}
	name := r.PathValue("queue")
	if err := jobstore.ValidateQueue(name); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "a queue name has only letters, digits and ._:/-")
		return
	}
	var res actionResult
	var err error
	switch r.PathValue("action") {
	case "pause":
		err = qc.PauseQueue(r.Context(), name)
		res.Message = "Paused " + name + ": no worker starts its jobs until it is resumed."
	case "resume":
		err = qc.ResumeQueue(r.Context(), name)
		res.Message = "Resumed " + name + "."
	case "limit":
		ql, ok := qc.(jobstore.QueueLimiter)
		if !ok {
			h.refuse(w, r, http.StatusNotImplemented, "this store does not limit queues")
			return
		}
		// One form sets the limit, one the per-partition limit, one the
		// rate.
		field, per := "limit", false
		_ = r.FormValue(field) // parses the form, of either encoding
		if _, ok := r.Form["rate"]; ok {
			text := strings.TrimSpace(r.FormValue("rate"))
			var rate jobstore.Rate
			if text != "" && text != "off" {
				var perr error
				if rate, perr = jobstore.ParseRate(text); perr != nil {
					h.refuse(w, r, http.StatusBadRequest, "a rate is N/DURATION, such as 100/1m or 10/s (at most N starts in any window of that length), or off")
					return
				}
			}
			err = ql.SetQueueRate(r.Context(), name, rate)
			res.Message = fmt.Sprintf("At most %d jobs of %s start in any window of %s.", rate.N, name, humantime.Duration(rate.Per))
			if rate.IsZero() {
				res.Message = name + " has no rate limit."
			}
			break
		}
		if _, ok := r.Form["per_partition"]; ok {
			field, per = "per_partition", true
		}
		n, perr := strconv.Atoi(strings.TrimSpace(r.FormValue(field)))
		if perr != nil || jobstore.ValidateQueueLimit(n) != nil {
			h.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("a limit is a whole number from 0 (no limit) to %d", jobstore.MaxQueueLimit))
			return
		}
		switch {
		case per:
			err = ql.SetPartitionLimit(r.Context(), name, n)
			res.Message = fmt.Sprintf("At most %d jobs of each partition of %s run at once.", n, name)
			if n == 1 {
				res.Message = "The jobs of each partition of " + name + " run one at a time."
			}
			if n == 0 {
				res.Message = name + " has no per-partition limit."
			}
		default:
			err = ql.SetQueueLimit(r.Context(), name, n)
			res.Message = fmt.Sprintf("At most %d jobs of %s run at once.", n, name)
			if n == 0 {
				res.Message = name + " has no limit."
			}
		}
	default:
		h.refuse(w, r, http.StatusNotFound, "no such action: pause, resume or limit")
		return
	}
	h.answerAction(w, r, res, err, Prefix+"queues")
}
