package httpapi

import (
	"errors"
	"net/http"
	"regexp"

	"github.com/jobdir/jobdir/jobstore"
)

// The routes of dependencies and batches (jobstore.DependencyReader).
const (
	routeDependents = "GET /v1/jobs/{id}/dependents"
	routeBatchInfo  = "GET /v1/batches/{name}"
)

// DependentsResponse is the body of the answer to GET
// /v1/jobs/{id}/dependents.
type DependentsResponse struct {
	// Jobs are the jobs that name the job in their "after", oldest first;
	// never null.
	Jobs []Job `json:"jobs"`
}

// dependencyReader returns the store's dependencies and batches, or
// answers 501 not_implemented for a store that keeps none.
func (s *Server) dependencyReader(w http.ResponseWriter, r *http.Request) (jobstore.DependencyReader, bool) {
	dr, ok := s.store.(jobstore.DependencyReader)
	if !ok {
		s.writeError(w, r, newError(http.StatusNotImplemented, CodeNotImplemented, "this store keeps no dependencies or batches"))
	}
	return dr, ok
}

// handleDependents answers with the jobs that depend on the job: 404 for
// a job that does not exist.
func (s *Server) handleDependents(w http.ResponseWriter, r *http.Request) {
	dr, ok := s.dependencyReader(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	// Dependents of an unknown job are none; the API says it is unknown.
	if _, err := s.store.Get(r.Context(), id); err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	jobs, err := dr.Dependents(r.Context(), id)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	resp := DependentsResponse{Jobs: make([]Job, len(jobs))}
	for i, j := range jobs {
		resp.Jobs[i] = FromJob(j)
	}
	s.writeJSON(w, http.StatusOK, resp)
}

// handleBatchInfo answers with a batch and the states of its jobs
// (jobstore.BatchInfo): 404 for a batch no job was submitted to, 400 for
// a name that cannot be one.
func (s *Server) handleBatchInfo(w http.ResponseWriter, r *http.Request) {
	dr, ok := s.dependencyReader(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := jobstore.ValidateBatchName(name); err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	b, err := dr.Batch(r.Context(), name)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	if b.States == nil {
		b.States = map[jobstore.State]int{}
	}
	s.writeJSON(w, http.StatusOK, b)
}

// checkAfterSpecs refuses a job of a batch submit, at index i, whose
// after_specs names a job that is not an earlier one of the batch, with
// the error a single submit's spec gets (422): the store refuses it too,
// but this message names the field as the request spells it.
func checkAfterSpecs(i int, spec jobstore.Spec) *Error {
	for k, n := range spec.AfterSpecs {
		switch {
		case i == 0:
			return newError(http.StatusUnprocessableEntity, CodeInvalidSpec,
				"after_specs[%d] is %d: the first job of a batch has no earlier job to name", k, n)
		case n < 0 || n >= i:
			return newError(http.StatusUnprocessableEntity, CodeInvalidSpec,
				"after_specs[%d] is %d: a job can only name an earlier job of its batch, by its index in jobs (0 to %d)", k, n, i-1)
		}
	}
	return nil
}

// storeSpecIndex matches the "spec N: " by which a store's error about
// one spec of a batch names it.
var storeSpecIndex = regexp.MustCompile(`^spec (\d+): `)

// batchError is the Error of a batch submit that the store refused: its
// message names the job as the request does, "jobs[N]: ", where the
// store's names its spec.
func batchError(err error) *Error {
	e := toError(err, http.StatusUnprocessableEntity, CodeInvalidSpec)
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		e.Message = storeSpecIndex.ReplaceAllString(e.Message, "jobs[$1]: ")
	}
	return e
}
