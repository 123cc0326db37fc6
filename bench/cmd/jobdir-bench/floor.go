package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
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

// flushFile is the size of the file measureIdleFlush appends to, written
// with zeros and fsynced first, as a submission journal is.
const flushFile = 1 << 20

// measureIdleFlush measures the least a durable submit that appends to a
// journal waits for, at the pace of the latency figures: n times, a
// record written into a file already allocated and written, then one
// fdatasync(2), each after the idle gap that follows the latency sample
// of the same index (sampleGap). An idle disk (and its host) can take
// several times longer to flush than a busy one, so this, not the time
// of one durable create in a row, is the floor of the idle latency
// figures. It returns the times in milliseconds.
func measureIdleFlush(ctx context.Context, c *config, n int) ([]float64, error) {
	root, err := os.MkdirTemp(c.Dir, "jobdir-bench-flush-")
	if err != nil {
		return nil, err
	}
	defer c.discard(root)
	f, err := os.Create(filepath.Join(root, "journal"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, flushFile)); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	payload := make([]byte, floorRecord)
	for i := range payload {
		payload[i] = 'x'
	}
	var ms []float64
	var off int64
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(sampleGap(i))
		if off+floorRecord > flushFile {
			off = 0
		}
		start := time.Now()
		if _, err := f.WriteAt(payload, off); err != nil {
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("fdatasync: %w", err)
		}
		ms = append(ms, float64(time.Since(start).Nanoseconds())/1e6)
		off += floorRecord
	}
	return ms, nil
}

// measureIdleWake measures the other part of the floor of the idle latency
// figures: how long a process that waits on inotify (through fsnotify, as
// the file store's watcher does) takes to see a file that this process
// creates, at the pace of the latency figures (sampleGap). A job that
// another process starts must be seen there first, so an idle submit to
// start takes this on top of the submit's flush (measureIdleFlush), before
// any claim. It returns the times in milliseconds.
func measureIdleWake(ctx context.Context, c *config, n int) ([]float64, error) {
	root, err := os.MkdirTemp(c.Dir, "jobdir-bench-wake-")
	if err != nil {
		return nil, err
	}
	defer c.discard(root)
	k, err := startChild(ctx, childSpec{Role: "wake", Dir: root})
	if err != nil {
		return nil, err
	}
	defer k.kill()
	if _, err := k.expect(ctx, "ready", time.Minute); err != nil {
		return nil, err
	}
	var ms []float64
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(sampleGap(i))
		// The name carries the time, as a latency sample's payload does.
		f, err := os.Create(filepath.Join(root, strconv.FormatInt(time.Now().UnixNano(), 10)))
		if err != nil {
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		fields, err := k.expect(ctx, "woke", latencySampleWait)
		if err != nil {
			return nil, err
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("wake child: %q: %w", fields[0], err)
		}
		ms = append(ms, float64(ns)/1e6)
	}
	return ms, k.stop(time.Minute)
}

// runWakeChild is the child of measureIdleWake: it watches spec.Dir and
// prints "woke NANOS" for each file created there, the time from the one
// its name carries to the event's arrival, until ctx ends.
func runWakeChild(ctx context.Context, spec childSpec, o *out) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(spec.Dir); err != nil {
		return err
	}
	o.println("ready")
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			now := time.Now().UnixNano()
			if !ok {
				return errors.New("watcher closed")
			}
			if !ev.Has(fsnotify.Create) {
				continue
			}
			t, err := strconv.ParseInt(filepath.Base(ev.Name), 10, 64)
			if err != nil {
				continue
			}
			o.println("woke", now-t)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watcher closed")
			}
			return fmt.Errorf("watcher: %w", err)
		}
	}
}
