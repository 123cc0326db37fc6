package httpapi

import (
	"fmt"
	"net/http"

	"github.com/jobdir/jobdir/jobstore"
)

// The routes of the queues (jobstore.QueueController).
const (
	routeQueues      = "GET /v1/queues"
	routeQueuePause  = "POST /v1/queues/{queue}/pause"
	routeQueueResume = "POST /v1/queues/{queue}/resume"
	routeQueueLimit  = "POST /v1/queues/{queue}/limit"
)

// LimitRequest is the body of POST /v1/queues/{queue}/limit.
type LimitRequest struct {
	// Limit is the most jobs of the queue that run at once, in every
	// process of the store together; 0 removes the limit. Absent leaves
	// it as it is.
	Limit *int `json:"limit,omitempty"`
	// PerPartition is the most jobs of each partition of the queue that
	// run at once; 0 removes that limit. Absent leaves it as it is.
	PerPartition *int `json:"per_partition,omitempty"`
	// Rate is the queue's rate limit, "N/DURATION" such as "20/1s" (see
	// jobstore.Rate); "off" removes it. Absent leaves it as it is. One of
	// the three fields is required.
	Rate *string `json:"rate,omitempty"`
}

// QueuesResponse is the body of the answer to GET /v1/queues.
type QueuesResponse struct {
	// Queues holds every queue that has jobs or settings, sorted by name;
	// never null.
	Queues []jobstore.QueueInfo `json:"queues"`
}

// QueueResponse is the body of the answer to a queue's pause and resume:
// the queue as it is once the change is made.
type QueueResponse struct {
	Queue jobstore.QueueInfo `json:"queue"`
}

// queueController returns the store's queue settings, or answers 501
// not_implemented for a store that keeps none.
func (s *Server) queueController(w http.ResponseWriter, r *http.Request) (jobstore.QueueController, bool) {
	qc, ok := s.store.(jobstore.QueueController)
	if !ok {
		s.writeError(w, r, newError(http.StatusNotImplemented, CodeNotImplemented, "this store keeps no queue settings"))
	}
	return qc, ok
}

func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) {
	qc, ok := s.queueController(w, r)
	if !ok {
		return
	}
	qs, err := qc.Queues(r.Context())
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	if qs == nil {
		qs = []jobstore.QueueInfo{}
	}
	s.writeJSON(w, http.StatusOK, QueuesResponse{Queues: qs})
}

func (s *Server) handleQueuePause(w http.ResponseWriter, r *http.Request) {
	s.changeQueue(w, r, func(qc jobstore.QueueController, name string) error { return qc.PauseQueue(r.Context(), name) })
}

func (s *Server) handleQueueResume(w http.ResponseWriter, r *http.Request) {
	s.changeQueue(w, r, func(qc jobstore.QueueController, name string) error { return qc.ResumeQueue(r.Context(), name) })
}

// handleQueueLimit sets or clears a queue's concurrency limit, its
// per-partition limit, its rate limit, or several; 501
// not_implemented for a store that keeps no limits.
func (s *Server) handleQueueLimit(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.store.(jobstore.QueueLimiter); !ok {
		s.writeError(w, r, newError(http.StatusNotImplemented, CodeNotImplemented, "this store does not limit queues"))
		return
	}
	var req LimitRequest
	if err := decodeBody(r.Body, &req); err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	if req.Limit == nil && req.PerPartition == nil && req.Rate == nil {
		s.writeError(w, r, newError(http.StatusBadRequest, CodeInvalidInput, `request body has none of "limit", "per_partition" and "rate"; want {"limit": 2}, {"per_partition": 1} (0: no limit) or {"rate": "20/1s"} ("off": none)`))
		return
	}
	var rate jobstore.Rate
	if req.Rate != nil && *req.Rate != "off" {
		var err error
		if rate, err = jobstore.ParseRate(*req.Rate); err != nil {
			s.fail(w, r, fmt.Errorf(`%w (or "off": no rate limit)`, err), http.StatusBadRequest, CodeInvalidInput)
			return
		}
	}
	// Both are checked before either is set, so that a refused request
	// changes nothing.
	for _, n := range []*int{req.Limit, req.PerPartition} {
		if n == nil {
			continue
		}
		if err := jobstore.ValidateQueueLimit(*n); err != nil {
			s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
			return
		}
	}
	s.changeQueue(w, r, func(qc jobstore.QueueController, name string) error {
		ql := qc.(jobstore.QueueLimiter)
		if req.Limit != nil {
			if err := ql.SetQueueLimit(r.Context(), name, *req.Limit); err != nil {
				return err
			}
		}
		if req.PerPartition != nil {
			if err := ql.SetPartitionLimit(r.Context(), name, *req.PerPartition); err != nil {
				return err
			}
		}
		if req.Rate != nil {
			return ql.SetQueueRate(r.Context(), name, rate)
		}
		return nil
	})
}

// changeQueue makes change to the queue of the request's path, and
// answers with the queue as it is then.
func (s *Server) changeQueue(w http.ResponseWriter, r *http.Request, change func(jobstore.QueueController, string) error) {
	qc, ok := s.queueController(w, r)
	if !ok {
		return
	}
	name := r.PathValue("queue")
	if err := jobstore.ValidateQueue(name); err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	if err := change(qc, name); err != nil {
		s.fail(w, r, fmt.Errorf("queue %s: %w", name, err), http.StatusBadRequest, CodeInvalidInput)
		return
	}
	qs, err := qc.Queues(r.Context())
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	q := jobstore.QueueInfo{Queue: name}
	for _, info := range qs {
		if info.Queue == name {
			q = info
		}
	}
	s.writeJSON(w, http.StatusOK, QueueResponse{Queue: q})
}
