package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
)

// Bounds of the chunks a log is written in.
const (
	// LogChunk is the most bytes of a log an Appender holds before it
	// writes them to the database.
	LogChunk = 64 << 10
	// LogFlushInterval is the longest an Appender holds bytes before it
	// writes them, so that readers on other machines see output while the
	// job runs.
	LogFlushInterval = 200 * time.Millisecond
	// logWriteTimeout bounds one write of a chunk.
	logWriteTimeout = 30 * time.Second
)

// Logs keeps the logs of exec jobs in the store's schema (the logs table),
// so that every machine reads them while the job runs: it implements
// joblog.Logs. A log is written in chunks (LogChunk, LogFlushInterval) and
// deleted with its job. It implements joblog.Watcher too: a chunk written
// to the log of a job that someone follows or waits for notifies the
// schema's log channel, which wakes followers in every process. It is safe
// for concurrent use.
type Logs struct{ s *Store }

var (
	_ joblog.Logs    = (*Logs)(nil)
	_ joblog.Watcher = (*Logs)(nil)
)

// Logs returns the store's job logs.
func (s *Store) Logs() *Logs { return &Logs{s: s} }

// Append opens the log of job id for appending. Its Write sends a chunk
// to the database when LogChunk bytes are held, and a background write
// sends what is held LogFlushInterval after the first byte of it. Writes
// to the log of a job that does not exist (or was pruned) fail.
func (l *Logs) Append(ctx context.Context, id string) (joblog.Appender, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return nil, fmt.Errorf("pgstore: log: %w", err)
	}
	if err := l.s.check(ctx, "log"); err != nil {
		return nil, err
	}
	end, last, err := l.end(ctx, id)
	if err != nil {
		return nil, l.s.fail(ctx, "log", err)
	}
	return &appender{l: l, ctx: context.WithoutCancel(ctx), id: id, size: end, off: end, lineStart: end == 0 || last == '\n'}, nil
}

// end returns the size of job id's log and its last byte.
func (l *Logs) end(ctx context.Context, id string) (int64, byte, error) {
	var (
		end  int64
		last int32
	)
	err := l.s.pool.QueryRow(ctx, `SELECT "offset" + length(data), get_byte(data, length(data) - 1)
		FROM `+l.s.q.schema+`.logs WHERE id = $1 ORDER BY "offset" DESC LIMIT 1`, id).Scan(&end, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, nil
	}
	return end, byte(last), err
}

// CopyFrom copies the log of job id from byte off to w.
func (l *Logs) CopyFrom(ctx context.Context, w io.Writer, id string, off int64) (int64, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return 0, fmt.Errorf("pgstore: log: %w", err)
	}
	if err := l.s.check(ctx, "log"); err != nil {
		return 0, err
	}
	// The chunk that holds byte off, and every later one, by the index.
	rows, err := l.s.pool.Query(ctx, `SELECT "offset", data FROM `+l.s.q.schema+`.logs
		WHERE id = $1 AND "offset" >= coalesce((SELECT max("offset") FROM `+l.s.q.schema+`.logs WHERE id = $1 AND "offset" <= $2), 0)
		ORDER BY "offset"`, id, off)
	if err != nil {
		return 0, l.s.fail(ctx, "log", err)
	}
	defer rows.Close()
	var n int64
	pos := off
	for rows.Next() {
		var (
			at   int64
			data []byte
		)
		if err := rows.Scan(&at, &data); err != nil {
			return n, l.s.fail(ctx, "log", err)
		}
		if at+int64(len(data)) <= pos {
			continue
		}
		if at > pos {
			return n, fmt.Errorf("pgstore: log of job %s: %w: bytes %d to %d are missing", id, jobstore.ErrCorrupt, pos, at)
		}
		k, err := w.Write(data[pos-at:])
		n += int64(k)
		pos += int64(k)
		if err != nil {
			return n, err
		}
	}
	if err := rows.Err(); err != nil {
		return n, l.s.fail(ctx, "log", err)
	}
	return n, nil
}

