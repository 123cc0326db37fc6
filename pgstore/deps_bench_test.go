package pgstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// BenchmarkSubmit measures one Submit of a job without dependencies, the
// path that dependencies must leave as it was (no statement more).
//
//	go test -run '^$' -bench 'Submit$|Complete' -benchtime 3000x -count 5 ./pgstore
func BenchmarkSubmit(b *testing.B) {
	pgtest.Require(b)
	s := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		if _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkComplete measures Complete of claimed jobs without dependents,
// from 8 goroutines at once (completions share statements), and the
// same with every job named by a waiting job (dependents), which pays
// the transaction that settles them.
func BenchmarkComplete(b *testing.B) {
	pgtest.Require(b)
	for _, name := range []string{"plain", "dependents"} {
		b.Run(name, func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			var jobs []jobstore.Job
			for left := b.N; left > 0; left -= jobstore.MaxBatch {
				specs := make([]jobstore.Spec, min(left, jobstore.MaxBatch))
				for i := range specs {
					specs[i] = jobstore.Spec{Kind: "bench"}
				}
				out, err := s.SubmitBatch(ctx, specs)
				require.NoError(b, err)
				if name == "dependents" {
					var waiting []jobstore.Spec
					for _, r := range out {
						waiting = append(waiting, jobstore.Spec{Kind: "after", After: []string{r.Job.ID}, AfterAny: true})
					}
					_, err := s.SubmitBatch(ctx, waiting)
					require.NoError(b, err)
				}
				for n := 0; n < len(specs); {
					got, err := s.ClaimBatch(ctx, jobstore.ClaimRequest{Worker: "bench", Kinds: []string{"bench"}}, min(100, len(specs)-n))
					require.NoError(b, err)
					jobs = append(jobs, got...)
					n += len(got)
				}
			}
			require.Len(b, jobs, b.N)
			next := make(chan jobstore.Job, len(jobs))
			for _, j := range jobs {
				next <- j
			}
			close(next)
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					j := <-next
					if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchStore opens a store in a schema of its own for a benchmark.
func benchStore(b *testing.B) *pgstore.Store {
	b.Helper()
	s, err := pgstore.Open(context.Background(), pgtest.Pool(b, 16), &pgstore.Options{Schema: pgtest.Schema(b)})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s
}
