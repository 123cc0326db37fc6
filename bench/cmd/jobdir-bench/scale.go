package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// finishedShare is the part of a scaling store's jobs that are finished.
const finishedShare = 0.9

// scaleSpec configures a scale child.
type scaleSpec struct {
	// IDs are sample job IDs to Get.
	IDs []string `json:"ids"`
	// Ops is the number of claim+complete operations to time.
	Ops int `json:"ops"`
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

// seedScale builds a filestore of n jobs in dir without fsync (the format
// is the same; only the build is faster), with finishedShare of them
// succeeded, and returns sample IDs of both kinds.
func seedScale(ctx context.Context, c *config, n int) (*seededStore, error) {
	dir := c.scratch(fmt.Sprintf("jobdir-bench-scale-%d", n))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	s, err := filestore.Open(ctx, dir, &filestore.Options{NoSync: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	q := &jobdirQueue{store: s, close: s.Close}
	if err := seed(ctx, q, n); err != nil {
		return nil, fmt.Errorf("seed %d: %w", n, err)
	}
	finish := int(float64(n) * finishedShare)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		left = make(chan struct{}, finish)
	)
	for range finish {
		left <- struct{}{}
	}
	close(left)
	for w := range 8 {
		wg.Go(func() {
			req := jobstore.ClaimRequest{Worker: fmt.Sprintf("seed-%d", w)}
			for range left {
				j, err := s.Claim(ctx, req)
				if err == nil {
					_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	// Sample IDs: page through the store once (not timed).
	var all []string
	opts := jobstore.ListOptions{Limit: jobstore.MaxListLimit}
	for {
		p, err := s.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, j := range p.Jobs {
			all = append(all, j.ID)
		}
		if p.Next == "" {
			break
		}
		opts.Cursor = p.Next
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return &seededStore{dir: dir, ids: all[:min(len(all), 500)], n: n}, nil
}

// runScale times open, get, claim+complete and list of queued jobs on the
// seeded store in a fresh child process, so that open time and peak RSS
// are the child's alone.
func runScale(ctx context.Context, c *config, r *results, s *system, st *seededStore) error {
	// Every round of every file-store system claims from the same queued
	// jobs; leave at least a third of them queued for the list figure.
	users := 0
	for _, sys := range c.Systems {
		if sys.jobdir && !sys.inProcess {
			users++
		}
	}
	queued := int(float64(st.n) * (1 - finishedShare))
	ops := min(200, queued*2/(3*c.Rounds*max(users, 1)))
	k, err := startChild(ctx, childSpec{Role: "scale", System: s.name, Dir: st.dir, Scale: &scaleSpec{IDs: st.ids, Ops: max(ops, 1)}})
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

	req := jobstore.ClaimRequest{Worker: fmt.Sprintf("scale-%d", os.Getpid())}
	t0 = time.Now()
	for range spec.Scale.Ops {
		j, err := s.Claim(ctx, req)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if _, err := s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
	}
	res.ClaimCompleteMs = msSince(t0) / float64(spec.Scale.Ops)

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

	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	res.MaxRSSMiB = float64(ru.Maxrss) / 1024 // Linux reports KiB
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	o.println("result", string(b))
	return nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e6 }

// scaleDirs removes the seeded stores.
func removeSeeded(stores []*seededStore) {
	for _, st := range stores {
		os.RemoveAll(filepath.Clean(st.dir))
	}
}