// Size returns the size of the log of job id.
func (l *Logs) Size(ctx context.Context, id string) (int64, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return 0, fmt.Errorf("pgstore: log: %w", err)
	}
	if err := l.s.check(ctx, "log"); err != nil {
		return 0, err
	}
	end, _, err := l.end(ctx, id)
	if err != nil {
		return 0, l.s.fail(ctx, "log", err)
	}
	return end, nil
}

// WatchLog returns a channel that receives a value after each chunk
// written to the log of job id in any process, until ctx ends: the
// notification of the schema's log channel that the chunk's statement
// sends once WatchLog has marked the job as waited for. While the
// store's listener connection is down, the channel receives a value every
// PollInterval instead, and once when it is back. Values coalesce. Every
// chunk that a read of the log made after WatchLog returns does not see
// wakes the channel. Returns an error wrapping jobstore.ErrNotFound if the
// job does not exist.
func (l *Logs) WatchLog(ctx context.Context, id string) (<-chan struct{}, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return nil, fmt.Errorf("pgstore: watch log: %w", err)
	}
	s := l.s
	if err := s.check(ctx, "watch log"); err != nil {
		return nil, err
	}
	key := logWatchKey(id)
	w, release := s.watch(key)
	// The mark takes the row lock that a chunk's statement takes in share
	// mode: a chunk written meanwhile either commits before the mark (and
	// the caller's read sees it) or sees the mark and notifies.
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.q.schema+`.jobs SET waited = true WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("pgstore: watch log: job %s: %w", id, jobstore.ErrNotFound)
	} else if err != nil {
		err = s.fail(ctx, "watch log", err)
	}
	if err != nil {
		release()
		return nil, err
	}
	ch := make(chan struct{}, 1)
	go func() {
		for {
			err := s.sleep(ctx, "watch log", w, nil)
			release()
			if err != nil {
				return
			}
			// Watch again before the caller reads: a chunk after this
			// wakes the next round.
			w, release = s.watch(key)
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, nil
}

// appender writes one job's log in chunks.
type appender struct {
	l         *Logs
	ctx       context.Context // not canceled: the last notes come after the job's ctx ends
	id        string
	size      int64
	lineStart bool

	mu    sync.Mutex
	buf   []byte
	off   int64 // where buf's first byte goes
	timer *time.Timer
	err   error // the first failed write: nothing more is written
}

func (a *appender) Size() int64       { return a.size }
func (a *appender) AtLineStart() bool { return a.lineStart }

// Write holds p, and writes a chunk when LogChunk bytes are held.
func (a *appender) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return 0, a.err
	}
	a.buf = append(a.buf, p...)
	if len(a.buf) >= LogChunk {
		if err := a.flushLocked(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if a.timer == nil && len(a.buf) > 0 {
		a.timer = time.AfterFunc(LogFlushInterval, a.flushLater)
	}
	return len(p), nil
}

func (a *appender) flushLater() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = nil
	_ = a.flushLocked()
}

// Close writes what is held.
func (a *appender) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.flushLocked()
	if a.err == nil {
		a.err = errors.New("pgstore: log closed")
	}
	return err
}

// flushLocked writes the bytes held as one chunk. The caller holds a.mu.
func (a *appender) flushLocked() error {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if a.err != nil || len(a.buf) == 0 {
		return a.err
	}
	ctx, cancel := context.WithTimeout(a.ctx, logWriteTimeout)
	defer cancel()
	for try := 0; ; try++ {
		_, err := a.l.s.pool.Exec(ctx, a.l.s.q.appendLog, a.id, a.off, a.buf, a.l.s.q.chanLog)
		var pe *pgconn.PgError
		if err != nil && errors.As(err, &pe) && pe.Code == "23505" && try < 3 {
			// Another writer (an attempt presumed dead) wrote there:
			// go on after it.
			end, _, rerr := a.l.end(ctx, a.id)
			if rerr == nil {
				a.off = end
				continue
			}
		}
		if err != nil {
			if errors.As(err, &pe) && pe.Code == "23503" {
				err = fmt.Errorf("job %s: %w", a.id, jobstore.ErrNotFound)
			}
			a.err = fmt.Errorf("pgstore: log: %w", err)
			return a.err
		}
		a.off += int64(len(a.buf))
		a.buf = a.buf[:0]
		return nil
	}
}
