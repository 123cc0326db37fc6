package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// scaleQueued is how many jobs of a scaling store stay queued, whatever
// its size: the rest are finished, so that a cost that grows from one
// size to the next grows with finished jobs.
const scaleQueued = 100

// scaleOps is how many claim+complete operations a scale child times. It
// first submits as many jobs, so the queued ones stay scaleQueued.
const scaleOps = 200

// scaleSpec configures a scale child.
type scaleSpec struct {
	// IDs are sample job IDs to Get.
	IDs []string `json:"ids"`
}

// scaleResult is what a scale child measured.
type scaleResult struct {
	OpenMs          float64 `json:"open_ms"`
	GetUs           float64 `json:"get_us"`
	ClaimCompleteMs float64 `json:"claim_complete_ms"`
	ListQueuedMs    float64 `json:"list_queued_ms"`
	MaxRSSMiB       float64 `json:"max_rss_mib"`
}

func scaleMetrics(n int) (get, cc, list, open, rss metric) {
	size := sizeLabel(n)
	mk := func(kind int, id, title, unit string) metric {
		return metric{ID: "scale-" + id + "-" + size, Title: title + ", " + size + " jobs in store", Unit: unit, Group: "scale", Order: kind*100_000_000 + n}
	}
	return mk(1, "get", "get", "µs"),
		mk(2, "cc", "claim+complete", "ms"),
		mk(3, "list", "list 100 queued", "ms"),
		mk(4, "open", "open", "ms"),
		mk(5, "rss", "peak RSS", "MiB")
}

// sizeLabel writes a store size briefly: 300, 1.5k, 100k.
func sizeLabel(n int) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprintf("%.1fk", float64(n)/1000)
	}
}

// seededStore is a store of n jobs, most of them finished, prepared once
// and measured in every round.
type seededStore struct {
	dir string
	ids []string
	n   int
}

// seedMarker is the file in a seeded store's directory that lists sample
// IDs; a store that has it is complete and may be reused (-keep-scale).
const seedMarker = "bench-seed.json"

// seedChunk is how many jobs seedScale submits before it finishes most of
// them, so that the queue never holds more than a tenth of the store.
const seedChunk = 1000

