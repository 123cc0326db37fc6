package filestore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestFsckChecksTheGraph: a waiting job whose dependency ended without
// settling it (as a crash between the end and the settle leaves it) is
// reported as unsettled and settled by Repair; one that names a job whose
// record is gone is reported as dangling and, without after_any, canceled.
// Repair (Open's, in the background) reads only the queued records that
// the dependency indexes name, so a waiting job whose index entries were
// removed by hand is left to a full Fsck, which reads every record.
func TestFsckChecksTheGraph(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true, RecoverInterval: time.Hour})
	w := unsettledWaiter(t, s)
	b, _, err := s.Submit(ctx, jobstore.Spec{Kind: "b"})
	require.NoError(t, err)
	w2, _, err := s.Submit(ctx, jobstore.Spec{Kind: "w2", After: []string{b.ID}})
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(s.Dir(), dirQueued, b.ID+recordExt)))
	w3 := unsettledWaiter(t, s)
	require.NoError(t, os.RemoveAll(filepath.Join(s.Dir(), dirDependents, w3.After[0])))

	r, err := s.Fsck(ctx, false)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{w.ID, w2.ID, w3.ID}, problemIDs(problemsOf(r, ProblemUnsettled)), "%v", r.Problems)
	dang := problemsOf(r, ProblemDanglingDependency)
	require.Len(t, dang, 1, "%v", r.Problems)
	require.Equal(t, w2.ID, dang[0].ID)
	require.Contains(t, dang[0].Detail, b.ID)
	got, err := s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State, "Fsck without repair changed a job")

	r, err = s.Repair(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{w.ID, w2.ID}, problemIDs(problemsOf(r, ProblemUnsettled)), "%v", r.Problems)
	got, err = s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	got, err = s.Get(ctx, w2.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	require.Equal(t, "dependency "+b.ID+" no longer exists", got.LastError)
	got, err = s.Get(ctx, w3.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State, "Repair read a queued record that no index names")

	r, err = s.Fsck(ctx, true)
	require.NoError(t, err)
	require.Equal(t, []string{w3.ID}, problemIDs(problemsOf(r, ProblemUnsettled)), "%v", r.Problems)
	got, err = s.Get(ctx, w3.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	r, err = s.Fsck(ctx, false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
}

// problemIDs returns the job IDs of ps.
func problemIDs(ps []Problem) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// TestSettlePassFindsWhatAnEndMissed: a Store that claims settles, every
// settleInterval, the waiting jobs it has seen, so one that a dead
// process left unsettled does not wait for the next Open.
func TestSettlePassFindsWhatAnEndMissed(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true})
	w := unsettledWaiter(t, s)
	got, err := s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State)
	s.settleWaiting(ctx) // what the maintenance loop runs every settleInterval
	got, err = s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

// TestPrunedBatchIsGone: once every job of a batch and its callback are
// pruned, the batch is unknown again and its name may be used anew.
func TestPrunedBatchIsGone(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true})
	m, _, err := s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err)
	cb, _, err := s.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	require.NoError(t, err)
	for _, id := range []string{m.ID, cb.ID} {
		c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, id, c.ID)
		_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	time.Sleep(5 * time.Millisecond)
	n, err := s.Prune(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = s.Batch(ctx, "b")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = os.Lstat(s.batchDir("b"))
	require.ErrorIs(t, err, os.ErrNotExist, "the batch's directory stays")
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err, "the name of a pruned batch cannot be used again")
}

// TestSubmitRacesEndAcrossStores: one Store submits a job that waits for
// X while another completes X, over and over. Whichever comes first, the
// new job ends up queued once both calls returned: the submit sees the
// end, or the end finds the new job. Two things close the window, each
// alone enough for a job the submit names: the submit's shared lock of X,
// and its settle after publishing; with both taken out this fails.
func TestSubmitRacesEndAcrossStores(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	a := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	b := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	for round := range 100 {
		x, _, err := b.Submit(ctx, jobstore.Spec{Kind: "x"})
		require.NoError(t, err)
		c, err := b.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"x"}})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := b.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
			done <- err
		}()
		d, _, err := a.Submit(ctx, jobstore.Spec{Kind: "d", After: []string{x.ID}})
		require.NoError(t, err)
		require.NoError(t, <-done)
		got, err := a.Get(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State, "round %d: the dependent still waits", round)
	}
}

