package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// faultFS wraps the real file operations and fails the failAt-th one
// (counting from 1 after arm). In crash mode that step and every later one
// fail, as if the process had died there: nothing after it reaches the
// disk. A crash inside WriteFile leaves its temp file behind, as a real
// one between the temp write and the rename would.
type faultFS struct {
	inner  fileOps
	mu     sync.Mutex
	n      int
	failAt int
	crash  bool
	err    error
	hit    bool
	ops    []string
}

func (f *faultFS) arm(failAt int, crash bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n, f.failAt, f.crash, f.err, f.hit, f.ops = 0, failAt, crash, err, false, nil
}

func (f *faultFS) step(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAt == 0 {
		return nil
	}
	f.n++
	f.ops = append(f.ops, op)
	if f.n == f.failAt || (f.crash && f.n > f.failAt) {
		f.hit = true
		return fmt.Errorf("injected at step %d (%s): %w", f.n, op, f.err)
	}
	return nil
}

func (f *faultFS) WriteFile(path, tmpDir string, data []byte, perm os.FileMode, sync bool) error {
	if err := f.step("write " + path); err != nil {
		if f.crash {
			_, _ = f.inner.WriteTemp(tmpDir, data, perm, false)
		}
		return err
	}
	return f.inner.WriteFile(path, tmpDir, data, perm, sync)
}

func (f *faultFS) WriteTemp(tmpDir string, data []byte, perm os.FileMode, sync bool) (string, error) {
	if err := f.step("write temp"); err != nil {
		return "", err
	}
	return f.inner.WriteTemp(tmpDir, data, perm, sync)
}

func (f *faultFS) WriteNew(path, tmpDir string, data []byte, perm os.FileMode) (*newFile, error) {
	if err := f.step("write new " + path); err != nil {
		return nil, err
	}
	return f.inner.WriteNew(path, tmpDir, data, perm)
}

func (f *faultFS) PlaceNew(nf *newFile) error {
	if err := f.step("place " + nf.path); err != nil {
		f.inner.DropNew(nf)
		return err
	}
	return f.inner.PlaceNew(nf)
}

func (f *faultFS) DropNew(nf *newFile) { f.inner.DropNew(nf) }

func (f *faultFS) SyncFS(d string) (syncer, error) {
	if err := f.step("open syncfs " + d); err != nil {
		return nil, err
	}
	inner, err := f.inner.SyncFS(d)
	if err != nil {
		return nil, err
	}
	return faultSyncer{f: f, inner: inner, dir: d}, nil
}

// faultSyncer makes a syncfs one more step that can fail.
type faultSyncer struct {
	f     *faultFS
	inner syncer
	dir   string
}

func (s faultSyncer) Sync() error {
	if err := s.f.step("syncfs " + s.dir); err != nil {
		return err
	}
	return s.inner.Sync()
}

func (s faultSyncer) Close() error { return s.inner.Close() }

func (f *faultFS) Overwrite(p string, data []byte) error {
	if err := f.step("overwrite " + p); err != nil {
		return err
	}
	return f.inner.Overwrite(p, data)
}

func (f *faultFS) JournalWrite(file *os.File, data []byte, off int64) error {
	if err := f.step("journal-write " + file.Name()); err != nil {
		return err
	}
	return f.inner.JournalWrite(file, data, off)
}

func (f *faultFS) JournalSync(file *os.File) error {
	if err := f.step("journal-sync " + file.Name()); err != nil {
		return err
	}
	return f.inner.JournalSync(file)
}

func (f *faultFS) SetXattr(p, name string, value []byte) error {
	if err := f.step("setxattr " + p); err != nil {
		return err
	}
	return f.inner.SetXattr(p, name, value)
}

func (f *faultFS) Link(o, n string) error {
	if err := f.step("link " + n); err != nil {
		return err
	}
	return f.inner.Link(o, n)
}

func (f *faultFS) Rename(o, n string) error {
	if err := f.step("rename " + o + " " + n); err != nil {
		return err
	}
	return f.inner.Rename(o, n)
}

func (f *faultFS) RemoveAll(p string) error {
	if err := f.step("remove all " + p); err != nil {
		return err
	}
	return f.inner.RemoveAll(p)
}

