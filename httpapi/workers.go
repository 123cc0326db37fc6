package httpapi

import (
	"errors"
	"net/http"

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
}

// handleWorkers answers with the store's live workers and the kinds whose
// queued jobs none of them runs (see jobstore.ListWorkers and
// jobstore.UnservedKinds); 501 not_implemented for a store that keeps no
// list of workers.
func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) {
	ws, err := jobstore.ListWorkers(r.Context(), s.store)
	if errors.Is(err, errors.ErrUnsupported) {
		s.writeError(w, r, newError(http.StatusNotImplemented, CodeNotImplemented, "this store keeps no list of workers"))
		return
	}
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	st, err := s.store.Stats(r.Context())
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, WorkersResponse{Workers: ws, UnservedKinds: jobstore.UnservedKinds(st, ws), UnservedQueues: jobstore.UnservedQueues(st, ws)})
}
