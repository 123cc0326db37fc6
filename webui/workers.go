package webui

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// workerRow is one live worker on the workers page.
type workerRow struct {
	ID, Host, PID, Kinds, Started, Version string
	Running                                []string
	Concurrency                            int
}

// workersData is the data of the workers page.
type workersData struct {
	// Supported is false for a store that keeps no list of workers.
	Supported bool
	Workers   []workerRow
	// Unserved are the kinds whose queued jobs no live worker runs.
	Unserved []string
	// Slots and Busy add up the workers' concurrency and running jobs.
	Slots, Busy int
}

func (h *Handler) handleWorkers(w http.ResponseWriter, r *http.Request) {
	d := workersData{Supported: true}
	ws, err := jobstore.ListWorkers(r.Context(), h.store)
	if errors.Is(err, errors.ErrUnsupported) {
		h.render(w, r, http.StatusOK, "workers", "Workers", workersData{})
		return
	}
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	st, err := h.store.Stats(r.Context())
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	now := time.Now()
	for _, wk := range ws {
		row := workerRow{ID: wk.ID, Host: wk.Host, Kinds: "any kind", Started: ago(now.Sub(wk.StartedAt)) + " ago",
			Version: wk.Version, Running: wk.Running, Concurrency: wk.Concurrency}
		if wk.PID > 0 {
			row.PID = strconv.Itoa(wk.PID)
		}
		if len(wk.Kinds) > 0 {
			row.Kinds = strings.Join(wk.Kinds, ", ")
		}
		d.Workers = append(d.Workers, row)
		d.Slots += wk.Concurrency
		d.Busy += len(wk.Running)
	}
	d.Unserved = jobstore.UnservedKinds(st, ws)
	h.render(w, r, http.StatusOK, "workers", "Workers", d)
}
