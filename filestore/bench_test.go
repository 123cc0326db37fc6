package filestore

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// BenchmarkSubmit measures durable submits from one goroutine (every
// record and directory fsynced).
func BenchmarkSubmit(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"Durable", Options{}}, {"NoSync", Options{NoSync: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), &mode.opts)
			require.NoError(b, err)
			defer s.Close()
			for b.Loop() {
				if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench", Payload: []byte(`{"n":1}`)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		})
	}
}

// BenchmarkSubmitBatch measures durable batch submits of 1,000 jobs, in
// jobs per second: made durable with one syncfs (the default for a batch
// this large) and with an fsync per record, side by side.
func BenchmarkSubmitBatch(b *testing.B) {
	for _, mode := range []struct {
		name      string
		syncFSMin int
	}{{"SyncFS", syncFSBatch}, {"FsyncEach", math.MaxInt}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), nil)
			require.NoError(b, err)
			defer s.Close()
			s.durable.batchMin = mode.syncFSMin
			specs := make([]jobstore.Spec, 1000)
			for i := range specs {
				specs[i] = jobstore.Spec{Kind: "bench", Payload: []byte(`{"n":1}`)}
			}
			for b.Loop() {
				if _, err := s.SubmitBatch(b.Context(), specs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(specs))/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkClaimComplete measures a durable claim followed by a
// successful Complete, from one goroutine, over a backlog.
func BenchmarkClaimComplete(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"Durable", Options{}}, {"NoSync", Options{NoSync: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), &Options{NoSync: true})
			require.NoError(b, err)
			for range b.N {
				if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
			claimCompleteAll(b, s, &mode.opts, jobstore.ClaimRequest{Worker: "w"}, "claim+complete/s")
		})
	}
}

// BenchmarkClaimCompleteLimit measures what a queue's concurrency limit
// costs a claim: one claim and completion at a time (no fsync), of a queue
// without a limit, limited to 1 (each claim probes one slot and counts
// none), limited to 8 with 7 jobs running (each claim probes up to 8
// slots and counts 7 busy ones), and with a per-partition limit of 1 (each
// claim makes a partition's slot directory and file, which its end
// removes), and with a rate it never fills (each claim reads and writes the
// queue's starts file), side by side in one run.
func BenchmarkClaimCompleteLimit(b *testing.B) {
	for _, tc := range []struct {
		name           string
		limit, running int
		// per is the per-partition limit; each job has a partition of its
		// own when it is set, so that every claim makes its partition's
		// slot directory and its end removes it.
		per int
		// rate is a rate limit that the benchmark never fills: each claim
		// reads and writes the queue's starts.
		rate jobstore.Rate
	}{
		{"None", 0, 0, 0, jobstore.Rate{}}, {"Limit1", 1, 0, 0, jobstore.Rate{}}, {"Limit8Running7", 8, 7, 0, jobstore.Rate{}},
		{"PerPartition1", 0, 0, 1, jobstore.Rate{}}, {"Limit8PerPartition1", 8, 0, 1, jobstore.Rate{}},
		{"Rate100PerMs", 0, 0, 0, jobstore.Rate{N: 100, Per: time.Millisecond}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), &Options{NoSync: true})
			require.NoError(b, err)
			defer s.Close()
			if tc.limit > 0 {
				require.NoError(b, s.SetQueueLimit(b.Context(), "q", tc.limit))
			}
			if tc.per > 0 {
				require.NoError(b, s.SetPartitionLimit(b.Context(), "q", tc.per))
			}
			if !tc.rate.IsZero() {
				require.NoError(b, s.SetQueueRate(b.Context(), "q", tc.rate))
			}
			for i := range b.N + tc.running {
				spec := jobstore.Spec{Kind: "bench", Queue: "q"}
				if tc.per > 0 {
					spec.Partition = strconv.Itoa(i)
				}
				if _, _, err := s.Submit(b.Context(), spec); err != nil {
					b.Fatal(err)
				}
			}
			for range tc.running {
				_, err := s.Claim(b.Context(), jobstore.ClaimRequest{Worker: "held"})
				require.NoError(b, err)
			}
			b.ResetTimer()
			for range b.N {
				j, err := s.Claim(b.Context(), jobstore.ClaimRequest{Worker: "w"})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Complete(b.Context(), j.Lease(), jobstore.Succeeded(nil)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claim+complete/s")
		})
	}
}

