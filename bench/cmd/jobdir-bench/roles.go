package main

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add()        { c.n.Add(1) }
func (c *atomicCounter) load() int64 { return c.n.Load() }

// jobdirRole returns the handler of a jobdir-only child role:
//   - cancel: print "started ID", block until the handler's ctx ends
//     (the parent cancels the job), print "stopped ID NANOS";
//   - victim: print "started ID" and block (the parent kills the process);
//   - rescuer: print "started ID NANOS" and succeed.
func jobdirRole(role string, o *out) runner.Handler {
	return runner.HandlerFunc(func(ctx context.Context, j jobstore.Job) (json.RawMessage, error) {
		switch role {
		case "cancel":
			o.println("started", j.ID)
			<-ctx.Done()
			o.println("stopped", j.ID, time.Now().UnixNano())
			return nil, context.Cause(ctx)
		case "victim":
			o.println("started", j.ID)
			<-ctx.Done()
			return nil, context.Cause(ctx)
		default:
			o.println("started", j.ID, time.Now().UnixNano())
			return nil, nil
		}
	})
}