func (f *faultFS) Remove(p string) error {
	if err := f.step("remove " + p); err != nil {
		return err
	}
	return f.inner.Remove(p)
}

func (f *faultFS) SyncDir(d string) error {
	if err := f.step("fsync " + d); err != nil {
		return err
	}
	return f.inner.SyncDir(d)
}

func (f *faultFS) SyncFile(p string) error {
	if err := f.step("fsync " + p); err != nil {
		return err
	}
	return f.inner.SyncFile(p)
}

func (f *faultFS) FSInfo(d string) (fsInfo, error) { return f.inner.FSInfo(d) }

func (f *faultFS) Mkdir(d string, perm os.FileMode) error {
	if err := f.step("mkdir " + d); err != nil {
		return err
	}
	return f.inner.Mkdir(d, perm)
}

// faultCase is one operation run with a fault at each of its steps.
type faultCase struct {
	name string
	// setup prepares the store and returns what op and check need.
	setup func(t *testing.T, s *Store) *faultState
	// op is the operation under test.
	op func(ctx context.Context, s *Store, st *faultState) error
	// check runs on the reopened store; opErr is what op returned.
	check func(t *testing.T, s *Store, st *faultState, opErr error)
}

type faultState struct {
	id    string
	key   string
	lease jobstore.Lease
	crash bool // the fault is a crash, not an I/O error
}

const faultKey = "order-7"

func submitKeyed(t *testing.T, s *Store) *faultState {
	j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: faultKey})
	require.NoError(t, err)
	return &faultState{id: j.ID, key: faultKey}
}

func claimed(t *testing.T, s *Store) *faultState {
	st := submitKeyed(t, s)
	j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
	require.NoError(t, err)
	st.lease = j.Lease()
	return st
}

func finished(t *testing.T, s *Store) *faultState {
	st := claimed(t, s)
	_, err := s.Complete(t.Context(), st.lease, jobstore.Outcome{Error: "boom", Permanent: true})
	require.NoError(t, err)
	return st
}

// mustState requires job id to exist in one of states.
func mustState(t *testing.T, s *Store, id string, states ...jobstore.State) jobstore.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	require.NoError(t, err)
	require.Contains(t, states, j.State)
	return j
}

// batchFaultOp submits a batch of four, two with keys.
func batchFaultOp(ctx context.Context, s *Store, st *faultState) error {
	_, err := s.SubmitBatch(ctx, []jobstore.Spec{
		{Kind: "batch", Key: st.key}, {Kind: "batch"}, {Kind: "batch", Key: st.key + "b"}, {Kind: "batch"},
	})
	return err
}

// batchFaultCheck: an acknowledged batch is all there, one that reported
// an I/O error left nothing, and a crash left only whole queued jobs.
func batchFaultCheck(t *testing.T, s *Store, st *faultState, opErr error) {
	page, err := s.List(t.Context(), jobstore.ListOptions{Kind: "batch"})
	require.NoError(t, err)
	require.Empty(t, page.Errors)
	switch {
	case opErr == nil:
		require.Len(t, page.Jobs, 4, "an acknowledged batch lost jobs")
	case !st.crash:
		require.Empty(t, page.Jobs, "a batch that reported an error left jobs")
	default:
		// A crash may leave part of the batch, each job whole
		// (Fsck is clean) and queued.
		for _, j := range page.Jobs {
			require.Equal(t, jobstore.StateQueued, j.State)
		}
	}
}

