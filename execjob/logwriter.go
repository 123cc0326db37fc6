package execjob

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/jobdir/jobdir/joblog"
)

// minTailKeep is the least end of an attempt's output that a log keeps,
// even when the log is already past its bound.
const minTailKeep = TailBytes

// logWriter appends one attempt's output to its job's log. The log is
// bounded: of output that does not fit in the room left, it writes the
// beginning at once and keeps the end in memory, to write when the attempt
// ends after a marker saying how much was dropped between them. It also
// keeps the last TailBytes for error messages. Write never fails: a full or
// broken log must not make the program see EPIPE.
type logWriter struct {
	mu       sync.Mutex
	f        joblog.Appender // nil discards
	limit    int64
	failed   bool
	lineEnd  bool  // the last byte written to the log was a newline (or nothing was)
	head     int64 // bytes of this attempt's output to write at once
	written  int64 // bytes of output written at once so far
	keep     []byte
	keepMax  int
	keepFrom int   // ring start once keep is full
	dropped  int64 // bytes of output neither written nor kept
	tail     []byte
}

// Write implements io.Writer.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	keepTail(&w.tail, p, TailBytes)
	if w.f == nil || w.failed {
		return n, nil
	}
	if room := w.head - w.written; room > 0 {
		k := min(int64(len(p)), room)
		w.write(p[:k])
		w.written += k
		p = p[k:]
	}
	if len(p) > 0 {
		w.keepEnd(p)
	}
	return n, nil
}

// keepEnd adds p to the ring of the output's end, counting what falls out.
func (w *logWriter) keepEnd(p []byte) {
	if len(p) >= w.keepMax {
		w.dropped += int64(len(w.keep) + len(p) - w.keepMax)
		w.keep = append(w.keep[:0], p[len(p)-w.keepMax:]...)
		w.keepFrom = 0
		return
	}
	if len(w.keep) < w.keepMax {
		n := min(w.keepMax-len(w.keep), len(p))
		w.keep = append(w.keep, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 { // the ring is full: overwrite its oldest bytes
		n := copy(w.keep[w.keepFrom:], p)
		w.dropped += int64(n)
		p = p[n:]
		w.keepFrom = (w.keepFrom + n) % w.keepMax
	}
}

// finish writes the kept end of the output, after a marker if some was
// dropped.
func (w *logWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil || w.failed || len(w.keep) == 0 {
		return
	}
	if w.dropped > 0 {
		w.write([]byte(joblog.Note(fmt.Sprintf("log limit of %d bytes reached: %d bytes of output dropped here; the last %d follow",
			w.limit, w.dropped, len(w.keep)), w.lineEnd)))
	}
	w.write(w.keep[w.keepFrom:])
	w.write(w.keep[:w.keepFrom])
	w.keep = nil
}

// note writes a note of jobdir's own, whatever the limit.
func (w *logWriter) note(text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil && !w.failed {
		w.write([]byte(joblog.Note(text, w.lineEnd)))
	}
}

func (w *logWriter) write(p []byte) {
	if len(p) == 0 {
		return
	}
	_, err := w.f.Write(p)
	if err != nil {
		w.failed = true
		return
	}
	w.lineEnd = p[len(p)-1] == '\n'
}

// keepTail keeps the last n bytes of what is written in *tail.
func keepTail(tail *[]byte, p []byte, n int) {
	if len(p) >= n {
		*tail = append((*tail)[:0], p[len(p)-n:]...)
		return
	}
	if over := len(*tail) + len(p) - n; over > 0 {
		*tail = append((*tail)[:0], (*tail)[over:]...)
	}
	*tail = append(*tail, p...)
}

// tailString returns the kept tail, starting at a character boundary.
func (w *logWriter) tailString() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tail
	for i := 0; i < len(t) && i < utf8.UTFMax && !utf8.RuneStart(t[0]); i++ {
		t = t[1:]
	}
	return string(t)
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}

// errLogNotRegular is wrapped by the error of an attempt whose log path
// holds something other than a regular file.
var errLogNotRegular = joblog.ErrNotRegular
