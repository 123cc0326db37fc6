package memstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// The benchmarks below cover memstore's hot paths. Run them with
//
//	go test -run '^$' -bench . -count 10 ./memstore | tee new.txt
//
// and compare two runs with benchstat. Those with a jobs=N sub-benchmark
// measure how an operation's cost grows with the number of jobs in the
// store, most of them finished, as a long-running store accumulates them.

var benchPayload = json.RawMessage(`{"to":"alice@example.com","template":"welcome"}`)

// benchSizes are the store sizes of the scaling benchmarks.
var benchSizes = []int{1_000, 10_000, 100_000}

// filled returns a store holding n jobs of which all but queued are
// finished, and the IDs of all of them. The queued jobs are the oldest, so
// that a newest-first listing of queued jobs must get past every finished
// one if the store scans. The finished jobs are canceled while queued,
// which costs the same whatever the store's claim costs.
func filled(b *testing.B, n, queued int) (*memstore.Store, []string) {
	b.Helper()
	ctx := context.Background()
	s := memstore.New(nil)
	b.Cleanup(func() { s.Close() })
	ids := make([]string, 0, n)
	for range n {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "bench", Payload: benchPayload})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids[queued:] {
		if _, err := s.Cancel(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	return s, ids
}

func BenchmarkSubmit(b *testing.B) {
	ctx := b.Context()
	s := memstore.New(nil)
	defer s.Close()
	spec := jobstore.Spec{Kind: "bench", Payload: benchPayload}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Submit(ctx, spec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSubmitParallel(b *testing.B) {
	ctx := b.Context()
	s := memstore.New(nil)
	defer s.Close()
	spec := jobstore.Spec{Kind: "bench", Payload: benchPayload}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := s.Submit(ctx, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSubmitKeyed submits jobs with distinct idempotency keys.
func BenchmarkSubmitKeyed(b *testing.B) {
	ctx := b.Context()
	s := memstore.New(nil)
	defer s.Close()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "bench", Key: "k" + strconv.Itoa(i), Payload: benchPayload}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubmitKeyedExisting resubmits a key that exists: the fast path
// of an idempotent retry.
func BenchmarkSubmitKeyedExisting(b *testing.B) {
	ctx := b.Context()
	s := memstore.New(nil)
	defer s.Close()
	spec := jobstore.Spec{Kind: "bench", Key: "same", Payload: benchPayload}
	if _, _, err := s.Submit(ctx, spec); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, created, err := s.Submit(ctx, spec); err != nil || created {
			b.Fatalf("created=%v err=%v", created, err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s, ids := filled(b, n, n/10)
			ctx := b.Context()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Get(ctx, ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
				i += 7919 // a prime stride: not always the same job
			}
		})
	}
}

// BenchmarkClaimComplete measures one attempt's store work: claim the most
// urgent job and record its success.
func BenchmarkClaimComplete(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s, _ := filled(b, n, 0)
			ctx := b.Context()
			req := jobstore.ClaimRequest{Worker: "bench"}
			spec := jobstore.Spec{Kind: "bench", Payload: benchPayload}
			b.ReportAllocs()
			for b.Loop() {
				// Keep one job queued: submit is outside the figure's
				// intent but cheap next to the pair it feeds.
				b.StopTimer()
				if _, _, err := s.Submit(ctx, spec); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				j, err := s.Claim(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimCompleteParallel runs claim+complete from GOMAXPROCS
// goroutines over a pre-filled queue, as a runner's workers do.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	ctx := b.Context()
	s := memstore.New(nil)
	defer s.Close()
	spec := jobstore.Spec{Kind: "bench", Payload: benchPayload}
	var worker atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := jobstore.ClaimRequest{Worker: fmt.Sprintf("w%d", worker.Add(1))}
		for pb.Next() {
			if _, _, err := s.Submit(ctx, spec); err != nil {
				b.Fatal(err)
			}
			j, err := s.Claim(ctx, req)
			if err != nil {
				continue // another goroutine took it; ours is still queued
			}
			if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListQueued lists the first page of queued jobs while the store
// also holds many finished ones: the cost should depend on the page, not
// on the finished jobs.
func BenchmarkListQueued(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s, _ := filled(b, n, 200)
			ctx := b.Context()
			opts := jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: 100}
			b.ReportAllocs()
			for b.Loop() {
				p, err := s.List(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Jobs) != 100 {
					b.Fatalf("listed %d queued jobs, want 100", len(p.Jobs))
				}
			}
		})
	}
}

func BenchmarkStats(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s, _ := filled(b, n, n/10)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Stats(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