var faultCases = []faultCase{
	{
		name:  "Submit",
		setup: func(t *testing.T, s *Store) *faultState { return &faultState{key: faultKey} },
		op: func(ctx context.Context, s *Store, st *faultState) error {
			j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: st.key})
			st.id = j.ID
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			if opErr == nil {
				mustState(t, s, st.id, jobstore.StateQueued)
			}
		},
	},
	{
		name: "SubmitExistingKey",
		setup: func(t *testing.T, s *Store) *faultState {
			// Submitted by another Store, so this one's key cache is cold and
			// the submit takes the link path.
			other, err := Open(t.Context(), s.Dir(), &Options{NoSync: true})
			require.NoError(t, err)
			defer other.Close()
			return submitKeyed(t, other)
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			j, created, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: st.key})
			if err == nil && (created || j.ID != st.id) {
				return errors.New("a second job for one key")
			}
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			require.True(t, opErr == nil || injected(opErr), "%v", opErr)
			mustState(t, s, st.id, jobstore.StateQueued)
		},
	},
	{
		name:  "SubmitBatch",
		setup: func(t *testing.T, s *Store) *faultState { return &faultState{key: faultKey} },
		op:    batchFaultOp,
		check: batchFaultCheck,
	},
	{
		name: "SubmitBatchSyncFS",
		setup: func(t *testing.T, s *Store) *faultState {
			s.durable.batchMin = 2 // this small batch takes the large batches' path
			return &faultState{key: faultKey}
		},
		op:    batchFaultOp,
		check: batchFaultCheck,
	},
	{
		// A claim of a limited queue's job, whose slot file is written:
		// an error anywhere leaves the job queued, and its slot free.
		name: "ClaimLimited",
		setup: func(t *testing.T, s *Store) *faultState {
			require.NoError(t, s.SetQueueLimit(t.Context(), "q", 1))
			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Queue: "q"})
			require.NoError(t, err)
			return &faultState{id: j.ID}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			mustState(t, s, st.id, jobstore.StateQueued)
			j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2", Queues: []string{"q"}})
			require.NoError(t, err, "the slot was left taken")
			require.Equal(t, st.id, j.ID)
		},
	},
	{
		// A claim of a job of a partition of a queue limited both ways,
		// which takes two slots: an error anywhere leaves the job queued
		// and both slots free.
		name: "ClaimPartition",
		setup: func(t *testing.T, s *Store) *faultState {
			require.NoError(t, s.SetQueueLimit(t.Context(), "q", 1))
			require.NoError(t, s.SetPartitionLimit(t.Context(), "q", 1))
			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Queue: "q", Partition: "p"})
			require.NoError(t, err)
			return &faultState{id: j.ID}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			mustState(t, s, st.id, jobstore.StateQueued)
			j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2", Queues: []string{"q"}})
			require.NoError(t, err, "a slot was left taken")
			require.Equal(t, st.id, j.ID)
		},
	},
	{
		// A claim of a rate-limited queue's job, which records its start:
		// an error anywhere leaves the job queued (a start it recorded
		// before failing counts, which only delays the next), and the
		// store whole: without the rate the job is claimed.
		name: "ClaimRated",
		setup: func(t *testing.T, s *Store) *faultState {
			require.NoError(t, s.SetQueueRate(t.Context(), "q", jobstore.Rate{N: 1, Per: time.Hour}))
			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Queue: "q"})
			require.NoError(t, err)
			return &faultState{id: j.ID}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			mustState(t, s, st.id, jobstore.StateQueued)
			require.NoError(t, s.SetQueueRate(t.Context(), "q", jobstore.Rate{}))
			j, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w2", Queues: []string{"q"}})
			require.NoError(t, err)
			require.Equal(t, st.id, j.ID)
		},
	},
	{
		// A pause either holds, for every claim after it, or is
		// reported failed; the other queue's pause, made before, stays.
		name: "PauseQueue",
		setup: func(t *testing.T, s *Store) *faultState {
			require.NoError(t, s.PauseQueue(t.Context(), "before"))
			return &faultState{}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			return s.PauseQueue(ctx, "p")
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			paused := pausedQueues(t, s)
			require.True(t, paused["before"], "an earlier pause was lost")
			if opErr == nil {
				require.True(t, paused["p"], "an acknowledged pause was lost")
			}
			j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Queue: "p"})
			require.NoError(t, err)
			c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w", Queues: []string{"p"}})
			if paused["p"] {
				require.ErrorIs(t, err, jobstore.ErrNoJob, "a job of a paused queue was claimed")
			} else {
				require.NoError(t, err)
				require.Equal(t, j.ID, c.ID)
			}
		},
	},
	{
		// An added schedule either is there with every field, or the
		// add is reported failed; the schedule and the retention policy
		// there before stay.
		name: "AddSchedule",
		setup: func(t *testing.T, s *Store) *faultState {
			_, err := s.AddSchedule(t.Context(), jobstore.Schedule{Name: "before", Spec: "@daily", Job: jobstore.Spec{Kind: "k"}}, false)
			require.NoError(t, err)
			require.NoError(t, s.SetRetention(t.Context(), jobstore.Retention{Succeeded: time.Hour}))
			return &faultState{}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.AddSchedule(ctx, jobstore.Schedule{Name: "nightly", Spec: "0 3 * * *", TZ: "Europe/Berlin", Job: jobstore.Spec{Kind: "k"}}, false)
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			_, err := s.GetSchedule(t.Context(), "before")
			require.NoError(t, err, "an earlier schedule was lost")
			r, err := s.Retention(t.Context())
			require.NoError(t, err)
			require.Equal(t, time.Hour, r.Succeeded, "the retention policy was lost")
			got, err := s.GetSchedule(t.Context(), "nightly")
			if opErr == nil {
				require.NoError(t, err, "an acknowledged schedule was lost")
			}
			if err == nil {
				require.Equal(t, "Europe/Berlin", got.TZ)
			}
		},
	},
	{
		// A recorded tick either moved forward, or the record is reported
		// failed and the earlier tick stays.
		name: "RecordTick",
		setup: func(t *testing.T, s *Store) *faultState {
			_, err := s.AddSchedule(t.Context(), jobstore.Schedule{Name: "beat", Spec: "@every 1s", Job: jobstore.Spec{Kind: "k"}}, false)
			require.NoError(t, err)
			require.NoError(t, s.RecordTick(t.Context(), "beat", time.Unix(1_800_000_000, 0), "job-1"))
			return &faultState{}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			return s.RecordTick(ctx, "beat", time.Unix(1_800_000_001, 0), "job-2")
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			got, err := s.GetSchedule(t.Context(), "beat")
			require.NoError(t, err, "the schedule was lost")
			switch got.LastJob {
			case "job-2":
				require.Equal(t, int64(1_800_000_001), got.LastTick.Unix())
			case "job-1":
				require.Error(t, opErr, "an acknowledged tick was lost")
				require.Equal(t, int64(1_800_000_000), got.LastTick.Unix())
			default:
				t.Fatalf("last job %q", got.LastJob)
			}
		},
	},
	{
		name: "ResumeQueue",
		setup: func(t *testing.T, s *Store) *faultState {
			require.NoError(t, s.PauseQueue(t.Context(), "p"))
			require.NoError(t, s.PauseQueue(t.Context(), "other"))
			return &faultState{}
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			return s.ResumeQueue(ctx, "p")
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			paused := pausedQueues(t, s)
			require.True(t, paused["other"], "another queue's pause was lost")
			if opErr == nil {
				require.False(t, paused["p"], "an acknowledged resume was lost")
			}
		},
	},
	{
		// A job that waits for another: acknowledged, it waits, with
		// its index entries; an error leaves no job; a crash leaves it
		// whole, waiting, or nothing.
		name:  "SubmitAfter",
		setup: submitKeyed,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.SubmitBatch(ctx, []jobstore.Spec{
				{Kind: "dep", Batch: "b"}, {Kind: "dep", After: []string{st.id}, AfterSpecs: []int{0}},
			})
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			page, err := s.List(t.Context(), jobstore.ListOptions{Kind: "dep", Order: jobstore.OldestFirst})
			require.NoError(t, err)
			switch {
			case opErr == nil:
				require.Len(t, page.Jobs, 2, "an acknowledged graph lost jobs")
			case !st.crash:
				require.Empty(t, page.Jobs, "a graph that reported an error left jobs")
			case len(page.Jobs) == 1:
				// A crash may leave part of a graph, but never a job
				// without the jobs it names.
				require.Empty(t, page.Jobs[0].After, "a crash left a job without its dependency")
			}
			if len(page.Jobs) == 2 {
				require.Equal(t, jobstore.StateWaiting, page.Jobs[1].State)
				deps, err := s.Dependents(t.Context(), st.id)
				require.NoError(t, err)
				require.Len(t, deps, 1, "the waiting job is not found from its dependency")
				// Ending the dependencies settles it.
				for range 2 {
					c, err := s.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w"})
					require.NoError(t, err)
					_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(nil))
					require.NoError(t, err)
				}
				mustState(t, s, page.Jobs[1].ID, jobstore.StateQueued)
			}
		},
	},
	{
		// A dependency's Complete, and the settling of the job that
		// waits for it: a crash between the two leaves the dependent
		// waiting, and Repair (in the background after Open) settles it.
		name: "CompleteSettles",
		setup: func(t *testing.T, s *Store) *faultState {
			st := claimed(t, s)
			w, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "waiter", After: []string{st.id}})
			require.NoError(t, err)
			st.key = w.ID // the waiting job
			return st
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Complete(ctx, st.lease, jobstore.Succeeded(nil))
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			if !st.crash {
				// The live store settles at its next pass.
				s.settleWaiting(t.Context())
			}
			_, err := s.Repair(t.Context())
			require.NoError(t, err)
			dep := mustState(t, s, st.id, jobstore.StateSucceeded, jobstore.StateQueued)
			w, err := s.Get(t.Context(), st.key)
			require.NoError(t, err)
			if dep.State == jobstore.StateSucceeded {
				require.Equal(t, jobstore.StateQueued, w.State, "a job waits though its dependency ended")
			} else {
				require.Equal(t, jobstore.StateWaiting, w.State)
			}
		},
	},
	{
		name:  "Claim",
		setup: submitKeyed,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			j := mustState(t, s, st.id, jobstore.StateQueued)
			if opErr == nil {
				require.Equal(t, 1, j.Attempt, "a claimed job whose worker died is queued again, attempt counted")
			}
		},
	},
	{
		name:  "CompleteSuccess",
		setup: claimed,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Complete(ctx, st.lease, jobstore.Succeeded([]byte(`{"ok":true}`)))
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			if opErr == nil {
				mustState(t, s, st.id, jobstore.StateSucceeded)
				return
			}
			mustState(t, s, st.id, jobstore.StateSucceeded, jobstore.StateQueued)
		},
	},
	{
		name:  "CompleteRetry",
		setup: claimed,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Complete(ctx, st.lease, jobstore.Outcome{Error: "again", RetryAfter: time.Hour})
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			j := mustState(t, s, st.id, jobstore.StateQueued)
			require.Equal(t, 1, j.Attempt)
			if opErr == nil {
				require.Equal(t, "again", j.LastError)
			}
		},
	},
	{
		name:  "CancelQueued",
		setup: submitKeyed,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Cancel(ctx, st.id)
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			if opErr == nil {
				mustState(t, s, st.id, jobstore.StateCanceled)
				return
			}
			mustState(t, s, st.id, jobstore.StateCanceled, jobstore.StateQueued)
		},
	},
	{
		name:  "CancelRunning",
		setup: claimed,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Cancel(ctx, st.id)
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			// The worker is gone with the crash: recovery cancels the job if
			// the request reached the disk, and queues it again if not.
			j := mustState(t, s, st.id, jobstore.StateCanceled, jobstore.StateQueued)
			if opErr == nil {
				require.Equal(t, jobstore.StateCanceled, j.State)
			}
		},
	},
	{
		name:  "Retry",
		setup: finished,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Retry(ctx, st.id)
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			if opErr == nil {
				mustState(t, s, st.id, jobstore.StateQueued)
				return
			}
			mustState(t, s, st.id, jobstore.StateQueued, jobstore.StateFailed)
		},
	},
	{
		name:  "Prune",
		setup: finished,
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.Prune(ctx, 0)
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			_, err := s.Get(t.Context(), st.id)
			if opErr == nil {
				require.ErrorIs(t, err, jobstore.ErrNotFound)
			}
			gone := errors.Is(err, jobstore.ErrNotFound)
			// The key is free exactly when the job is gone.
			j, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: st.key})
			require.NoError(t, err)
			require.Equal(t, gone, created, "key free=%v but job gone=%v", created, gone)
			if !gone {
				require.Equal(t, st.id, j.ID)
			}
		},
	},
	{
		name: "Recover",
		setup: func(t *testing.T, s *Store) *faultState {
			// Another Store claims the job and goes away without completing.
			st := submitKeyed(t, s)
			other, err := Open(t.Context(), s.Dir(), &Options{NoSync: true})
			require.NoError(t, err)
			_, err = other.Claim(t.Context(), jobstore.ClaimRequest{Worker: "dead"})
			require.NoError(t, err)
			require.NoError(t, other.Close())
			return st
		},
		op: func(ctx context.Context, s *Store, st *faultState) error {
			_, err := s.recoverDead(ctx, true)
			return err
		},
		check: func(t *testing.T, s *Store, st *faultState, opErr error) {
			j := mustState(t, s, st.id, jobstore.StateQueued)
			require.Equal(t, 1, j.Attempt)
		},
	},
}

