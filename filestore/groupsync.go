package filestore

import "sync"

// groupSync shares directory fsyncs between concurrent callers (group
// commit). A caller needs an fsync that starts after its own change to the
// directory; while one fsync runs, every caller that arrives waits for the
// next one, which a single caller then makes for all of them. One caller
// alone pays exactly one fsync, as before.
type groupSync struct {
	mu   sync.Mutex
	cond *sync.Cond
	// started and completed count the fsyncs begun and finished; running
	// says one is in flight.
	started, completed uint64
	running            bool
	// failed is the latest generation whose fsync failed, and err its
	// error. A caller covered by a generation at or before a failure gets
	// the error: after a failed fsync nothing it covered is known durable.
	failed uint64
	err    error
}

func newGroupSync() *groupSync {
	g := &groupSync{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// sync returns once an fsync (made by fsync) that started after the call
// has finished, with its error.
func (g *groupSync) sync(fsync func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := g.started + 1
	for g.completed < want {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := fsync()
		g.mu.Lock()
		g.running = false
		g.completed = gen
		if err != nil {
			g.failed, g.err = gen, err
		}
		g.cond.Broadcast()
	}
	if g.failed >= want && g.err != nil {
		return g.err
	}
	return nil
}
