package main

import (
	"context"
	"fmt"
	"strings"
)

// handler is the work a system's workers do for one job. t is the submit
// time (Unix nanoseconds) the job carries, or zero for a job that only adds
// load.
type handler func(ctx context.Context, t int64) error

// queue is one process's handle on a job system under test. Every method is
// safe for concurrent use.
type queue interface {
	// Insert submits one job carrying t, in its own call (and, for the SQL
	// systems, its own transaction).
	Insert(ctx context.Context, t int64) error
	// InsertBatch submits n jobs in one call: one transaction for the SQL
	// systems, the store's batch submit for jobdir when it has one.
	InsertBatch(ctx context.Context, n int) error
	// Pending reports whether any job is still queued or running.
	Pending(ctx context.Context) (bool, error)
	// Work runs workers concurrent handlers until ctx ends, calling ready
	// once they are started, then shuts the workers down and returns.
	Work(ctx context.Context, workers int, h handler, ready func()) error
	// Close releases the handle.
	Close() error
}

// system is one contender: a job system with one configuration.
type system struct {
	// name is the short name used in flags, file names and JSON.
	name string
	// label is the column heading in the table.
	label string
	// jobdir marks jobdir's own stores (the others are the peers).
	jobdir bool
	// durable marks the configurations whose acknowledged writes survive a
	// power cut (fsync per commit).
	durable bool
	// inProcess marks a store that cannot be shared by processes
	// (memstore): multi-process workloads skip it.
	inProcess bool
	// setup prepares an empty store in dir (schema, migrations).
	setup func(ctx context.Context, dir string) error
	// teardown, if set, removes what setup made outside dir (a database
	// schema) once the store is done with.
	teardown func(ctx context.Context, dir string) error
	// pg marks the systems on PostgreSQL; the file-store scaling figures
	// skip them.
	pg bool
	// open returns a handle on the store in dir. For an in-process store
	// every open of one dir returns the same store.
	open func(ctx context.Context, dir string) (queue, error)
	// rescueAfter describes how the system gets a dead worker's job back,
	// for the table (empty: measured).
	rescueAfter string
	// optIn marks a variant that runs only when -systems names it.
	optIn bool
}

// allSystems lists every contender in table order.
func allSystems() []*system {
	return append([]*system{
		fileSystem("jobdir-file", "jobdir file (durable)", false, false),
		fileSystem(syncFSSystem, "jobdir file (durable, SyncFS)", false, true),
		fileSystem("jobdir-file-nosync", "jobdir file (no fsync)", true, false),
		memSystem(),
		riverSystem("river-full", "River SQLite FULL", "FULL"),
		riverSystem("river-normal", "River SQLite NORMAL", "NORMAL"),
		goqiteSystem("goqite-full", "goqite SQLite FULL", "FULL"),
		goqiteSystem("goqite-normal", "goqite SQLite NORMAL", "NORMAL"),
		pgstoreSystem(),
		riverPGSystem(riverPGSystemName, "River PG (defaults)", false),
		riverPGSystem("river-pg-tuned", "River PG (tuned fetch)", true),
	}, flowSystems()...)
}

// findSystem returns the system called name.
func findSystem(name string) (*system, error) {
	for _, s := range allSystems() {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown system %q", name)
}

// selectSystems returns the systems named in the comma-separated list (all
// of them but the opt-in variants for an empty list).
func selectSystems(list string) ([]*system, error) {
	all := allSystems()
	if strings.TrimSpace(list) == "" {
		var out []*system
		for _, s := range all {
			if !s.optIn {
				out = append(out, s)
			}
		}
		return out, nil
	}
	var out []*system
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		s, err := findSystem(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