// TestPruneRacesSubmitAcrossStores: one Store prunes X while another
// submits a job that waits for X. Either the submit fails (X was gone)
// or X is kept and the new job is queued: never a new job canceled
// because its dependency vanished under it.
func TestPruneRacesSubmitAcrossStores(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	a := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	b := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	refused, kept := 0, 0
	for round := range 100 {
		x, _, err := a.Submit(ctx, jobstore.Spec{Kind: "x"})
		require.NoError(t, err)
		c, err := a.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"x"}})
		require.NoError(t, err)
		_, err = a.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
		pruned := make(chan error, 1)
		go func() {
			_, err := b.Prune(ctx, 0)
			pruned <- err
		}()
		d, _, err := a.Submit(ctx, jobstore.Spec{Kind: "d", After: []string{x.ID}})
		require.NoError(t, <-pruned)
		if err != nil {
			require.ErrorIs(t, err, jobstore.ErrInvalidInput, "round %d", round)
			refused++
			continue
		}
		kept++
		got, err := a.Get(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State, "round %d: %s", round, got.LastError)
		// Claim it so that the next round's Prune may take everything.
		c, err = a.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"d"}})
		require.NoError(t, err)
		_, err = a.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	t.Logf("of 100 races, %d submits found the job pruned, %d kept it", refused, kept)
}

// TestCallbackRacesMemberEnd: the last job of a batch ends in another
// Store at the worst moment of its callback's submit, after the
// callback's entry is in callbacks/ and before its record is published,
// so the end finds the entry and no record. The submit settles the
// callback again once it is published: it is queued, not left waiting.
func TestCallbackRacesMemberEnd(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	var (
		mu     sync.Mutex
		armed  bool
		temps  int
		during func()
	)
	faults := func(op, path string) error {
		mu.Lock()
		fire := armed && op == "write-temp"
		if fire {
			temps++
			fire = temps == 2 // the first is the entries' empty file
		}
		f := during
		mu.Unlock()
		if fire {
			f()
		}
		return nil
	}
	a := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour, Faults: faults})
	b := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	m, _, err := b.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err)
	c, err := b.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, m.ID, c.ID)
	ended := false
	mu.Lock()
	armed, during = true, func() {
		_, err := b.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
		ended = true
	}
	mu.Unlock()
	cb, _, err := a.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	require.NoError(t, err)
	require.True(t, ended, "the member's end did not come during the submit")
	require.Equal(t, jobstore.StateQueued, cb.State)
	got, err := b.Get(ctx, cb.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State, "the callback waits for a batch that ended")
}

// TestDependenciesPinNoDirectories: the directories of dependents/ and
// batches/, one per job that others name and per batch, are never held
// open by the Store, so its descriptors do not grow with them, and one
// removed and made again is not taken for a replaced store directory.
func TestDependenciesPinNoDirectories(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true})
	require.NotNil(t, s.pins)
	count := func() int {
		s.pins.mu.RLock()
		defer s.pins.mu.RUnlock()
		return len(s.pins.m)
	}
	x, _, err := s.Submit(ctx, jobstore.Spec{Kind: "x", Batch: "warm"})
	require.NoError(t, err)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "d", After: []string{x.ID}})
	require.NoError(t, err)
	before := count()
	for i := range 50 {
		x, _, err := s.Submit(ctx, jobstore.Spec{Kind: "x", Batch: fmt.Sprintf("b%d", i)})
		require.NoError(t, err)
		_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "d", After: []string{x.ID}})
		require.NoError(t, err)
	}
	require.Equal(t, before, count(), "pinned directories grew with the jobs that others name")
}

