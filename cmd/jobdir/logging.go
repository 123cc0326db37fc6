package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

// Log formats of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

// lineWriter writes whole lines to w, one writer at a time, so that the
// worker's lines and the warnings of the store never interleave.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) line(s string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	fmt.Fprintln(lw.w, s)
}

// stderrLines returns the line writer of the app's stderr.
func (a *app) stderrLines() *lineWriter {
	if a.errLines == nil {
		a.errLines = &lineWriter{w: a.stderr}
	}
	return a.errLines
}

// logger returns a logger that writes records of level or above to stderr:
// with --log-format json, as JSON objects, one a line; else as the lines a
// worker prints, "15:04:05  warning: what happened (key=value, ...)".
func (a *app) logger(level slog.Level) *slog.Logger {
	if a.logFormat == logJSON {
		return slog.New(slog.NewJSONHandler(&lineSink{a.stderrLines()}, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(&humanHandler{out: a.stderrLines(), level: level})
}

// lineSink passes the JSON handler's writes, each one record and its
// newline, to a lineWriter.
type lineSink struct{ lw *lineWriter }

func (s *lineSink) Write(p []byte) (int, error) {
	s.lw.line(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// humanHandler is a slog.Handler that writes a record as one line for
// people, in the worker's format.
type humanHandler struct {
	out   *lineWriter
	level slog.Level
	attrs []slog.Attr
	group string
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Local().Format(time.TimeOnly))
	b.WriteString("  ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(plainMessage(r.Message))
	var kv []string
	add := func(a slog.Attr) bool {
		a.Value = a.Value.Resolve()
		if a.Key == "" || a.Value.String() == "" {
			return true // an empty ID or error says nothing
		}
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		kv = append(kv, key+"="+a.Value.String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if len(kv) > 0 {
		b.WriteString(" (" + strings.Join(kv, ", ") + ")")
	}
	h.out.line(b.String())
	return nil
}

func (h *humanHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), attrs...)
	return &c
}

func (h *humanHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

// packagePrefixes are the names of this module's packages, which start
// the messages of their logs and errors.
var packagePrefixes = []string{"filestore: ", "pgstore: ", "memstore: ", "jobstore: ", "runner: ", "execjob: ", "joblog: ", "httpapi: "}

// plainMessage drops the package name that starts a library's message:
// people are not told which Go package spoke.
func plainMessage(s string) string {
	for _, p := range packagePrefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest
		}
	}
	return s
}

// plural is n and the noun, with an s when n is not 1: "1 running job",
// "2 running jobs".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// logEvent writes ev to log as a record for machines: its type as the
// message, and the job's ID, kind, state and attempt as attributes.
func logEvent(log *slog.Logger, ev runner.Event) {
	j := ev.Job
	attrs := []any{slog.Time("at", ev.Time)}
	if j.ID != "" {
		attrs = append(attrs, slog.String("id", j.ID), slog.String("kind", j.Kind), slog.String("state", string(j.State)),
			slog.Int("attempt", j.Attempt), slog.Int("max_attempts", j.MaxAttempts))
	}
	level := slog.LevelInfo
	switch ev.Type {
	case runner.EventFinished:
		attrs = append(attrs, slog.Float64("run_seconds", ev.RunDuration.Seconds()))
		if j.State == jobstore.StateQueued {
			attrs = append(attrs, slog.Time("retry_at", j.RunAt), slog.Bool("interrupted", ev.Outcome.Interrupted))
		}
	case runner.EventDropped, runner.EventStoreError:
		level = slog.LevelWarn
	case runner.EventPruned:
		attrs = append(attrs, slog.Int("pruned", ev.Pruned))
	case runner.EventTickFired, runner.EventTicksSkipped:
		attrs = append(attrs, slog.String("schedule", ev.Schedule), slog.Time("tick", ev.Tick))
		if ev.Skipped > 0 {
			attrs = append(attrs, slog.Int("skipped", ev.Skipped))
		}
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	log.Log(context.Background(), level, eventName(ev.Type), attrs...)
}

// eventName is the message of a logged event.
func eventName(t runner.EventType) string {
	switch t {
	case runner.EventClaimed:
		return "started"
	case runner.EventFinished:
		return "finished"
	case runner.EventDropped:
		return "outcome not recorded"
	case runner.EventStoreError:
		return "store error"
	case runner.EventTickFired:
		return "tick fired"
	case runner.EventTicksSkipped:
		return "ticks skipped"
	case runner.EventPruned:
		return "pruned"
	}
	return fmt.Sprint(t)
}
