package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestOpenUpgradesToDeps: Open of a version-11 schema adds the columns of
// dependencies and batches and lets a job be waiting; a job inserted by
// the release before reads without any, can be named as a dependency, and
// its end (by this release) promotes its dependent. A waiting job keeps
// its dependencies when a process of the release before rewrites its doc.
func TestOpenUpgradesToDeps(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	require.NoError(t, pgstore.MigrateTo(ctx, pool, schema, 11))
	const oldID = "01000000000000000000000001"
	_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs (id, kind, state, priority, run_at, attempt, updated_at, doc)
		VALUES ($1, 'old', 'queued', 0, now() - interval '1 hour', 0, now(),
			convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8'))`, oldID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET state = 'waiting' WHERE id = $1`, oldID)
	require.Error(t, err, "version 11 knows no waiting state")

	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	old, err := s.Get(ctx, oldID)
	require.NoError(t, err)
	require.Nil(t, old.After)
	require.Empty(t, old.Batch)

	c, _, err := s.Submit(ctx, jobstore.Spec{Kind: "c", After: []string{oldID}, Batch: "b"})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, c.State)
	// A process of the release before rewrites the doc of the waiting job.
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET version = version + 1,
		doc = convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8') WHERE id = $1`, c.ID)
	require.NoError(t, err)
	got, err := s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, []string{oldID}, got.After)
	require.Equal(t, "b", got.Batch)

	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, oldID, j.ID, "a waiting job was claimed")
	_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	got, err = s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

// TestSweepSettlesStrandedWaiting: waiting jobs whose dependencies ended
// without settling them (an end written by hand, as a process of the
// release before or a crash between two writes would leave it) are
// settled by the next store that opens: queued if their dependencies
// succeeded, canceled naming the one that failed, or that is gone.
func TestSweepSettlesStrandedWaiting(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	a, _, err := s.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)
	b, _, err := s.Submit(ctx, jobstore.Spec{Kind: "b"})
	require.NoError(t, err)
	gone, _, err := s.Submit(ctx, jobstore.Spec{Kind: "gone"})
	require.NoError(t, err)
	ok, _, err := s.Submit(ctx, jobstore.Spec{Kind: "ok", After: []string{a.ID}})
	require.NoError(t, err)
	bad, _, err := s.Submit(ctx, jobstore.Spec{Kind: "bad", After: []string{a.ID, b.ID}})
	require.NoError(t, err)
	orphan, _, err := s.Submit(ctx, jobstore.Spec{Kind: "orphan", After: []string{gone.ID}})
	require.NoError(t, err)
	still, _, err := s.Submit(ctx, jobstore.Spec{Kind: "still", After: []string{ok.ID}})
	require.NoError(t, err)

	pool := pgtest.Pool(t, 2)
	end := func(id, state string) {
		_, err := pool.Exec(ctx, `UPDATE `+schema+`.jobs SET state = $2, finished_at = now(), version = version + 1
			WHERE id = $1`, id, state)
		require.NoError(t, err)
	}
	end(a.ID, "succeeded")
	end(b.ID, "failed")
	_, err = pool.Exec(ctx, `DELETE FROM `+schema+`.jobs WHERE id = $1`, gone.ID)
	require.NoError(t, err)
	for _, id := range []string{ok.ID, bad.ID, orphan.ID} {
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateWaiting, got.State, "settled without the sweep")
	}

	openStore(t, schema, nil) // its first maintenance pass sweeps
	start := time.Now()
	waitState(t, s, ok.ID, jobstore.StateQueued, start, 10*time.Second)
	waitState(t, s, bad.ID, jobstore.StateCanceled, start, 10*time.Second)
	waitState(t, s, orphan.ID, jobstore.StateCanceled, start, 10*time.Second)
	got, err := s.Get(ctx, bad.ID)
	require.NoError(t, err)
	require.Equal(t, "dependency "+b.ID+" failed", got.LastError)
	got, err = s.Get(ctx, orphan.ID)
	require.NoError(t, err)
	require.Equal(t, "dependency "+gone.ID+" no longer exists", got.LastError)
	got, err = s.Get(ctx, still.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State, "a job whose dependency has not ended was settled")
}

