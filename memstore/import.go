package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.Importer = (*Store)(nil)

// Import adds jobs made by another store, keeping their IDs and every
// field, as jobstore.Importer says; a job whose ID is here already is left
// alone.
func (s *Store) Import(ctx context.Context, jobs []jobstore.Job) (int, error) {
	if err := storekit.ValidateImports(jobs, s.maxPayload); err != nil {
		return 0, fmt.Errorf("memstore: import: %w", err)
	}
	if err := s.lock(ctx, "import"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	var waiting []*entry
	defer func() {
		// Imported jobs that wait may find their dependencies ended.
		now := time.Now()
		for _, e := range waiting {
			if j, changed, _ := storekit.Settle(e.job, "", s.lookup, now); changed {
				s.set(e, j)
			}
		}
	}()
	for _, j := range jobs {
		if _, ok := s.jobs[j.ID]; ok {
			continue
		}
		if owner, ok := s.keys[j.Key]; ok && j.Key != "" {
			return n, fmt.Errorf("memstore: import: job %s: %w: key %q belongs to job %s", j.ID, jobstore.ErrKeyTaken, j.Key, owner)
		}
		j = j.Clone()
		j.Queue = jobstore.QueueOf(j.Queue)
		e := &entry{job: j, changed: make(chan struct{})}
		s.jobs[j.ID] = e
		s.link(j)
		if j.State == jobstore.StateWaiting {
			waiting = append(waiting, e)
		}
		i, _ := slices.BinarySearch(s.ids, j.ID)
		s.ids = slices.Insert(s.ids, i, j.ID)
		if j.Key != "" {
			s.keys[j.Key] = j.ID
		}
		if j.State == jobstore.StateQueued {
			s.signalWork()
		}
		n++
	}
	return n, nil
}
