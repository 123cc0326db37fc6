package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// benchKind is the kind of every bench job.
const benchKind = "bench"

func fileSystem(name, label string, noSync, syncFS bool) *system {
	return &system{
		name:    name,
		label:   label,
		jobdir:  true,
		durable: !noSync,
		setup:   func(context.Context, string) error { return nil },
		open: func(ctx context.Context, dir string) (queue, error) {
			s, err := filestore.Open(ctx, dir, &filestore.Options{NoSync: noSync, SyncFS: syncFS})
			if err != nil {
				return nil, err
			}
			return &jobdirQueue{store: s, close: s.Close}, nil
		},
	}
}

// flowSystem is base (the durable file store, or pgstore) with a
// flow-control setting on the queue of the bench's jobs (the default
// queue), made by set at setup, to measure what the setting costs a
// work-off beside base. With partitions, the jobs are spread over that
// many partitions, in turn.
func flowSystem(base *system, name, label string, partitions int, set func(context.Context, jobstore.QueueLimiter) error) *system {
	sys := *base
	sys.name, sys.label, sys.optIn = name, label, true
	setup, open := base.setup, base.open
	sys.setup = func(ctx context.Context, dir string) error {
		if err := setup(ctx, dir); err != nil {
			return err
		}
		q, err := open(ctx, dir)
		if err != nil {
			return err
		}
		ql, ok := q.(*jobdirQueue).store.(jobstore.QueueLimiter)
		if !ok {
			_ = q.Close()
			return fmt.Errorf("%s keeps no limits", base.name)
		}
		if err := set(ctx, ql); err != nil {
			_ = q.Close()
			return err
		}
		return q.Close()
	}
	sys.open = func(ctx context.Context, dir string) (queue, error) {
		q, err := open(ctx, dir)
		if err != nil {
			return nil, err
		}
		q.(*jobdirQueue).partitions = partitions
		return q, nil
	}
	return &sys
}

// flowSystems are the flow-control variants of jobdir-file and jobdir-pg.
// None of their settings binds in the work-off (100 workers in each of 2
// processes): a limit of 200, a per-partition limit of 1 over 1,000
// partitions (two running jobs of one partition are rare), and a rate of
// 100 starts a millisecond. They measure the bookkeeping a setting adds to
// each claim, and run only when -systems names them.
func flowSystems() []*system {
	var out []*system
	for _, base := range []*system{fileSystem("jobdir-file", "jobdir file (durable)", false, false), pgstoreSystem()} {
		out = append(out,
			flowSystem(base, base.name+"-limit", base.label+", limit 200", 0, func(ctx context.Context, s jobstore.QueueLimiter) error {
				return s.SetQueueLimit(ctx, jobstore.DefaultQueue, 200)
			}),
			flowSystem(base, base.name+"-partition", base.label+", 1 per partition", 1000, func(ctx context.Context, s jobstore.QueueLimiter) error {
				return s.SetPartitionLimit(ctx, jobstore.DefaultQueue, 1)
			}),
			flowSystem(base, base.name+"-rate", base.label+", rate 100/1ms", 0, func(ctx context.Context, s jobstore.QueueLimiter) error {
				return s.SetQueueRate(ctx, jobstore.DefaultQueue, jobstore.Rate{N: 100, Per: time.Millisecond})
			}),
		)
	}
	return out
}

// memStores holds the memstore of each dir, so that every open in this
// process of one dir shares one store, as processes share a directory.
var memStores = struct {
	sync.Mutex
	m map[string]*memEntry
}{m: map[string]*memEntry{}}

type memEntry struct {
	store *memstore.Store
	refs  int
}

func memSystem() *system {
	return &system{
		name:      "memstore",
		label:     "jobdir memstore",
		jobdir:    true,
		inProcess: true,
		setup:     func(context.Context, string) error { return nil },
		open: func(ctx context.Context, dir string) (queue, error) {
			memStores.Lock()
			defer memStores.Unlock()
			e := memStores.m[dir]
			if e == nil {
				e = &memEntry{store: memstore.New(nil)}
				memStores.m[dir] = e
			}
			e.refs++
			var once sync.Once
			return &jobdirQueue{store: e.store, close: func() error {
				once.Do(func() {
					memStores.Lock()
					defer memStores.Unlock()
					if e.refs--; e.refs == 0 {
						delete(memStores.m, dir)
						e.store.Close()
					}
				})
				return nil
			}}, nil
		},
	}
}

// jobdirQueue drives a jobstore.Store through the public API and the
// runner, as an application would.
type jobdirQueue struct {
	store jobstore.Store
	close func() error
	// partitions, when set, spreads the jobs this handle submits over that
	// many partitions, in turn (next counts them).
	partitions int
	next       atomic.Int64
}

// spec returns the spec of a job carrying t, in the next partition if q
// spreads its jobs over partitions.
func (q *jobdirQueue) spec(t int64) jobstore.Spec {
	sp := benchSpec(t)
	if q.partitions > 0 {
		sp.Partition = "p" + strconv.FormatInt(q.next.Add(1)%int64(q.partitions), 10)
	}
	return sp
}

func benchSpec(t int64) jobstore.Spec {
	return jobstore.Spec{Kind: benchKind, Payload: json.RawMessage(`{"t":` + strconv.FormatInt(t, 10) + `}`)}
}

func (q *jobdirQueue) Insert(ctx context.Context, t int64) error {
	_, _, err := q.store.Submit(ctx, q.spec(t))
	return err
}

func (q *jobdirQueue) InsertBatch(ctx context.Context, n int) error {
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		specs[i] = q.spec(0)
	}
	_, err := q.store.SubmitBatch(ctx, specs)
	return err
}

func (q *jobdirQueue) Pending(ctx context.Context) (bool, error) {
	p, err := q.store.List(ctx, jobstore.ListOptions{
		States: []jobstore.State{jobstore.StateQueued, jobstore.StateRunning},
		Limit:  1,
	})
	if err != nil {
		return false, err
	}
	return len(p.Jobs) > 0, nil
}

// payloadTime returns the submit time a bench job carries.
func payloadTime(j jobstore.Job) int64 {
	var p struct {
		T int64 `json:"t"`
	}
	if len(j.Payload) > 0 {
		_ = json.Unmarshal(j.Payload, &p) // a job without a time is load only
	}
	return p.T
}

func (q *jobdirQueue) Work(ctx context.Context, workers int, h handler, ready func()) error {
	return q.run(ctx, workers, runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		return nil, h(ctx, payloadTime(j))
	}), ready)
}

// run runs a runner with h for benchKind until ctx ends.
func (q *jobdirQueue) run(ctx context.Context, workers int, h runner.Handler, ready func()) error {
	r := runner.New(q.store, &runner.Options{
		Concurrency:   workers,
		ShutdownGrace: 10 * time.Second,
	})
	r.Handle(benchKind, h)
	ready()
	if err := r.Run(ctx); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

func (q *jobdirQueue) Close() error { return q.close() }