// TestDepsConcurrentEndsAcrossStores: the last dependencies of a job ended
// at the same instant by as many stores (each with a pool of its own, as
// processes have), in every way a job ends (success, failure, cancel of
// a queued job), round after round: each time the waiting job is queued
// when the last end returns, and claimed once. Without AfterAny a failure
// cancels it instead, once.
func TestDepsConcurrentEndsAcrossStores(t *testing.T) {
	const k, rounds = 4, 60
	schema := pgtest.Schema(t)
	stores := make([]*pgstore.Store, k)
	for i := range stores {
		stores[i] = openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	}
	s := stores[0]
	ctx := t.Context()
	for round := range rounds {
		// Dependency 0 is canceled while queued; the others are claimed
		// and completed.
		specs := make([]jobstore.Spec, k)
		for i := range specs {
			specs[i] = jobstore.Spec{Kind: fmt.Sprintf("dep%d", round)}
		}
		specs[0].Kind = fmt.Sprintf("queued%d", round)
		afterAny := round%2 == 0
		specs = append(specs, jobstore.Spec{Kind: fmt.Sprintf("c%d", round), AfterSpecs: []int{0, 1, 2, 3}, AfterAny: afterAny})
		out, err := s.SubmitBatch(ctx, specs)
		require.NoError(t, err)
		c := out[k].Job
		require.Equal(t, jobstore.StateWaiting, c.State)
		leases := make([]jobstore.Lease, k)
		for i := 1; i < k; i++ {
			j, err := stores[i].Claim(ctx, jobstore.ClaimRequest{Worker: fmt.Sprintf("w%d", i), Kinds: []string{specs[1].Kind}})
			require.NoError(t, err)
			leases[i] = j.Lease()
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, k)
		for i := range k {
			wg.Go(func() {
				<-start
				switch {
				case i == 0:
					_, errs[i] = stores[i].Cancel(ctx, out[0].Job.ID)
				case i == 1 && round%3 == 0:
					_, errs[i] = stores[i].Complete(ctx, leases[i], jobstore.Outcome{Error: "boom", Permanent: true})
				default:
					_, errs[i] = stores[i].Complete(ctx, leases[i], jobstore.Succeeded(nil))
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		got, err := s.Get(ctx, c.ID)
		require.NoError(t, err)
		if !afterAny {
			require.Equal(t, jobstore.StateCanceled, got.State, "round %d", round)
			require.Contains(t, got.LastError, "dependency ")
			continue
		}
		require.Equal(t, jobstore.StateQueued, got.State, "round %d: the job was not promoted by the last end", round)
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{c.Kind}})
		require.NoError(t, err)
		require.Equal(t, c.ID, j.ID)
		_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{c.Kind}})
		require.ErrorIs(t, err, jobstore.ErrNoJob, "round %d: claimed twice", round)
	}
}

// TestDepsSubmitRacesEnd: a job submitted naming a running job at the
// instant another store completes that job is never left waiting: the
// submit either sees the end (queued at once) or commits first and is
// promoted by the end.
func TestDepsSubmitRacesEnd(t *testing.T) {
	const rounds = 100
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	other := openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	ctx := t.Context()
	seen := map[jobstore.State]int{}
	for range rounds {
		d, _, err := s.Submit(ctx, jobstore.Spec{Kind: "d"})
		require.NoError(t, err)
		j, err := other.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"d"}})
		require.NoError(t, err)
		var c jobstore.Job
		var wg sync.WaitGroup
		start := make(chan struct{})
		var serr, cerr error
		wg.Go(func() {
			<-start
			c, _, serr = s.Submit(ctx, jobstore.Spec{Kind: "c", After: []string{d.ID}})
		})
		wg.Go(func() {
			<-start
			_, cerr = other.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		})
		close(start)
		wg.Wait()
		require.NoError(t, serr)
		require.NoError(t, cerr)
		seen[c.State]++
		got, err := s.Get(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State, "a job submitted as its dependency ended was left %s", got.State)
		_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"c"}})
		require.NoError(t, err)
	}
	t.Logf("submits that saw the end: %d; promoted by the end: %d", seen[jobstore.StateQueued], seen[jobstore.StateWaiting])
}

