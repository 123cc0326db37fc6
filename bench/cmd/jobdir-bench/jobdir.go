package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
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
}

func benchSpec(t int64) jobstore.Spec {
	return jobstore.Spec{Kind: benchKind, Payload: json.RawMessage(`{"t":` + strconv.FormatInt(t, 10) + `}`)}
}

func (q *jobdirQueue) Insert(ctx context.Context, t int64) error {
	_, _, err := q.store.Submit(ctx, benchSpec(t))
	return err
}

func (q *jobdirQueue) InsertBatch(ctx context.Context, n int) error {
	specs := make([]jobstore.Spec, n)
	for i := range specs {
		specs[i] = benchSpec(0)
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
