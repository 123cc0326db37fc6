package filestore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// TestCandIndexMatchesBruteForce checks the heaps against a plain scan of
// the candidates after random sets, deletes and claims, with kind filters,
// claims that pass over full partitions, claims of several picks that set
// tried candidates aside (and give them
// back when they end) while the set changes, and time passing.
func TestCandIndexMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	x := newCandIndex()
	ref := map[string]cand{}
	base := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	kinds := []string{"a", "b", "c"}
	queues := []string{"default", "q1", "q2"}
	partitions := []string{"", "p1", "p2"}
	var ids []string
	for range 300 {
		ids = append(ids, jobstore.NewID(base))
	}
	brute := func(req jobstore.ClaimRequest, blocked map[string]bool, parts map[part]bool, now time.Time, tried map[string]bool) (string, time.Time) {
		var best jobstore.Job
		var next time.Time
		for id, c := range ref {
			if !req.Accepts(c.queue, c.kind) || blocked[c.queue] {
				continue
			}
			if c.runAt.After(now) {
				if next.IsZero() || c.runAt.Before(next) {
					next = c.runAt
				}
				continue
			}
			if tried[id] || (c.partition != "" && parts[part{c.queue, c.partition}]) {
				continue
			}
			j := jobstore.Job{ID: id, Priority: c.priority, RunAt: c.runAt}
			if best.ID == "" || storekit.ClaimOrder(j, best) {
				best = j
			}
		}
		return best.ID, next
	}
	now := base
	// The claim under way: what it accepts, the candidates it tried, and
	// those its picks set aside.
	var (
		req     jobstore.ClaimRequest
		blocked map[string]bool
		parts   map[part]bool
		tried   map[string]bool
		aside   []candItem
	)
	for step := range 8000 {
		id := ids[rng.IntN(len(ids))]
		switch op := rng.IntN(10); {
		case op < 5:
			c := cand{queue: queues[rng.IntN(len(queues))], partition: partitions[rng.IntN(len(partitions))], kind: kinds[rng.IntN(len(kinds))], priority: rng.IntN(3), runAt: base.Add(time.Duration(rng.IntN(600)) * time.Second)}
			if k, ok := ref[id]; ok {
				c.kind, c.queue, c.partition = k.kind, k.queue, k.partition // they never change
			}
			x.set(id, c)
			ref[id] = c
		case op < 7:
			x.del(id)
			delete(ref, id)
		case op < 8:
			now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
		default:
			if tried == nil || rng.IntN(4) == 0 {
				// The claim ends; another begins.
				x.restore(aside)
				aside = nil
				req = jobstore.ClaimRequest{Worker: "w"}
				if rng.IntN(2) == 0 {
					req.Kinds = kinds[:1+rng.IntN(2)]
				}
				if rng.IntN(2) == 0 {
					req.Queues = queues[rng.IntN(2):]
				}
				blocked = map[string]bool{}
				if rng.IntN(3) == 0 {
					blocked[queues[rng.IntN(len(queues))]] = true
				}
				parts = map[part]bool{}
				if rng.IntN(2) == 0 {
					parts[part{queues[rng.IntN(len(queues))], partitions[1+rng.IntN(2)]}] = true
				}
				tried = map[string]bool{}
				for range rng.IntN(3) {
					tried[ids[rng.IntN(len(ids))]] = true
				}
			}
			got, gotNext := x.pick(req, blocked, func(p part) bool { return parts[p] }, now, tried, &aside)
			gotID := got.id
			wantID, wantNext := brute(req, blocked, parts, now, tried)
			require.Equal(t, wantID, gotID, "step %d", step)
			require.True(t, wantNext.Equal(gotNext), "step %d: next %v, want %v", step, gotNext, wantNext)
			if gotID != "" {
				tried[gotID] = true
				if rng.IntN(2) == 0 { // claimed
					x.del(gotID)
					delete(ref, gotID)
				}
			}
		}
		require.Equal(t, len(ref), x.len())
	}
	require.LessOrEqual(t, x.items, 2*x.len()+1024+1, "lazy deletions are compacted")
	// Once the last claim gives back what it set aside, a claim that tried
	// nothing finds every candidate again, as the plain scan does.
	x.restore(aside)
	for len(ref) > 0 {
		req := jobstore.ClaimRequest{Worker: "w"}
		got, _ := x.pick(req, nil, nil, base.Add(time.Hour), map[string]bool{}, new([]candItem))
		gotID := got.id
		wantID, _ := brute(req, nil, nil, base.Add(time.Hour), nil)
		require.Equal(t, wantID, gotID)
		x.del(gotID)
		delete(ref, gotID)
	}
}

// TestClaimElsewhereDropsCandidate: when another Store claims a job, the
// event of its rename out of queued/ takes it out of this Store's
// candidates at once, without a read of its record (which would search
// queued/ on the disk for a name just renamed away), and a job that comes
// back to queued/ is a candidate again.
func TestClaimElsewhereDropsCandidate(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	opts := &Options{NoSync: true, PollInterval: time.Hour, RecoverInterval: time.Hour}
	a := openAt(t, dir, opts)
	b := openAt(t, dir, opts)
	x, _, err := a.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	y, _, err := a.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	got, err := a.Claim(ctx, jobstore.ClaimRequest{Worker: "a"})
	require.NoError(t, err)
	require.Equal(t, x.ID, got.ID)
	isCand := func(id string) bool { return seenQueued(a, id) }
	require.True(t, isCand(y.ID))

	other, err := b.Claim(ctx, jobstore.ClaimRequest{Worker: "b"})
	require.NoError(t, err)
	require.Equal(t, y.ID, other.ID)
	require.Eventually(t, func() bool { return !isCand(y.ID) }, 5*time.Second, time.Millisecond,
		"the other Store's claim left the job a candidate")

	require.NoError(t, b.Release(ctx, other.Lease()))
	require.Eventually(t, func() bool { return isCand(y.ID) }, 5*time.Second, time.Millisecond,
		"the job back in queued/ is no candidate")
	again, err := a.Claim(ctx, jobstore.ClaimRequest{Worker: "a"})
	require.NoError(t, err)
	require.Equal(t, y.ID, again.ID)
}

// TestClaimWithJobsDoesNotRescan: a claim that found a job returns it
// without listing queued/, even with slots left (an idle runner's claim of
// the one job just submitted, whose start the listing would delay); a
// claim that finds none still lists queued/ once, for jobs whose events
// were lost.
func TestClaimWithJobsDoesNotRescan(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, t.TempDir(), &Options{NoSync: true, PollInterval: time.Hour, RecoverInterval: time.Hour})
	req := jobstore.ClaimRequest{Worker: "w"}
	_, err := s.ClaimBatch(ctx, req, 5)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return seenQueued(s, j.ID) }, 5*time.Second, time.Millisecond, "no event for the submitted job")
	before := s.rescans.Load()
	got, err := s.ClaimBatch(ctx, req, 5)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, j.ID, got[0].ID)
	require.Equal(t, before, s.rescans.Load(), "a claim that found a job listed queued/")
	_, err = s.ClaimBatch(ctx, req, 5)
	require.ErrorIs(t, err, jobstore.ErrNoJob)
	require.Equal(t, before+1, s.rescans.Load(), "a claim that found nothing did not list queued/")
}

// seenQueued reports whether s's watcher has seen job id in queued/: it is
// a candidate, or marked for the next refresh.
func seenQueued(s *Store, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, pending := s.pending[id]
	return pending || s.cands.has(id)
}