// TestCallbackClosesUnderConcurrentJoins: members submitted to a batch
// from several stores while a callback is submitted either join before
// the callback closes the batch, and the callback waits for them, or fail
// with ErrBatchClosed: no member is left out of the callback.
func TestCallbackClosesUnderConcurrentJoins(t *testing.T) {
	schema := pgtest.Schema(t)
	const k = 4
	stores := make([]*pgstore.Store, k)
	for i := range stores {
		stores[i] = openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	}
	ctx := t.Context()
	for round := range 10 {
		name := fmt.Sprintf("b%d", round)
		_, _, err := stores[0].Submit(ctx, jobstore.Spec{Kind: "m", Batch: name})
		require.NoError(t, err)
		var mu sync.Mutex
		var joined []string
		var cb jobstore.Job
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 1; i < k; i++ {
			wg.Go(func() {
				<-start
				for range 10 {
					j, _, err := stores[i].Submit(ctx, jobstore.Spec{Kind: "m", Batch: name})
					if errors.Is(err, jobstore.ErrBatchClosed) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					joined = append(joined, j.ID)
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			<-start
			time.Sleep(2 * time.Millisecond)
			var err error
			cb, _, err = stores[0].Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: name})
			if err != nil {
				t.Error(err)
			}
		})
		close(start)
		wg.Wait()
		b, err := stores[0].Batch(ctx, name)
		require.NoError(t, err)
		require.Equal(t, b.Total, len(cb.After), "the callback does not wait for every job of its batch")
		for _, id := range joined {
			require.Contains(t, cb.After, id)
		}
	}
}

// TestBatchRowGoesWithItsJobs: once Prune has removed every job of a
// batch, the batch is unknown again (and open), and its row is gone.
func TestBatchRowGoesWithItsJobs(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	s := openStore(t, schema, &pgstore.Options{RecoverInterval: time.Hour})
	m, _, err := s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err)
	cb, _, err := s.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	require.NoError(t, err)
	for _, id := range []string{m.ID, cb.ID} {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		require.Equal(t, id, j.ID)
		_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	n, err := s.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = s.Batch(ctx, "b")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	var rows int
	require.NoError(t, pgtest.Pool(t, 1).QueryRow(ctx, `SELECT count(*) FROM `+schema+`.batches`).Scan(&rows))
	require.Zero(t, rows)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.NoError(t, err, "a batch whose jobs are gone is open again")
}

// TestSubmitTxWithDeps: a job with dependencies submitted in the caller's
// transaction exists only if it commits; a refused one leaves the
// transaction usable.
func TestSubmitTxWithDeps(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	a, _, err := s.Submit(ctx, jobstore.Spec{Kind: "a"})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, _, err = s.SubmitTx(ctx, tx, jobstore.Spec{Kind: "c", After: []string{jobstore.NewID(time.Now())}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	out, err := s.SubmitBatchTx(ctx, tx, []jobstore.Spec{{Kind: "c", After: []string{a.ID}}, {Kind: "d", AfterSpecs: []int{0}}})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, out[1].Job.State)
	require.NoError(t, tx.Rollback(ctx))
	_, err = s.Get(ctx, out[0].Job.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	c, created, err := s.SubmitTx(ctx, tx, jobstore.Spec{Kind: "c", After: []string{a.ID}})
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, tx.Commit(ctx))
	got, err := s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateWaiting, got.State)
}