// pausedQueues returns which queues of s are paused.
func pausedQueues(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	qs, err := s.Queues(t.Context())
	require.NoError(t, err)
	paused := map[string]bool{}
	for _, q := range qs {
		paused[q.Queue] = q.Paused
	}
	return paused
}

// injected reports whether err is one of the errors the tests inject.
func injected(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC)
}

// TestFaults runs every operation with a fault at each of its file
// operation steps: an I/O error (the store must report it, stay usable and
// leave nothing half-visible) and a crash (nothing after the step reaches
// the disk). After each, the store is reopened and must be consistent:
// Fsck finds nothing, no job is running without a worker, at most one job
// holds the key, and what the operation reported done is done.
func TestFaults(t *testing.T) {
	t.Parallel() // no timing assertions; it overlaps the process tests
	for _, syncFS := range []bool{false, true} {
		for _, tc := range faultCases {
			for _, crash := range []bool{false, true} {
				mode := "EIO"
				errv := error(syscall.EIO)
				if crash {
					mode, errv = "Crash", syscall.ENOSPC
				}
				if syncFS {
					mode += "/SyncFS"
				}
				t.Run(tc.name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					steps := 0
					for failAt := 1; ; failAt++ {
						if !runFault(t, tc, failAt, crash, syncFS, errv) {
							break
						}
						steps++
						require.Less(t, failAt, 50, "operation never finishes")
					}
					t.Logf("%d steps", steps)
					require.Positive(t, steps, "the operation made no file operation")
				})
			}
		}
	}
}

