package jobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jobdir/jobdir/internal/clip"
)

// Limits on dependencies and batches.
const (
	// MaxAfter is the most dependencies one job may have, counted after
	// the names of one job given twice are merged. A batch's callback
	// depends on every job of the batch, so a batch may hold at most
	// MaxAfter jobs when its callback is submitted.
	MaxAfter = MaxBatch
	// MaxBatchNameLen is the longest batch name accepted, in bytes.
	MaxBatchNameLen = 128
)

// More sentinel errors, of dependencies and batches.
var (
	// ErrBatchClosed is returned by a submit to a batch whose callback
	// was submitted (Spec.Batch, Spec.AfterBatch): its set of jobs is
	// final.
	ErrBatchClosed = errors.New("batch closed")
	// ErrDependencyFailed is returned by Retry of a job whose dependency
	// (Job.After) failed or was canceled and is still so: retried, the job
	// would be canceled again at once. Retry the dependency first. It
	// wraps ErrInvalidTransition.
	ErrDependencyFailed = fmt.Errorf("%w: a dependency failed", ErrInvalidTransition)
	// ErrDependedOn is returned by Deleter.Delete of a finished job that a
	// waiting job names in its After: the job is kept until that one is no
	// longer waiting (Prune passes over such jobs). It wraps
	// ErrInvalidTransition.
	ErrDependedOn = fmt.Errorf("%w: a waiting job depends on it", ErrInvalidTransition)
)

// DependencyError is the error of an operation refused because of a
// dependency: a Retry while a dependency of the job is still failed or
// canceled (Err is ErrDependencyFailed, Other that dependency), or a
// Delete of a finished job that a waiting job names (Err is ErrDependedOn,
// Other the waiting job). It unwraps to Err; its message is in plain
// words: "job X: dependency Y failed; retry that job first".
type DependencyError struct {
	// ID is the job the operation was about.
	ID string
	// Other is the job that stopped it.
	Other string
	// Detail says how, in words ("dependency Y failed", "job W waits
	// for it").
	Detail string
	// Err is ErrDependencyFailed or ErrDependedOn.
	Err error
}

// Error says which jobs, and what to do.
func (e *DependencyError) Error() string {
	if errors.Is(e.Err, ErrDependencyFailed) {
		return fmt.Sprintf("job %s: %s; retry that job first", e.ID, e.Detail)
	}
	return fmt.Sprintf("job %s: %s", e.ID, e.Detail)
}

// Unwrap returns Err.
func (e *DependencyError) Unwrap() error { return e.Err }

// DependedOn returns the error of a Delete of job id, which the waiting
// job waiter names.
func DependedOn(id, waiter string) error {
	return &DependencyError{ID: id, Other: waiter, Detail: "job " + waiter + " waits for it", Err: ErrDependedOn}
}

// validateDeps checks the dependency and batch fields of a spec: valid
// IDs, keys and batch names, no negative spec index, at most MaxAfter
// names in all. Whether the named jobs exist is the store's to check.
func (s Spec) validateDeps() error {
	if n := len(s.After) + len(s.AfterKeys) + len(s.AfterSpecs); n > MaxAfter {
		return fmt.Errorf("%w: %d dependencies, limit %d", ErrInvalidInput, n, MaxAfter)
	}
	for _, id := range s.After {
		if err := ValidateID(id); err != nil {
			return fmt.Errorf("after: %w", err)
		}
	}
	for _, k := range s.AfterKeys {
		if err := ValidateKey(k); err != nil {
			return fmt.Errorf("after key: %w", err)
		}
		if k == "" {
			return fmt.Errorf("%w: after key is empty", ErrInvalidInput)
		}
	}
	for _, i := range s.AfterSpecs {
		if i < 0 {
			return fmt.Errorf("%w: after spec %d: an index is 0 or more", ErrInvalidInput, i)
		}
	}
	if s.Batch != "" {
		if err := ValidateBatchName(s.Batch); err != nil {
			return err
		}
	}
	if s.AfterBatch != "" {
		if err := ValidateBatchName(s.AfterBatch); err != nil {
			return err
		}
		if s.AfterBatch == s.Batch {
			return fmt.Errorf("%w: a job cannot be both in batch %q and its callback", ErrInvalidInput, s.Batch)
		}
	}
	return nil
}

// HasDeps reports whether the spec names dependencies of any kind.
func (s Spec) HasDeps() bool {
	return len(s.After) > 0 || len(s.AfterKeys) > 0 || len(s.AfterSpecs) > 0 || s.AfterBatch != ""
}

// ValidateBatchName checks a batch name: 1 to MaxBatchNameLen bytes of
// letters, digits and ._:/- , as a queue's.
func ValidateBatchName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: batch name is empty", ErrInvalidInput)
	}
	if len(name) > MaxBatchNameLen {
		return fmt.Errorf("%w: batch name is %d bytes, limit %d", ErrInvalidInput, len(name), MaxBatchNameLen)
	}
	if !nameOf(name) {
		return fmt.Errorf("%w: batch %q: only letters, digits and ._:/- are allowed", ErrInvalidInput, clip.String(name, 64))
	}
	return nil
}

// SetAfter gives j the dependencies ids, each once, in the order given,
// and makes it StateWaiting if there are any. Stores call it on the job
// NewJob made, with the IDs they resolved from the spec's After, AfterKeys
// and AfterSpecs (and a batch's jobs, for a callback).
func (j *Job) SetAfter(ids []string) {
	j.After = nil
	for _, id := range ids {
		if !slices.Contains(j.After, id) {
			j.After = append(j.After, id)
		}
	}
	if len(j.After) > 0 {
		j.State = StateWaiting
	}
}

// DependencyReader is implemented by the stores that keep dependencies
// and batches (memstore, filestore and pgstore): it answers what a job's
// page and `jobdir batch status` show.
type DependencyReader interface {
	// Dependents returns the jobs that name id in their After, oldest
	// first. A job without dependents has none (nil, no error); an invalid
	// ID gives ErrInvalidID.
	Dependents(ctx context.Context, id string) ([]Job, error)
	// Batch returns what is known of the named batch, or an error
	// wrapping ErrNotFound when no job was ever submitted to it (or all
	// were pruned).
	Batch(ctx context.Context, name string) (BatchInfo, error)
}

// BatchInfo is a batch and the states of its jobs.
type BatchInfo struct {
	// Name is the batch's name.
	Name string `json:"batch"`
	// Total counts the batch's jobs.
	Total int `json:"total"`
	// States counts its jobs by state; a state without jobs is absent.
	States map[State]int `json:"states"`
	// Closed says that a callback was submitted: no job may join.
	Closed bool `json:"closed"`
	// Callbacks lists the IDs of the batch's callbacks (Spec.AfterBatch),
	// oldest first.
	Callbacks []string `json:"callbacks,omitempty"`
}

// Ended reports whether every job of the batch ended.
func (b BatchInfo) Ended() bool {
	n := 0
	for st, c := range b.States {
		if st.Terminal() {
			n += c
		}
	}
	return n == b.Total
}

// DependencyCounts counts a waiting job's dependencies: how many have not
// ended (pending) of how many (total), from the states of the jobs After
// names (a job missing from states counts as ended). "waiting for 3 of 5
// jobs" is pending 3, total 5.
func DependencyCounts(j Job, states map[string]State) (pending, total int) {
	for _, id := range j.After {
		if st, ok := states[id]; ok && !st.Terminal() {
			pending++
		}
	}
	return pending, len(j.After)
}