// seedScale builds (or, with c.KeepScale, reuses) a filestore of n jobs
// under c.Dir, all finished but the oldest scaleQueued (or a tenth, if
// fewer). It writes without fsync (the format is the same; only the build
// is faster). Jobs are finished by Cancel while queued, chunk by chunk as
// they are submitted: that leaves them terminal in the store as completed
// ones are, at a cost that does not depend on how claim picks a job.
func seedScale(ctx context.Context, c *config, n int) (*seededStore, error) {
	dir := c.scratch(fmt.Sprintf("jobdir-bench-scale-%d", n))
	if c.KeepScale {
		if b, err := os.ReadFile(filepath.Join(dir, seedMarker)); err == nil {
			var st seededStore
			if err := json.Unmarshal(b, &st.ids); err == nil && len(st.ids) > 0 {
				c.logf("reusing the seeded store %s", dir)
				st.dir, st.n = dir, n
				return &st, nil
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	s, err := filestore.Open(ctx, dir, &filestore.Options{NoSync: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var sample []string
	keep := min(scaleQueued, n/10)
	for done := 0; done < n; {
		k := min(seedChunk, n-done)
		specs := make([]jobstore.Spec, k)
		for i := range specs {
			specs[i] = benchSpec(0)
		}
		out, err := s.SubmitBatch(ctx, specs)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", n, err)
		}
		jobs := make([]jobstore.Job, len(out))
		for i, r := range out {
			jobs[i] = r.Job
		}
		finish := jobs
		if done == 0 {
			finish = jobs[keep:]
		}
		if err := cancelAll(ctx, s, finish, 8); err != nil {
			return nil, fmt.Errorf("seed %d: finish jobs: %w", n, err)
		}
		// Sample IDs from every chunk, finished and queued alike.
		for i := 0; i < len(jobs); i += max(1, n/500) {
			sample = append(sample, jobs[i].ID)
		}
		done += k
		if done%(20*seedChunk) == 0 {
			c.logf("  %d of %d jobs", done, n)
		}
	}
	rand.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(len(sample), 500)]
	if c.KeepScale {
		b, err := json.Marshal(sample)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, seedMarker), b, 0o600); err != nil {
			return nil, err
		}
	}
	return &seededStore{dir: dir, ids: sample, n: n}, nil
}

// cancelAll cancels jobs from clients goroutines.
func cancelAll(ctx context.Context, s jobstore.Store, jobs []jobstore.Job, clients int) error {
	return parallel(len(jobs), clients, func(i int) error {
		_, err := s.Cancel(ctx, jobs[i].ID)
		return err
	})
}

// parallel calls f(0) … f(n-1) from clients goroutines and returns the
// errors joined.
func parallel(n, clients int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range clients {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// runScale times open, get, claim+complete and list of queued jobs on the
// seeded store in a fresh child process, so that open time and peak RSS
// are the child's alone.
func runScale(ctx context.Context, c *config, r *results, s *system, st *seededStore) error {
	k, err := startChild(ctx, childSpec{Role: "scale", System: s.name, Dir: st.dir, Scale: &scaleSpec{IDs: st.ids}})
	if err != nil {
		return err
	}
	defer k.kill()
	f, err := k.expect(ctx, "result", 10*time.Minute)
	if err != nil {
		return err
	}
	var res scaleResult
	if err := json.Unmarshal([]byte(strings.Join(f, " ")), &res); err != nil {
		return err
	}
	get, cc, list, open, rss := scaleMetrics(st.n)
	r.add(get, s.name, res.GetUs)
	r.add(cc, s.name, res.ClaimCompleteMs)
	r.add(list, s.name, res.ListQueuedMs)
	r.add(open, s.name, res.OpenMs)
	r.add(rss, s.name, res.MaxRSSMiB)
	c.logf("%-20s scale %6d: open %.1f ms, get %.1f µs, claim+complete %.3f ms, list %.2f ms, RSS %.1f MiB",
		s.name, st.n, res.OpenMs, res.GetUs, res.ClaimCompleteMs, res.ListQueuedMs, res.MaxRSSMiB)
	return k.stop(time.Minute)
}

// runScaleChild is the scale child's part.
func runScaleChild(ctx context.Context, spec childSpec, o *out) error {
	if spec.Scale == nil || len(spec.Scale.IDs) == 0 {
		return errors.New("scale child without sample IDs")
	}
	var res scaleResult
	t0 := time.Now()
	s, err := filestore.Open(ctx, spec.Dir, &filestore.Options{NoSync: spec.System == "jobdir-file-nosync"})
	if err != nil {
		return err
	}
	defer s.Close()
	res.OpenMs = msSince(t0)

	const gets = 2000
	t0 = time.Now()
	for i := range gets {
		if _, err := s.Get(ctx, spec.Scale.IDs[i%len(spec.Scale.IDs)]); err != nil {
			return fmt.Errorf("get: %w", err)
		}
	}
	res.GetUs = float64(time.Since(t0).Microseconds()) / gets

	for range scaleOps {
		if _, _, err := s.Submit(ctx, benchSpec(0)); err != nil {
			return fmt.Errorf("submit: %w", err)
		}
	}
	req := jobstore.ClaimRequest{Worker: fmt.Sprintf("scale-%d", os.Getpid())}
	t0 = time.Now()
	for range scaleOps {
		j, err := s.Claim(ctx, req)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
	}
	res.ClaimCompleteMs = msSince(t0) / scaleOps

	const lists = 50
	t0 = time.Now()
	for range lists {
		p, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: 100})
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if len(p.Jobs) == 0 {
			return errors.New("list: no queued jobs left")
		}
	}
	res.ListQueuedMs = msSince(t0) / lists

	if res.MaxRSSMiB, err = peakRSS(); err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	o.println("result", string(b))
	return nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e6 }

// removeSeeded removes the seeded stores unless c.KeepScale.
func removeSeeded(c *config, stores []*seededStore) {
	if c.KeepScale {
		return
	}
	for _, st := range stores {
		c.discard(filepath.Clean(st.dir))
	}
}

// peakRSS returns this process's peak resident set size in MiB: VmHWM
// from /proc/self/status. (getrusage's maxrss would not do: Linux carries
// it across execve, so a child would report its parent's peak.)
func peakRSS() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v) // "12345 kB"
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM: %w", err)
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}