// TestImportKeepsDeps: jobs copied from another store keep their
// dependencies and batches, a waiting one whose dependency ended in the
// copy is settled by the import, and ends of the copied jobs settle
// their dependents.
func TestImportKeepsDeps(t *testing.T) {
	ctx := t.Context()
	src := openStore(t, pgtest.Schema(t), &pgstore.Options{RecoverInterval: time.Hour})
	a, _, err := src.Submit(ctx, jobstore.Spec{Kind: "a", Batch: "b"})
	require.NoError(t, err)
	c, _, err := src.Submit(ctx, jobstore.Spec{Kind: "c", After: []string{a.ID}})
	require.NoError(t, err)
	cb, _, err := src.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "b"})
	require.NoError(t, err)
	page, err := src.List(ctx, jobstore.ListOptions{Order: jobstore.OldestFirst})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 3)

	dst := openStore(t, pgtest.Schema(t), &pgstore.Options{RecoverInterval: time.Hour})
	n, err := dst.Import(ctx, page.Jobs)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, j := range page.Jobs {
		got, err := dst.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, j, got)
	}
	info, err := dst.Batch(ctx, "b")
	require.NoError(t, err)
	require.True(t, info.Closed)
	require.Equal(t, []string{cb.ID}, info.Callbacks)
	_, _, err = dst.Submit(ctx, jobstore.Spec{Kind: "m", Batch: "b"})
	require.ErrorIs(t, err, jobstore.ErrBatchClosed)

	j, err := dst.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	require.Equal(t, a.ID, j.ID)
	_, err = dst.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	for _, id := range []string{c.ID, cb.ID} {
		got, err := dst.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, got.State)
	}

	// A waiting job imported after its dependency ended is settled.
	d, _, err := src.Submit(ctx, jobstore.Spec{Kind: "d", After: []string{a.ID}})
	require.NoError(t, err)
	_, err = dst.Import(ctx, []jobstore.Job{d})
	require.NoError(t, err)
	got, err := dst.Get(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
}

// fanMembers is how many jobs TestProcessBatchFanIn puts in its batch.
const fanMembers = 200

// TestProcessBatchFanIn: a batch of 200 jobs and its callback, the jobs
// completed (a tenth of them failed) by four processes at once: the
// callback is claimed exactly once, by one of them, after every job of
// the batch ended; the process that claims it finds the batch ended.
func TestProcessBatchFanIn(t *testing.T) {
	schema := pgtest.Schema(t)
	s := openStore(t, schema, nil)
	ctx := t.Context()
	specs := make([]jobstore.Spec, fanMembers)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "m", Batch: "fan"}
		if i%10 == 0 {
			specs[i].Tags = []string{"fail"}
		}
	}
	_, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	cb, _, err := s.Submit(ctx, jobstore.Spec{Kind: "cb", AfterBatch: "fan"})
	require.NoError(t, err)
	require.Len(t, cb.After, fanMembers)

	start := time.Now().Add(time.Second).UnixNano()
	var kids []*testproc.Proc
	for range 4 {
		kids = append(kids, startChild(t, schema, "fan-in", childStart+"="+strconv.FormatInt(start, 10)))
	}
	var lastEnd, lastReturn time.Time
	ended := map[string]int{}
	var callbacks []string
	var claimedAt time.Time
	for _, c := range kids {
		for _, l := range c.Lines(t) {
			f := strings.Fields(l)
			at, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			require.NoError(t, err, l)
			switch f[0] {
			case "ended":
				ended[f[1]]++
				before, err := strconv.ParseInt(f[2], 10, 64)
				require.NoError(t, err, l)
				if tm := time.Unix(0, before); tm.After(lastEnd) {
					lastEnd = tm
				}
				if tm := time.Unix(0, at); tm.After(lastReturn) {
					lastReturn = tm
				}
			case "callback":
				require.Equal(t, cb.ID, f[1])
				require.Equal(t, "true", f[2], "the callback's process found the batch not ended")
				callbacks = append(callbacks, f[1])
				claimedAt = time.Unix(0, at)
			default:
				t.Fatalf("unexpected line %q", l)
			}
		}
	}
	require.Len(t, ended, fanMembers)
	for id, n := range ended {
		require.Equal(t, 1, n, "job %s ended %d times", id, n)
	}
	require.Equal(t, []string{cb.ID}, callbacks, "the callback was not claimed exactly once")
	require.True(t, claimedAt.After(lastEnd), "the callback was claimed before the last job of its batch was ended")
	t.Logf("callback claimed %v after the last Complete of its %d jobs returned in another process", claimedAt.Sub(lastReturn), fanMembers)
	got, err := s.Get(ctx, cb.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
	info, err := s.Batch(ctx, "fan")
	require.NoError(t, err)
	require.Equal(t, map[jobstore.State]int{jobstore.StateSucceeded: fanMembers * 9 / 10, jobstore.StateFailed: fanMembers / 10}, info.States)
}

