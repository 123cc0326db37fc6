package storekit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jobdir/jobdir/jobstore"
)

// ValidateClaimBatch checks the max of a ClaimBatch.
func ValidateClaimBatch(max int) error {
	if max < 1 || max > jobstore.MaxClaimBatch {
		return fmt.Errorf("%w: a claim batch of %d jobs: want 1 to %d", jobstore.ErrInvalidInput, max, jobstore.MaxClaimBatch)
	}
	return nil
}

// ValidateImport checks a job for Import: a valid ID, kind, key and
// payload (maxPayload bounds the payload and the result; zero means
// DefaultMaxPayload), a state that is not running, attempts and priority in
// range, and the times a job in its state has. Errors wrap ErrInvalidInput
// and name the job.
func ValidateImport(j jobstore.Job, maxPayload int) error {
	if err := validateImport(j, maxPayload); err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	return nil
}

func validateImport(j jobstore.Job, maxPayload int) error {
	if err := jobstore.ValidateID(j.ID); err != nil {
		return err
	}
	spec := j.RerunSpec()
	spec.Key = j.Key
	if err := spec.Validate(maxPayload); err != nil {
		return err
	}
	for _, id := range j.After {
		if err := jobstore.ValidateID(id); err != nil {
			return fmt.Errorf("after: %w", err)
		}
	}
	for _, b := range []string{j.Batch, j.AfterBatch} {
		if b != "" {
			if err := jobstore.ValidateBatchName(b); err != nil {
				return err
			}
		}
	}
	if len(j.Result) > 0 {
		if err := jobstore.ValidatePayload(j.Result, maxPayload); err != nil {
			return fmt.Errorf("result: %w", err)
		}
	}
	switch {
	case !j.State.Valid():
		return fmt.Errorf("%w: unknown state %q", jobstore.ErrInvalidInput, j.State)
	case j.State == jobstore.StateRunning:
		return fmt.Errorf("%w: the job is running (a worker of the store it comes from holds it); import it once it has finished or is queued again", jobstore.ErrInvalidInput)
	case j.MaxAttempts < 1:
		return fmt.Errorf("%w: max attempts %d", jobstore.ErrInvalidInput, j.MaxAttempts)
	case j.Attempt < 0:
		return fmt.Errorf("%w: negative attempt %d", jobstore.ErrInvalidInput, j.Attempt)
	case j.RunAt.IsZero() || j.CreatedAt.IsZero() || j.UpdatedAt.IsZero():
		return fmt.Errorf("%w: run_at, created_at and updated_at are required", jobstore.ErrInvalidInput)
	case j.State.Terminal() && j.FinishedAt.IsZero():
		return fmt.Errorf("%w: a %s job has a finished_at", jobstore.ErrInvalidInput, j.State)
	case !j.State.Terminal() && !j.FinishedAt.IsZero():
		return fmt.Errorf("%w: a %s job has no finished_at", jobstore.ErrInvalidInput, j.State)
	case j.State == jobstore.StateWaiting && len(j.After) == 0:
		return fmt.Errorf("%w: a waiting job names the jobs it waits for (after)", jobstore.ErrInvalidInput)
	case len(j.After) > jobstore.MaxAfter:
		return fmt.Errorf("%w: %d dependencies, limit %d", jobstore.ErrInvalidInput, len(j.After), jobstore.MaxAfter)
	case len(j.History) > jobstore.MaxHistory:
		return fmt.Errorf("%w: %d attempts in the history, more than %d", jobstore.ErrInvalidInput, len(j.History), jobstore.MaxHistory)
	}
	return nil
}

// ValidateImports checks the jobs of one Import: at most MaxImport, each
// valid for ValidateImport.
func ValidateImports(jobs []jobstore.Job, maxPayload int) error {
	if len(jobs) > jobstore.MaxImport {
		return fmt.Errorf("%w: %d jobs in one import, more than %d", jobstore.ErrInvalidInput, len(jobs), jobstore.MaxImport)
	}
	for _, j := range jobs {
		if err := ValidateImport(j, maxPayload); err != nil {
			return err
		}
	}
	return nil
}

// ValidateBatch checks a SubmitBatch's specs: at most MaxBatch, each valid
// for Spec.Validate(maxPayload). Its error names the first bad index.
func ValidateBatch(specs []jobstore.Spec, maxPayload int) error {
	if len(specs) > jobstore.MaxBatch {
		return fmt.Errorf("%w: batch of %d specs, more than %d", jobstore.ErrInvalidInput, len(specs), jobstore.MaxBatch)
	}
	for i, spec := range specs {
		if err := spec.Validate(maxPayload); err != nil {
			return fmt.Errorf("spec %d: %w", i, err)
		}
	}
	return nil
}

// PruneFilter checks the states given to StatePruner.PruneStates and
// returns whether a job in state is among them.
func PruneFilter(states []jobstore.State) (func(jobstore.State) bool, error) {
	for _, st := range states {
		if !st.Terminal() {
			return nil, fmt.Errorf("%w: state %q: only finished (succeeded, failed, canceled) jobs are pruned", jobstore.ErrInvalidInput, st)
		}
	}
	return func(st jobstore.State) bool { return len(states) == 0 || slices.Contains(states, st) }, nil
}

// SortWorkers sorts ws by ID, then by StartedAt. Registries use it.
func SortWorkers(ws []jobstore.WorkerInfo) {
	slices.SortFunc(ws, func(a, b jobstore.WorkerInfo) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return a.StartedAt.Compare(b.StartedAt)
	})
}