// BenchmarkClaimParallel measures durable claims alone from 8 goroutines
// of one process over a backlog: no claim waits for an fsync; the claim
// flusher fsyncs claimed/ once for every claim made while the one before
// ran (claimflush.go).
func BenchmarkClaimParallel(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(b.Context(), dir, &Options{NoSync: true})
	require.NoError(b, err)
	for range b.N {
		if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, s.Close())
	claimer, err := Open(b.Context(), dir, nil)
	require.NoError(b, err)
	defer claimer.Close()
	var worker atomic.Int64
	b.SetParallelism(4) // 8 goroutines on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := jobstore.ClaimRequest{Worker: fmt.Sprintf("w%d", worker.Add(1))}
		for pb.Next() {
			if _, err := claimer.Claim(b.Context(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkSubmitParallel measures durable submits from 16 goroutines (8
// per CPU here) of one process: with an fsync per file and a shared
// directory fsync, and with Options.SyncFS's shared syncfs.
func BenchmarkSubmitParallel(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"Fsync", Options{}}, {"SyncFS", Options{SyncFS: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), &mode.opts)
			require.NoError(b, err)
			defer s.Close()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		})
	}
}

// BenchmarkGet measures a lock-free Get of a job that does not move, in
// each state directory: the cost readShared pays to confirm a record.
func BenchmarkGet(b *testing.B) {
	s, err := Open(b.Context(), b.TempDir(), &Options{NoSync: true})
	require.NoError(b, err)
	defer s.Close()
	ctx := b.Context()
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "bench"})
	require.NoError(b, err)
	running, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(b, err)
	_, _, err = s.Submit(ctx, jobstore.Spec{Kind: "bench"})
	require.NoError(b, err)
	done, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.NoError(b, err)
	_, err = s.Complete(ctx, done.Lease(), jobstore.Succeeded(nil))
	require.NoError(b, err)
	queued, _, err := s.Submit(ctx, jobstore.Spec{Kind: "bench", Payload: []byte(`{"n":1}`)})
	require.NoError(b, err)
	for _, c := range []struct{ name, id string }{{"Queued", queued.ID}, {"Claimed", running.ID}, {"Done", done.ID}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Get(ctx, c.id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkList measures a List of the first queued job, as a poll for
// work does, and of the first 100, of 1,000 on an idle store: after the
// first call builds the index, the barrier that makes each call fresh
// (moveBarrier) and the reads of the jobs listed.
func BenchmarkList(b *testing.B) {
	s := queuedStore(b, 1)
	ctx := b.Context()
	for _, limit := range []int{1, 100} {
		b.Run(fmt.Sprintf("Limit%d", limit), func(b *testing.B) {
			opts := jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: limit}
			for b.Loop() {
				p, err := s.List(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Jobs) != limit {
					b.Fatalf("listed %d jobs, want %d", len(p.Jobs), limit)
				}
			}
		})
	}
}

// BenchmarkDependencies measures what dependencies cost, side by side
// with the same operations without them: a Submit that names a queued
// job, and a claim and Complete of a job that one job waits for (which the
// Complete queues), against a plain Submit and a claim and Complete of a
// job nobody waits for.
func BenchmarkDependencies(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"Durable", Options{}}, {"NoSync", Options{NoSync: true}}} {
		b.Run(mode.name+"/Submit/Plain", func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), &mode.opts)
			require.NoError(b, err)
			defer s.Close()
			for b.Loop() {
				if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		})
		b.Run(mode.name+"/Submit/After", func(b *testing.B) {
			s, err := Open(b.Context(), b.TempDir(), &mode.opts)
			require.NoError(b, err)
			defer s.Close()
			var dep string
			i := 0
			for b.Loop() {
				if i%100 == 0 { // a new dependency every 100 jobs
					j, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "dep"})
					if err != nil {
						b.Fatal(err)
					}
					dep = j.ID
				}
				i++
				if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench", After: []string{dep}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		})
		for _, waited := range []bool{false, true} {
			name := mode.name + "/ClaimComplete/NobodyWaits"
			if waited {
				name = mode.name + "/ClaimComplete/OneWaits"
			}
			b.Run(name, func(b *testing.B) {
				s, err := Open(b.Context(), b.TempDir(), &Options{NoSync: true})
				require.NoError(b, err)
				for range b.N {
					j, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					if waited {
						if _, _, err := s.Submit(b.Context(), jobstore.Spec{Kind: "waiter", After: []string{j.ID}}); err != nil {
							b.Fatal(err)
						}
					}
				}
				claimCompleteAll(b, s, &mode.opts, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"bench"}}, "jobs/s")
			})
		}
	}
}

// claimCompleteAll closes s, whose backlog the caller submitted, opens its
// directory again with opts, and measures b.N claims of req, each followed
// by a successful Complete, reporting them per second as unit.
func claimCompleteAll(b *testing.B, s *Store, opts *Options, req jobstore.ClaimRequest, unit string) {
	b.Helper()
	dir := s.Dir()
	require.NoError(b, s.Close())
	s, err := Open(b.Context(), dir, opts)
	require.NoError(b, err)
	defer s.Close()
	b.ResetTimer()
	for range b.N {
		j, err := s.Claim(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Complete(b.Context(), j.Lease(), jobstore.Succeeded(nil)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkRescan measures the rescan of queued/ that a claimer makes
// every PollInterval, the safety net for lost events, with 10,000 jobs
// queued and already in the candidate set: a listing of the directory and
// a look-up of each name, whatever the backlog.
func BenchmarkRescan(b *testing.B) {
	s := queuedStore(b, 10)
	_, err := s.refreshCands() // the first look: every record is read
	require.NoError(b, err)
	for b.Loop() {
		s.mu.Lock()
		s.rescan = true
		s.mu.Unlock()
		added, err := s.refreshCands()
		if err != nil {
			b.Fatal(err)
		}
		if added != 0 {
			b.Fatalf("a rescan added %d candidates, want 0", added)
		}
	}
	s.mu.Lock()
	n := len(s.cands.ids())
	s.mu.Unlock()
	if n != 10000 {
		b.Fatalf("%d candidates, want 10000", n)
	}
}

// queuedStore returns a Store without fsyncs (closed when b ends) holding
// batches of 1,000 queued jobs of kind "bench".
func queuedStore(b *testing.B, batches int) *Store {
	b.Helper()
	s, err := Open(b.Context(), b.TempDir(), &Options{NoSync: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	specs := make([]jobstore.Spec, 1000)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "bench"}
	}
	for range batches {
		_, err = s.SubmitBatch(b.Context(), specs)
		require.NoError(b, err)
	}
	return s
}