// fanIn is the child role of TestProcessBatchFanIn: claim the batch's jobs
// and end them (every tenth fails), and the callback, until there is no
// more work; print "ended <id> <unixnano>" after each end of a member,
// and "callback <id> <batch ended> <unixnano>" on the claim of the
// callback. An end's line holds the times before its Complete was called
// and after it returned; the callback's, the time after its claim
// returned: the parent compares the first and the last.
func fanIn(ctx context.Context, s *pgstore.Store, worker string) error {
	return workUntilIdle(ctx, s, worker, 5, func(j jobstore.Job) error {
		if j.Kind == "cb" {
			at := time.Now().UnixNano()
			b, err := s.Batch(ctx, "fan")
			if err != nil {
				return err
			}
			fmt.Printf("callback %s %v %d\n", j.ID, b.Ended() && b.Total == fanMembers, at)
			_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
			return err
		}
		o := jobstore.Succeeded(nil)
		if slices.Contains(j.Tags, "fail") {
			o = jobstore.Outcome{Error: "boom", Permanent: true}
		}
		before := time.Now().UnixNano()
		if _, err := s.Complete(ctx, j.Lease(), o); err != nil {
			return err
		}
		fmt.Printf("ended %s %d %d\n", j.ID, before, time.Now().UnixNano())
		return nil
	})
}

// TestProcessPromotionLatency measures the time from a dependency's
// Complete returning in a child process to the dependent's claim in this
// one, whose worker waits in AwaitWorkSince (its poll is a minute, so only
// the notification of the promotion wakes it), and logs its percentiles.
// The promotion commits with the Complete, so the claim may even come
// before Complete has returned to the child (a negative time).
func TestProcessPromotionLatency(t *testing.T) {
	const n = 200
	schema := pgtest.Schema(t)
	s := openListening(t, schema, 0)
	ctx := t.Context()
	// The worker below is woken by the listener only: have it up first.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = s.AwaitWork(wctx)
	cancel()
	require.Eventually(t, func() bool { return listeners(t, schema) == 1 }, 10*time.Second, 10*time.Millisecond)
	c := startChild(t, schema, "complete-deps", childKey+"="+strconv.Itoa(n), childTTL+"=1m")
	var lat []time.Duration
	for i := range n {
		out, err := s.SubmitBatch(ctx, []jobstore.Spec{{Kind: "dep"}, {Kind: "dependent", AfterSpecs: []int{0}}})
		require.NoError(t, err)
		var claimed time.Time
		for {
			j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"dependent"}})
			if nj, ok := errors.AsType[*jobstore.NoJobError](err); ok {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := s.AwaitWorkSince(wctx, nj)
				cancel()
				require.NoError(t, err, "round %d: no promotion within 10 s", i)
				continue
			}
			require.NoError(t, err)
			claimed = time.Now()
			require.Equal(t, out[1].Job.ID, j.ID)
			_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
			require.NoError(t, err)
			break
		}
		f := strings.Fields(c.Next(t))
		require.Equal(t, []string{"completed", out[0].Job.ID}, f[:2])
		at, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		lat = append(lat, claimed.Sub(time.Unix(0, at)))
	}
	c.Lines(t)
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	t.Logf("promotion latency, a dependency's Complete returning in one process to the dependent's claim in another (%d samples): p50 %v, p90 %v, p99 %v, max %v",
		n, p(0.5), p(0.9), p(0.99), lat[len(lat)-1])
	require.Less(t, p(0.5), 50*time.Millisecond, "the median promotion took longer than 50 ms")
}

// completeDeps is the child role of TestProcessPromotionLatency: claim
// and complete childKey jobs of kind dep, one at a time, printing
// "completed <id> <unixnano>" as each Complete returns.
func completeDeps(ctx context.Context, s *pgstore.Store, worker string) error {
	n, err := strconv.Atoi(os.Getenv(childKey))
	if err != nil {
		return err
	}
	for range n {
		var j jobstore.Job
		for {
			j, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: worker, Kinds: []string{"dep"}})
			if nj, ok := errors.AsType[*jobstore.NoJobError](err); ok {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err = s.AwaitWorkSince(wctx, nj)
				cancel()
				if err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			return err
		}
		fmt.Printf("completed %s %d\n", j.ID, time.Now().UnixNano())
	}
	return nil
}
