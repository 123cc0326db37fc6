package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
)

// routeLog serves the log of an exec job.
const routeLog = "GET /v1/jobs/{id}/log"

// StateHeader is the header of the log route that holds the job's state:
// when the answer begins, and, as a trailer of a followed log, when the
// job ended.
const StateHeader = "Jobdir-State"

// ErrorTrailer is the trailer of the log route that says why a log stopped
// being copied after its first bytes were sent, when it did.
const ErrorTrailer = "Jobdir-Error"

// handleLog answers with the log of a job as text: all of it, or only the
// program's output (raw=1), or the last lines (tail=N); with follow=1 it
// goes on sending what is appended until the job is in a terminal state,
// and ends with the job's final state in the trailer StateHeader.
func (s *Server) handleLog(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: query: %s", jobstore.ErrInvalidInput, err.Error()), http.StatusBadRequest, CodeInvalidInput)
		return
	}
	opts, err := parseLogQuery(q)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	job, err := s.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	if s.logs == nil {
		s.writeError(w, r, newError(http.StatusNotFound, CodeNotFound, "this server keeps no job logs"))
		return
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	if opts.Follow {
		// A followed log lasts as long as its job: neither the
		// connection's read deadline nor its write deadline may cut it
		// (each write sets its own), but the server's shutdown ends it.
		_ = rc.SetReadDeadline(time.Time{})
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		if drain, ok := r.Context().Value(drainKey{}).(context.Context); ok {
			stop := context.AfterFunc(drain, cancel)
			defer stop()
		}
		w.Header().Set("Trailer", StateHeader+", "+ErrorTrailer)
	}
	w.Header().Set(StateHeader, string(job.State))
	lw := &logWriter{w: w, rc: rc}
	if opts.Follow {
		// Answer at once, so that the client knows the log is coming
		// even if there is no output yet; refuse a bad log first.
		if dir, ok := s.logs.(joblog.Dir); ok {
			if path, err := joblog.Path(dir.Path, job.ID); err == nil {
				if f, err := joblog.Open(path); err == nil {
					f.Close()
				} else if errors.Is(err, joblog.ErrNotRegular) {
					s.writeError(w, r, newError(http.StatusInternalServerError, CodeInternal, "%s", err.Error()))
					return
				}
			}
		}
		lw.start()
		_ = rc.Flush()
	}
	final, err := joblog.CopyLogs(ctx, lw, s.store, s.logs, job.ID, opts)
	if err != nil && !lw.started {
		if errors.Is(err, joblog.ErrNotRegular) {
			s.writeError(w, r, newError(http.StatusInternalServerError, CodeInternal, "%s", err.Error()))
			return
		}
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	lw.start()
	if opts.Follow {
		if err != nil {
			w.Header().Set(ErrorTrailer, err.Error())
			return
		}
		w.Header().Set(StateHeader, string(final.State))
	}
}

// logWriter sends a log as it is copied: the headers before the first
// bytes, then each write flushed to the client at once.
type logWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (l *logWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.start()
	_ = l.rc.SetWriteDeadline(time.Now().Add(writeSlack))
	n, err := l.w.Write(p)
	if err == nil {
		err = l.rc.Flush()
	}
	return n, err
}

// parseLogQuery reads the options of the log route: raw, tail and follow.
func parseLogQuery(q url.Values) (joblog.Options, error) {
	var opts joblog.Options
	for k := range q {
		if k != "raw" && k != "tail" && k != "follow" {
			return opts, fmt.Errorf("%w: unknown query parameter %q (want raw, tail or follow)", jobstore.ErrInvalidInput, truncate(k, 64))
		}
	}
	var err error
	if opts.Raw, err = boolParam(q, "raw"); err != nil {
		return opts, err
	}
	if opts.Follow, err = boolParam(q, "follow"); err != nil {
		return opts, err
	}
	v, err := single(q, "tail")
	if err != nil {
		return opts, err
	}
	if v != "" {
		if opts.Tail, err = strconv.Atoi(v); err != nil || opts.Tail < 0 {
			return opts, fmt.Errorf("%w: tail %q is not a number of lines", jobstore.ErrInvalidInput, truncate(v, 64))
		}
	}
	return opts, nil
}

// boolParam reads a query flag: absent, "0" or "false" is false; "", "1"
// or "true" is true.
func boolParam(q url.Values, key string) (bool, error) {
	if _, ok := q[key]; !ok {
		return false, nil
	}
	v, err := single(q, key)
	if err != nil {
		return false, err
	}
	switch v {
	case "", "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s=%q: want 1 or 0", jobstore.ErrInvalidInput, key, truncate(v, 64))
}
