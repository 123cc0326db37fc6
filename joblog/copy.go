package joblog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// DefaultPoll is how often Copy looks for new output when following and
// Options.Poll is zero.
const DefaultPoll = 100 * time.Millisecond

// Options says what Copy copies.
type Options struct {
	// Raw copies only the program's output: no notes (see the package
	// doc).
	Raw bool
	// Tail, when positive, starts with only the last Tail lines of what
	// there is to copy (after Raw's filtering).
	Tail int
	// Follow goes on copying what is appended to the log until the job is
	// in a terminal state and its log is copied to the end.
	Follow bool
	// Poll is how often Follow looks for new output in Logs that are not
	// a Watcher (a Watcher's wake-ups replace the poll). Zero means
	// DefaultPoll.
	Poll time.Duration
}

// Copy copies the log of job id, kept in the files of logDir, to w as
// CopyLogs does.
func Copy(ctx context.Context, w io.Writer, st jobstore.Client, logDir, id string, opts Options) (jobstore.Job, error) {
	return CopyLogs(ctx, w, st, Dir{Path: logDir}, id, opts)
}

// CopyLogs copies the log of job id, kept in logs, to w as opts says, and
// returns the job: as it was when the copy began, or, with opts.Follow, as
// it ended. A job without a log yet has an empty one. It returns the
// store's error for a job that does not exist (jobstore.ErrNotFound), an
// error wrapping ErrNotRegular for a log file that is not a regular file,
// and ctx's error when ctx ends while following.
func CopyLogs(ctx context.Context, w io.Writer, st jobstore.Client, logs Logs, id string, opts Options) (jobstore.Job, error) {
	j, err := st.Get(ctx, id)
	if err != nil {
		return jobstore.Job{}, err
	}
	sink := &switchWriter{w: w}
	var tail *TailWriter
	if opts.Tail > 0 {
		tail = &TailWriter{W: w, N: opts.Tail}
		sink.w = tail
	}
	var dst io.Writer = sink
	var raw *RawWriter
	if opts.Raw {
		raw = &RawWriter{W: sink}
		dst = raw
	}
	var off int64
	copyNew := func() error {
		n, err := logs.CopyFrom(ctx, dst, j.ID, off)
		off += n
		return err
	}
	// follow copies new output and what the filter held back at the end of
	// the log.
	follow := func() error {
		if err := copyNew(); err != nil {
			return err
		}
		if raw != nil {
			return raw.Sync()
		}
		return nil
	}
	flushRaw := func() error {
		if raw != nil {
			return raw.Flush()
		}
		return nil
	}

	if !opts.Follow {
		if err := copyNew(); err != nil {
			return j, err
		}
		if err := flushRaw(); err != nil {
			return j, err
		}
		if tail != nil {
			return j, tail.Flush()
		}
		return j, nil
	}

	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	// New output wakes the loop below: by the Logs' own wake-ups, which
	// must be set up before the first read, or else by a poll.
	var grew <-chan struct{}
	var tick <-chan time.Time
	if lw, ok := logs.(Watcher); ok {
		if grew, err = lw.WatchLog(waitCtx, j.ID); err != nil {
			return j, err
		}
	} else {
		poll := opts.Poll
		if poll <= 0 {
			poll = DefaultPoll
		}
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	done := make(chan error, 1)
	var final jobstore.Job
	go func() {
		var err error
		final, err = st.Wait(waitCtx, j.ID)
		done <- err
	}()
	if err := copyNew(); err != nil {
		return j, err
	}
	if tail != nil {
		if err := tail.Flush(); err != nil {
			return j, err
		}
		sink.w = w
	}
	if raw != nil {
		if err := raw.Sync(); err != nil {
			return j, err
		}
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				return j, err
			}
			// The worker writes the log before it records the outcome,
			// so the log is complete now.
			if err := copyNew(); err != nil {
				return final, err
			}
			return final, flushRaw()
		case <-grew:
			if err := follow(); err != nil {
				return j, err
			}
		case <-tick:
			if err := follow(); err != nil {
				return j, err
			}
		}
	}
}

// switchWriter writes to w, which may be changed between writes.
type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(p []byte) (int, error) { return s.w.Write(p) }

// copyFrom copies the log at path from offset off to w and returns how many
// bytes it read. A missing log is empty.
func copyFrom(w io.Writer, path string, off int64) (int64, error) {
	f, err := Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, fmt.Errorf("job log: %w", err)
	}
	n, err := io.Copy(w, f)
	if err != nil {
		return n, fmt.Errorf("job log: %w", err)
	}
	return n, nil
}