// errCrashed fails every file operation of a store whose process is
// taken as killed.
var errCrashed = errors.New("the process was killed")

// runFault runs tc with a fault at step failAt and reports whether the
// fault was hit (false: the operation has fewer steps).
func runFault(t *testing.T, tc faultCase, failAt int, crash, syncFS bool, errv error) bool {
	t.Helper()
	dir := t.TempDir()
	ffs := &faultFS{inner: osFS{}}
	opts := &Options{SyncFS: syncFS, RecoverInterval: time.Hour, PollInterval: time.Hour}
	s, err := open(t.Context(), dir, opts, ffs)
	require.NoError(t, err)
	st := tc.setup(t, s)
	st.crash = crash
	ffs.arm(failAt, crash, errv)
	opErr := tc.op(t.Context(), s, st)
	ffs.mu.Lock()
	hit, ops := ffs.hit, ffs.ops
	ffs.mu.Unlock()
	if !hit {
		require.NoError(t, opErr)
		require.NoError(t, s.Close())
		return false
	}
	ffs.arm(0, false, nil)
	if !crash {
		// The store reported the error and keeps working.
		if opErr == nil {
			t.Logf("step %d (%s): error not reported", failAt, ops[len(ops)-1])
		}
		// Nothing is left half-visible. The only leftovers an error may
		// leave are ones the live store already reads correctly and
		// resolves by itself: a superseded copy (loses by revision), a key
		// file without a record (rolled back by the next submit of that
		// key), a dead worker's job not yet recovered (the next recovery
		// pass), the lock file of a job taken back (an inode, removed by
		// the next Open or Fsck with repair), a waiting job whose
		// dependency's outcome was recorded but not made durable (settled
		// by the retried Complete, or the next settle pass).
		r, err := s.Fsck(t.Context(), false)
		require.NoError(t, err)
		for _, p := range r.Problems {
			require.Contains(t, []ProblemKind{ProblemStaleCopy, ProblemDanglingKey, ProblemDeadWorker, ProblemOrphanLock, ProblemUnsettled}, p.Kind,
				"after an I/O error at %v: %v", ops, r.Problems)
		}
		j, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "after"})
		require.NoError(t, err, "store unusable after an I/O error at %v", ops)
		_, err = s.Get(t.Context(), j.ID)
		require.NoError(t, err)
	}
	if crash {
		// A killed process cleans nothing up: every file operation of
		// Close fails, so its staging directory stays behind.
		ffs.arm(1, true, errCrashed)
	}
	require.NoError(t, s.Close())

	// Reopen with the real file operations: what a restart sees.
	s2, err := Open(t.Context(), dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err, "reopen after a fault at %v", ops)
	defer s2.Close()
	// Reads are right before any repair: Open makes none but the recovery
	// of dead workers' jobs.
	requireNoRunningOneKey(t, s2)
	tc.check(t, s2, st, opErr)
	// What the fault left, Repair (which the Store makes in the background
	// a second after Open) repairs: Fsck finds nothing after it.
	_, err = s2.Repair(t.Context())
	require.NoError(t, err)
	r, err := s2.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "after a fault at %v: fsck: %v", ops, r.Problems)
	return true
}

