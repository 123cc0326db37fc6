package torture

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// FileBackend returns the Backend of filestore with the options a torture
// run uses: durable writes (the default; processes with an odd PID make
// them with Options.SyncFS, so that both ways share one store), and a short
// backoff after a dead worker's attempt (50ms times the attempt), so that
// the time a dead worker's job waits measures recovery rather than the
// backoff. It can inject file-operation faults (Options.Faults).
func FileBackend() Backend {
	return Backend{
		Open: func(ctx context.Context, dir string) (jobstore.Store, error) {
			o := fileOptions(nil)
			o.SyncFS = os.Getpid()%2 == 1
			return filestore.Open(ctx, dir, o)
		},
		Fsck: fileFsck,
		OpenFaulty: func(ctx context.Context, dir string, inj *fsfault.Injector) (jobstore.Store, error) {
			o := fileOptions(nil)
			o.SyncFS = os.Getpid()%2 == 1
			o.Faults = inj.Func()
			return filestore.Open(ctx, dir, o)
		},
	}
}

func fileOptions(logger *slog.Logger) *filestore.Options {
	return &filestore.Options{
		Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * 50 * time.Millisecond },
		Logger:  logger,
	}
}

// fileFsck opens the store (which recovers dead workers' jobs, and says so
// in its log) and makes the repairs of what crashes left (Repair, which a
// Store makes in the background soon after Open), then runs a read-only
// Fsck, which must find nothing.
func fileFsck(ctx context.Context, dir string) (FsckResult, error) {
	var res FsckResult
	h := &collector{}
	st, err := filestore.Open(ctx, dir, fileOptions(slog.New(h)))
	if err != nil {
		return res, err
	}
	res.RepairedAtOpen = h.messages("filestore: open: ")
	rep, err := st.Repair(ctx)
	if err != nil {
		_ = st.Close()
		return res, err
	}
	for _, p := range rep.Problems {
		res.RepairedAtOpen = append(res.RepairedAtOpen, p.String())
	}
	rep, err = st.Fsck(ctx, false)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, err
	}
	for _, p := range rep.Problems {
		res.Problems = append(res.Problems, p.String())
	}
	return res, nil
}

// collector is a slog.Handler that keeps the messages it is given.
type collector struct {
	mu   sync.Mutex
	msgs []string
}

func (c *collector) Enabled(context.Context, slog.Level) bool { return true }
func (c *collector) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *collector) WithGroup(string) slog.Handler            { return c }
func (c *collector) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, r.Message)
	return nil
}

func (c *collector) messages(prefix string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if strings.HasPrefix(m, prefix) {
			out = append(out, strings.TrimPrefix(m, prefix))
		}
	}
	return out
}
