package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// routeWorkers lists the store's live workers.
const routeWorkers = "GET /v1/workers"

// WorkersResponse is the body of the answer to GET /v1/workers.
type WorkersResponse struct {
	// Workers are the live workers, sorted by ID, each with the jobs it
	// runs now; never null.
	Workers []jobstore.WorkerInfo `json:"workers"`
	// UnservedKinds are the kinds that have queued jobs but no live
	// worker to run them, sorted; never null.
	UnservedKinds []string `json:"unserved_kinds"`
	// UnservedQueues are the queues that have queued jobs but no live
	// worker that takes them, sorted; never null.
	UnservedQueues []string `json:"unserved_queues"`
	// Ended are the workers that ended within jobstore.RecentWorkerWindow
	// and are not live again, sorted by ID, each with EndedAt; absent when
	// none did, or the store is not a jobstore.WorkerHistory.
	Ended []jobstore.WorkerInfo `json:"ended,omitempty"`
}

// Workers returns the body of GET /v1/workers for c: its live workers
// (see jobstore.ListWorkers), the kinds and queues none of them serves,
// and the workers that ended lately. It returns an error wrapping
// errors.ErrUnsupported for a store that keeps no list of workers. jobdir
// workers prints the same.
func Workers(ctx context.Context, c jobstore.Client) (WorkersResponse, error) {
	ws, err := jobstore.ListWorkers(ctx, c)
	if err != nil {
		return WorkersResponse{}, err
	}
	st, err := c.Stats(ctx)
	if err != nil {
		return WorkersResponse{}, err
	}
	v := WorkersResponse{Workers: ws, UnservedKinds: jobstore.UnservedKinds(st, ws), UnservedQueues: jobstore.UnservedQueues(st, ws)}
	if h, ok := c.(jobstore.WorkerHistory); ok {
		// The live ones are read already: only the ends are asked for,
		// those of a name live again left out.
		ended, err := h.EndedWorkers(ctx, time.Now().Add(-jobstore.RecentWorkerWindow))
		if err != nil {
			return WorkersResponse{}, err
		}
		v.Ended = []jobstore.WorkerInfo{}
		for _, w := range ended {
			if !slices.ContainsFunc(ws, func(l jobstore.WorkerInfo) bool { return l.ID == w.ID }) {
				w.Running = []string{}
				v.Ended = append(v.Ended, w)
			}
		}
	}
	return v, nil
}

// handleWorkers answers with Workers: the store's live workers, the kinds
// whose queued jobs none of them runs, and the workers that ended lately;
// 501 not_implemented for a store that keeps no list of workers.
func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) {
	v, err := Workers(r.Context(), s.store)
	if errors.Is(err, errors.ErrUnsupported) {
		s.writeError(w, r, newError(http.StatusNotImplemented, CodeNotImplemented, "this store keeps no list of workers"))
		return
	}
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, v)
}
