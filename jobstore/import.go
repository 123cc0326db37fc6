package jobstore

import (
	"context"
	"errors"
	"fmt"
)

// ErrKeyTaken is returned by Import for a job whose idempotency key already
// names another job in the store: importing it would make two jobs of one
// key.
var ErrKeyTaken = errors.New("idempotency key names another job")

// MaxImport is the most jobs one Import takes.
const MaxImport = 1000

// Importer is implemented by stores that can take in jobs made by another
// store as they are, keeping their IDs: "jobdir copy" moves jobs between
// stores with it. storetest.Run checks every store that implements it.
type Importer interface {
	// Import adds each of jobs, in order, with every field as it is (ID,
	// key, state, attempts, times, payload, result, last error, history),
	// unless the store already holds a job with its ID, which it leaves
	// alone; it returns how many it added. So a second Import of the same
	// jobs adds none: an interrupted copy is resumed by copying again.
	//
	// An imported queued job is claimable as a submitted one is (its
	// Attempt goes on counting from where it was), an imported key belongs
	// to its job until that job is pruned, and an imported finished job is
	// pruned by its FinishedAt. A running job is refused: it belongs to a
	// worker of the other store.
	//
	// Returns an error wrapping ErrInvalidInput, before adding any job, if
	// a job is invalid for ValidateImport or there are more than
	// MaxImport; and an error wrapping ErrKeyTaken, naming the job, if a
	// job's key names another job here. On an error, the jobs before the
	// one that failed may have been added (count them with Get): Import
	// again after fixing the cause.
	Import(ctx context.Context, jobs []Job) (int, error)
}

// ValidateImport checks a job for Import: a valid ID, kind, key and
// payload (maxPayload bounds the payload and the result; zero means
// DefaultMaxPayload), a state that is not running, attempts and priority in
// range, and the times a job in its state has. Errors wrap ErrInvalidInput
// and name the job.
func ValidateImport(j Job, maxPayload int) error {
	if err := validateImport(j, maxPayload); err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	return nil
}

func validateImport(j Job, maxPayload int) error {
	if err := ValidateID(j.ID); err != nil {
		return err
	}
	if err := (Spec{Kind: j.Kind, Key: j.Key, Payload: j.Payload, MaxAttempts: j.MaxAttempts, Priority: j.Priority, Timeout: j.Timeout}).Validate(maxPayload); err != nil {
		return err
	}
	if len(j.Result) > 0 {
		if err := ValidatePayload(j.Result, maxPayload); err != nil {
			return fmt.Errorf("result: %w", err)
		}
	}
	switch {
	case !j.State.Valid():
		return fmt.Errorf("%w: unknown state %q", ErrInvalidInput, j.State)
	case j.State == StateRunning:
		return fmt.Errorf("%w: the job is running (a worker of the store it comes from holds it); import it once it has finished or is queued again", ErrInvalidInput)
	case j.MaxAttempts < 1:
		return fmt.Errorf("%w: max attempts %d", ErrInvalidInput, j.MaxAttempts)
	case j.Attempt < 0:
		return fmt.Errorf("%w: negative attempt %d", ErrInvalidInput, j.Attempt)
	case j.RunAt.IsZero() || j.CreatedAt.IsZero() || j.UpdatedAt.IsZero():
		return fmt.Errorf("%w: run_at, created_at and updated_at are required", ErrInvalidInput)
	case j.State.Terminal() && j.FinishedAt.IsZero():
		return fmt.Errorf("%w: a %s job has a finished_at", ErrInvalidInput, j.State)
	case !j.State.Terminal() && !j.FinishedAt.IsZero():
		return fmt.Errorf("%w: a %s job has no finished_at", ErrInvalidInput, j.State)
	case len(j.History) > MaxHistory:
		return fmt.Errorf("%w: %d attempts in the history, more than %d", ErrInvalidInput, len(j.History), MaxHistory)
	}
	return nil
}

// ValidateImports checks the jobs of one Import: at most MaxImport, each
// valid for ValidateImport.
func ValidateImports(jobs []Job, maxPayload int) error {
	if len(jobs) > MaxImport {
		return fmt.Errorf("%w: %d jobs in one import, more than %d", ErrInvalidInput, len(jobs), MaxImport)
	}
	for _, j := range jobs {
		if err := ValidateImport(j, maxPayload); err != nil {
			return err
		}
	}
	return nil
}
