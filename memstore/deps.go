package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.DependencyReader = (*Store)(nil)

// batch is what the store knows of one batch.
type batch struct {
	// members are the IDs of its jobs, in submit order.
	members []string
	// callbacks are the IDs of its callbacks.
	callbacks []string
	// closed is set by the first callback, and stays while the batch has
	// jobs.
	closed bool
}

// planned is one spec's result in a submit that has not been made yet.
type planned struct {
	job     jobstore.Job
	created bool
}

// plan works out what submitting specs at now makes, without changing
// anything: the jobs (new, or found by key), their dependencies resolved
// and settled, or the first error. The caller holds s.mu and has
// validated specs; batch says whether they are one SubmitBatch (whose
// specs may name earlier ones).
func (s *Store) plan(specs []jobstore.Spec, now time.Time, batch bool) ([]planned, error) {
	out := make([]planned, len(specs))
	earlier := make([]string, 0, len(specs))
	byKey := make(map[string]string)    // keys of the new jobs
	joined := make(map[string][]string) // batch -> its new jobs
	closing := make(map[string]bool)    // batches a callback closes
	states := make(map[string]jobstore.State)
	lookup := func(id string) (jobstore.State, bool, error) {
		if st, ok := states[id]; ok {
			return st, true, nil
		}
		e, ok := s.jobs[id]
		if !ok {
			return "", false, nil
		}
		return e.job.State, true, nil
	}
	for i, spec := range specs {
		if spec.Key != "" {
			id, ok := byKey[spec.Key]
			if !ok {
				id, ok = s.keys[spec.Key]
			}
			if ok {
				j, ok := s.jobs[id]
				if ok {
					out[i] = planned{job: j.job.Clone()}
				} else {
					out[i] = out[slices.Index(earlier, id)]
					out[i].created = false
				}
				earlier = append(earlier, id)
				continue
			}
		}
		var prior []string
		if batch {
			prior = earlier
		}
		ids, err := storekit.ResolveAfter(spec, func(key string) (string, error) {
			if id, ok := byKey[key]; ok {
				return id, nil
			}
			return s.keys[key], nil
		}, prior)
		if err != nil {
			return nil, specErr(batch, i, err)
		}
		for _, id := range spec.After {
			if _, ok := s.jobs[id]; !ok {
				return nil, specErr(batch, i, storekit.DependencyMissing(id))
			}
		}
		if b := spec.Batch; b != "" && (closing[b] || s.closedBatch(b)) {
			return nil, specErr(batch, i, storekit.BatchClosed(b))
		}
		if b := spec.AfterBatch; b != "" {
			var members []string
			if s.batches[b] != nil {
				members = s.batches[b].members
			}
			members = append(slices.Clone(members), joined[b]...)
			if len(members) == 0 {
				return nil, specErr(batch, i, storekit.BatchEmpty(b))
			}
			if len(members) > jobstore.MaxAfter {
				return nil, specErr(batch, i, storekit.BatchTooLarge(b, len(members)))
			}
			ids = append(ids, members...)
			closing[b] = true
		}
		j := jobstore.NewJob(spec, now)
		j.SetAfter(ids)
		j, _, _ = storekit.Settle(j, "", lookup, now)
		states[j.ID] = j.State
		if spec.Key != "" {
			byKey[spec.Key] = j.ID
		}
		if spec.Batch != "" {
			joined[spec.Batch] = append(joined[spec.Batch], j.ID)
		}
		out[i] = planned{job: j, created: true}
		earlier = append(earlier, j.ID)
	}
	return out, nil
}

// specErr names the spec of a batch that err is about.
func specErr(batch bool, i int, err error) error {
	if batch {
		return fmt.Errorf("spec %d: %w", i, err)
	}
	return err
}

// closedBatch reports whether a callback closed batch b. The caller holds
// s.mu.
func (s *Store) closedBatch(b string) bool {
	return s.batches[b] != nil && s.batches[b].closed
}

