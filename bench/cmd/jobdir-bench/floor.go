package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/renameio/v2"
)

// floorRecord is the size of the file each floor write creates, about the
// size of a small job record.
const floorRecord = 300

// measureFloor measures the file system's floor for a durable record store:
// how many new files per second writers goroutines make durable, each by
// writing a temporary file, fsyncing it, renaming it into place and
// fsyncing the directory. It runs for d and returns files per second.
func measureFloor(ctx context.Context, c *config, writers int, d time.Duration) (float64, error) {
	root, err := os.MkdirTemp(c.Dir, "jobdir-bench-floor-")
	if err != nil {
		return 0, err
	}
	tmp := filepath.Join(root, "tmp")
	data := filepath.Join(root, "data")
	for _, p := range []string{tmp, data} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return 0, err
		}
	}
	defer c.discard(root)
	payload := make([]byte, floorRecord)
	for i := range payload {
		payload[i] = 'x'
	}
	var (
		count    atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			d, err := os.Open(data)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			defer d.Close()
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				name := filepath.Join(data, fmt.Sprintf("w%d-%08d", w, i))
				if err := durableCreate(d, name, tmp, payload); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(count.Load()) / time.Since(start).Seconds(), ctx.Err()
}

// durableCreate makes one file durable the way a careful record store
// does: renameio (write temp, fsync, rename), then fsync the directory d,
// which renameio leaves to its caller.
func durableCreate(d *os.File, name, tmp string, payload []byte) error {
	t, err := renameio.NewPendingFile(name, renameio.WithTempDir(tmp), renameio.WithPermissions(0o600))
	if err != nil {
		return err
	}
	defer t.Cleanup()
	if _, err := t.Write(payload); err != nil {
		return err
	}
	if err := t.CloseAtomicallyReplace(); err != nil {
		return err
	}
	return d.Sync()
}