// requireNoRunningOneKey requires that no job is running (every worker is
// gone) and no key is held by two jobs.
func requireNoRunningOneKey(t *testing.T, s *Store) {
	t.Helper()
	page, err := s.List(t.Context(), jobstore.ListOptions{Limit: jobstore.MaxListLimit})
	require.NoError(t, err)
	require.Empty(t, page.Errors)
	keys := map[string]string{}
	for _, j := range page.Jobs {
		require.NotEqual(t, jobstore.StateRunning, j.State, "job %s stuck running", j.ID)
		if j.Key != "" {
			other, dup := keys[j.Key]
			require.False(t, dup, "key %q held by %s and %s", j.Key, other, j.ID)
			keys[j.Key] = j.ID
		}
	}
}

// TestCloseCleansUpThroughSeam: Close removes its staging directory
// through the file operations seam, so a process killed before it (every
// operation failing) leaves the directory behind, and the next Open sweeps
// it away.
func TestCloseCleansUpThroughSeam(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{inner: osFS{}}
	s, err := open(t.Context(), dir, &Options{NoSync: true, RecoverInterval: time.Hour}, ffs)
	require.NoError(t, err)
	staging := s.tmpDir
	ffs.arm(1, true, errCrashed)
	require.NoError(t, s.Close())
	require.True(t, ffs.hit, "Close made no file operation")
	require.DirExists(t, staging)
	require.FileExists(t, staging+recordLock)

	s2, err := Open(t.Context(), dir, &Options{NoSync: true, RecoverInterval: time.Hour})
	require.NoError(t, err)
	require.NoDirExists(t, staging)
	require.NoFileExists(t, staging+recordLock)
	require.NoError(t, s2.Close())
}

// TestSubmitBatchCtxEndsWhilePublishing: a ctx that ends while a batch's
// records are being renamed into queued/ stops the renames, and the batch
// is taken back as after any other error: the call returns the ctx's
// error, and no record, temp file or lock file of the batch is left.
func TestSubmitBatchCtxEndsWhilePublishing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	renames := 0
	s := openAt(t, dir, &Options{NoSync: true, Faults: func(op, path string) error {
		if op == "rename" {
			mu.Lock()
			renames++
			if renames == 10 {
				cancel()
			}
			mu.Unlock()
		}
		return nil
	}})
	specs := make([]jobstore.Spec, 200)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	_, err := s.SubmitBatch(ctx, specs)
	require.ErrorIs(t, err, context.Canceled)
	mu.Lock()
	require.Less(t, renames, len(specs), "the renames went on after the ctx ended")
	mu.Unlock()

	page, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, page.Jobs, "a batch that returned an error left jobs")
	ents, err := os.ReadDir(s.tmpDir)
	require.NoError(t, err)
	require.Empty(t, ents, "%s holds leftovers of the batch", s.tmpDir)
	require.Empty(t, jobLockFiles(t, dir), "locks/ holds leftovers of the batch")
}