// link adds the new job j to the indexes of dependencies and batches. The
// caller holds s.mu.
func (s *Store) link(j jobstore.Job) {
	for _, id := range j.After {
		s.dependents[id] = append(s.dependents[id], j.ID)
	}
	for _, b := range []string{j.Batch, j.AfterBatch} {
		if b != "" && s.batches[b] == nil {
			s.batches[b] = &batch{}
		}
	}
	if j.Batch != "" {
		s.batches[j.Batch].members = append(s.batches[j.Batch].members, j.ID)
	}
	if j.AfterBatch != "" {
		s.batches[j.AfterBatch].callbacks = append(s.batches[j.AfterBatch].callbacks, j.ID)
		s.batches[j.AfterBatch].closed = true
	}
}

// unlink drops the pruned job j from the indexes. The caller holds s.mu.
func (s *Store) unlink(j jobstore.Job) {
	delete(s.dependents, j.ID)
	for _, b := range []string{j.Batch, j.AfterBatch} {
		if bt := s.batches[b]; bt != nil {
			bt.members = slices.DeleteFunc(bt.members, func(id string) bool { return id == j.ID })
			bt.callbacks = slices.DeleteFunc(bt.callbacks, func(id string) bool { return id == j.ID })
			if len(bt.members) == 0 && len(bt.callbacks) == 0 {
				delete(s.batches, b)
			}
		}
	}
}

// waitingOn returns the ID of a waiting job that names id, or "". The
// caller holds s.mu.
func (s *Store) waitingOn(id string) string {
	for _, d := range s.dependents[id] {
		if e, ok := s.jobs[d]; ok && e.job.State == jobstore.StateWaiting {
			return d
		}
	}
	return ""
}

// settleDependents settles the waiting jobs that name id, which has just
// ended. The caller holds s.mu; set calls it, so a dependent canceled here
// settles its own dependents in turn.
func (s *Store) settleDependents(id string, now time.Time) {
	for _, d := range s.dependents[id] {
		e, ok := s.jobs[d]
		if !ok || e.job.State != jobstore.StateWaiting {
			continue
		}
		j, changed, _ := storekit.Settle(e.job, id, s.lookup, now)
		if changed {
			s.set(e, j)
		}
	}
}

// lookup is a storekit.DepLookup of the store's jobs. The caller holds
// s.mu.
func (s *Store) lookup(id string) (jobstore.State, bool, error) {
	e, ok := s.jobs[id]
	if !ok {
		return "", false, nil
	}
	return e.job.State, true, nil
}

// Dependents returns the jobs that name id in their After, oldest first.
// It implements jobstore.DependencyReader.
func (s *Store) Dependents(ctx context.Context, id string) ([]jobstore.Job, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return nil, fmt.Errorf("memstore: dependents: %w", err)
	}
	if err := s.lock(ctx, "dependents"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []jobstore.Job
	for _, d := range s.dependents[id] {
		if e, ok := s.jobs[d]; ok {
			out = append(out, e.job.Clone())
		}
	}
	slices.SortFunc(out, func(a, b jobstore.Job) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Batch returns the named batch and the states of its jobs. It implements
// jobstore.DependencyReader.
func (s *Store) Batch(ctx context.Context, name string) (jobstore.BatchInfo, error) {
	if err := jobstore.ValidateBatchName(name); err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("memstore: batch: %w", err)
	}
	if err := s.lock(ctx, "batch"); err != nil {
		return jobstore.BatchInfo{}, err
	}
	defer s.mu.Unlock()
	b := s.batches[name]
	if b == nil {
		return jobstore.BatchInfo{}, fmt.Errorf("memstore: %w", storekit.NoBatch(name))
	}
	info := jobstore.BatchInfo{Name: name, States: map[jobstore.State]int{}, Closed: b.closed, Callbacks: slices.Clone(b.callbacks)}
	for _, id := range b.members {
		if e, ok := s.jobs[id]; ok {
			info.Total++
			info.States[e.job.State]++
		}
	}
	return info, nil
}
