package storekit

import (
	"fmt"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// DepLookup tells Settle the state of one dependency: found is false for a
// job that does not exist (any more).
type DepLookup func(id string) (state jobstore.State, found bool, err error)

// Settle returns what the waiting job j becomes, given its dependencies'
// states, and whether that is a change:
//
//   - without AfterAny, canceled as soon as a dependency failed, was
//     canceled or no longer exists, with a LastError naming it;
//   - queued, due no sooner than now, once every dependency ended (each
//     succeeded, or in any way with AfterAny);
//   - waiting, unchanged, while one has not ended.
//
// A job in any other state is returned unchanged. first, if not empty,
// names the dependency that just ended: it is looked at first, then the
// others from the one after it on, wrapping round, only until one is found
// that has not ended, so that each end of a large fan-in costs little.
// With first empty (a submit, a retry, a
// repair) every dependency is looked at.
func Settle(j jobstore.Job, first string, lookup DepLookup, now time.Time) (jobstore.Job, bool, error) {
	j, changed, _, err := settle(j, first, lookup, now)
	return j, changed, err
}

// settle is Settle that also returns the dependency that canceled j, if
// one did.
func settle(j jobstore.Job, first string, lookup DepLookup, now time.Time) (jobstore.Job, bool, string, error) {
	if j.State != jobstore.StateWaiting {
		return j, false, "", nil
	}
	order := j.After
	if i := slices.Index(j.After, first); first != "" && i >= 0 {
		// The one that ended, then those after it, wrapping round: jobs
		// named in one go tend to end in that order, so the next one not
		// ended is usually near, and a fan-in of n jobs costs about 2n
		// look-ups in all rather than n²/2.
		order = make([]string, 0, len(j.After))
		order = append(order, j.After[i:]...)
		order = append(order, j.After[:i]...)
	}
	pending := false
	for _, id := range order {
		st, found, err := lookup(id)
		if err != nil {
			return j, false, "", fmt.Errorf("dependency %s: %w", id, err)
		}
		switch {
		case !found && !j.AfterAny:
			return dependencyCanceled(j, id, "no longer exists", now), true, id, nil
		case !found:
		case !st.Terminal():
			pending = true
			if first != "" {
				return j, false, "", nil
			}
		case st != jobstore.StateSucceeded && !j.AfterAny:
			return dependencyCanceled(j, id, endedAs(st), now), true, id, nil
		}
	}
	if pending {
		return j, false, "", nil
	}
	now = now.UTC()
	j.State = jobstore.StateQueued
	if j.RunAt.Before(now) {
		j.RunAt = now
	}
	j.UpdatedAt = now
	return j, true, "", nil
}

func endedAs(st jobstore.State) string {
	if st == jobstore.StateCanceled {
		return "was canceled"
	}
	return string(st)
}

// dependencyCanceled returns j canceled at now because its dependency id
// ended as how says ("failed", "was canceled", "no longer exists"): its
// LastError reads "dependency <id> failed".
func dependencyCanceled(j jobstore.Job, id, how string, now time.Time) jobstore.Job {
	now = now.UTC()
	j.State = jobstore.StateCanceled
	j.LastError = "dependency " + id + " " + how
	j.FinishedAt = now
	j.UpdatedAt = now
	return j
}

// SettleRetry settles j, which ApplyRetry made waiting again, and refuses
// the retry with a *jobstore.DependencyError wrapping ErrDependencyFailed
// if that would cancel it again at once (a dependency is still failed or
// canceled).
func SettleRetry(j jobstore.Job, lookup DepLookup, now time.Time) (jobstore.Job, error) {
	r, _, by, err := settle(j, "", lookup, now)
	if err != nil {
		return j, err
	}
	if r.State == jobstore.StateCanceled {
		return j, &jobstore.DependencyError{ID: j.ID, Other: by, Detail: r.LastError, Err: jobstore.ErrDependencyFailed}
	}
	return r, nil
}

// ResolveAfter returns the IDs of the dependencies spec names: After as
// it is, then AfterKeys through byKey, then AfterSpecs through earlier,
// the IDs of the earlier specs of the same SubmitBatch (nil for Submit,
// which refuses AfterSpecs). byKey returns "" for a key no job has. Every
// error wraps ErrInvalidInput and names the missing job; whether an ID of
// After exists is the caller's to check (DependencyMissing).
func ResolveAfter(spec jobstore.Spec, byKey func(key string) (string, error), earlier []string) ([]string, error) {
	ids := slices.Clone(spec.After)
	for _, k := range spec.AfterKeys {
		id, err := byKey(k)
		if err != nil {
			return nil, err
		}
		if id == "" {
			return nil, fmt.Errorf("%w: after key %q: no job has this key", jobstore.ErrInvalidInput, k)
		}
		ids = append(ids, id)
	}
	for _, i := range spec.AfterSpecs {
		if earlier == nil {
			return nil, fmt.Errorf("%w: after spec %d: only a spec of a batch can name another by index", jobstore.ErrInvalidInput, i)
		}
		if i >= len(earlier) {
			return nil, fmt.Errorf("%w: after spec %d: a spec can only name an earlier spec of its batch", jobstore.ErrInvalidInput, i)
		}
		ids = append(ids, earlier[i])
	}
	return ids, nil
}

// DependencyMissing is the error of a submit that names a job that does
// not exist. It wraps ErrInvalidInput: dependencies must exist when they
// are named, which is what keeps a cycle from being built.
func DependencyMissing(id string) error {
	return fmt.Errorf("%w: after %s: no such job (a dependency must exist when it is named)", jobstore.ErrInvalidInput, id)
}

// BatchEmpty is the error of a callback submitted for a batch without
// jobs. It wraps ErrInvalidInput.
func BatchEmpty(name string) error {
	return fmt.Errorf("%w: after batch %q: the batch has no jobs", jobstore.ErrInvalidInput, name)
}

// BatchClosed is the error of a submit to a batch whose callback was
// submitted. It wraps ErrBatchClosed.
func BatchClosed(name string) error {
	return fmt.Errorf("%w: batch %q has its callback already; no job may join it", jobstore.ErrBatchClosed, name)
}

// BatchTooLarge is the error of a callback for a batch of more than
// MaxAfter jobs. It wraps ErrInvalidInput.
func BatchTooLarge(name string, n int) error {
	return fmt.Errorf("%w: after batch %q: the batch has %d jobs, more than a callback can wait for (%d)", jobstore.ErrInvalidInput, name, n, jobstore.MaxAfter)
}

// NoBatch is the error of Batch for a batch no job was submitted to. It
// wraps ErrNotFound.
func NoBatch(name string) error {
	return fmt.Errorf("%w: no batch is named %q", jobstore.ErrNotFound, name)
}