// TestGraphKeyTakenMeanwhile: another process takes the key of a spec of
// a graph between the graph's look-up of the key and its link of the key
// file. The graph is taken back before any of its records is published
// and submitted again: the spec's answer is the other process's job, the
// job that names it by key waits for that one, and no job of the first
// try is left.
func TestGraphKeyTakenMeanwhile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	var (
		mu    sync.Mutex
		done  bool
		other jobstore.Job
	)
	faults := func(op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		if !done && op == "link" && filepath.Base(filepath.Dir(path)) == dirKeys {
			done = true
			var err error
			other, _, err = b.Submit(ctx, jobstore.Spec{Kind: "other", Key: "build"})
			require.NoError(t, err)
		}
		return nil
	}
	a := openAt(t, dir, &Options{NoSync: true, RecoverInterval: time.Hour, Faults: faults})
	out, err := a.SubmitBatch(ctx, []jobstore.Spec{
		{Kind: "build", Key: "build"},
		{Kind: "test", AfterKeys: []string{"build"}},
	})
	require.NoError(t, err)
	require.True(t, done, "the key was not taken during the submit")
	require.False(t, out[0].Created)
	require.Equal(t, other.ID, out[0].Job.ID)
	require.True(t, out[1].Created)
	require.Equal(t, []string{other.ID}, out[1].Job.After)
	page, err := a.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2, "a job of the first try was left: %v", page.Jobs)
	r, err := a.Fsck(ctx, false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
}

// TestSettlePassSkipsALockedJob: the settle pass never waits for a record
// lock (a process stopped while it holds one would stall the maintenance
// loop it runs in): it leaves such a job waiting for the next pass.
func TestSettlePassSkipsALockedJob(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, &Options{NoSync: true})
	w := unsettledWaiter(t, s)

	unlock, err := s.lockJob(ctx, w.ID) // as a stopped process would hold it
	require.NoError(t, err)
	passed := make(chan struct{})
	go func() {
		s.settleWaiting(ctx)
		close(passed)
	}()
	select {
	case <-passed:
	case <-time.After(5 * time.Second):
		t.Fatal("the settle pass waits for a lock")
	}
	unlock()
	got, err := s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State)
	s.settleWaiting(ctx)
	got, err = s.Get(ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

// unsettledWaiter submits a job and one that waits for it, then ends the
// first as an end whose settle a dead process never made: with its
// dependents/ index removed for the Complete and then put back. The second
// is left waiting though its dependency succeeded. It returns the waiting
// job.
func unsettledWaiter(t *testing.T, s *Store) jobstore.Job {
	t.Helper()
	ctx := t.Context()
	a, _, err := s.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	w, _, err := s.Submit(ctx, jobstore.Spec{Kind: "w", After: []string{a.ID}})
	require.NoError(t, err)
	index := filepath.Join(s.Dir(), dirDependents, a.ID)
	aside := filepath.Join(s.Dir(), "dependents-aside")
	require.NoError(t, os.Rename(index, aside))
	c, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "x", Kinds: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, a.ID, c.ID)
	_, err = s.Complete(ctx, c.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	require.NoError(t, os.Rename(aside, index))
	return w
}

// renameOrderFS records the order in which records are renamed into
// queued/, and holds the first such rename back for a moment, so that
// renames made side by side would finish out of order.
type renameOrderFS struct {
	fileOps
	mu      sync.Mutex
	delayed bool
	order   []string
}

func (f *renameOrderFS) Rename(o, n string) error {
	if filepath.Base(filepath.Dir(n)) != dirQueued {
		return f.fileOps.Rename(o, n)
	}
	f.mu.Lock()
	first := !f.delayed
	f.delayed = true
	f.mu.Unlock()
	if first {
		time.Sleep(50 * time.Millisecond)
	}
	err := f.fileOps.Rename(o, n)
	f.mu.Lock()
	f.order = append(f.order, strings.TrimSuffix(filepath.Base(n), recordExt))
	f.mu.Unlock()
	return err
}

// TestGraphPublishedInOrder: the jobs of a graph are published one after
// the other, each after the jobs it names, so that a crash halfway leaves
// a prefix of the graph and never a job without a job it names (the
// random form of this is TestFaults/SubmitAfter/Crash). A batch without
// dependencies may publish in any order.
func TestGraphPublishedInOrder(t *testing.T) {
	fsys := &renameOrderFS{fileOps: osFS{}}
	s := openAtFS(t, t.TempDir(), &Options{NoSync: true}, fsys)
	specs := make([]jobstore.Spec, 8)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "chain"}
		if i > 0 {
			specs[i].AfterSpecs = []int{i - 1}
		}
	}
	out, err := s.SubmitBatch(t.Context(), specs)
	require.NoError(t, err)
	want := make([]string, len(out))
	for i, o := range out {
		want[i] = o.Job.ID
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	require.Equal(t, want, fsys.order, "the jobs of a graph were published out of order")
}
