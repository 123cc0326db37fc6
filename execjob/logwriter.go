package execjob

import (
	"fmt"
	"os"
	"sync"
	"unicode/utf8"
)

// logWriter appends a program's output to its log file up to a limit and
// keeps the last TailBytes of it in memory. Write never fails: a full or
// broken log must not make the program see EPIPE.
type logWriter struct {
	mu        sync.Mutex
	f         *os.File // nil discards
	size      int64
	limit     int64
	truncated bool
	failed    bool
	tail      []byte
}

// Write implements io.Writer.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keepTail(p)
	if w.f == nil || w.failed || w.truncated {
		return len(p), nil
	}
	room := w.limit - w.size
	if int64(len(p)) <= room {
		w.write(p)
		return len(p), nil
	}
	if room > 0 {
		w.write(p[:room])
	}
	w.truncated = true
	w.write(fmt.Appendf(nil, "\n--- jobdir: log limit of %d bytes reached; the rest of this attempt's output is discarded ---\n", w.limit))
	return len(p), nil
}

// note writes a line of jobdir's own, whatever the limit.
func (w *logWriter) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil && !w.failed {
		w.write([]byte(s))
	}
}

func (w *logWriter) write(p []byte) {
	n, err := w.f.Write(p)
	w.size += int64(n)
	if err != nil {
		w.failed = true
	}
}

func (w *logWriter) keepTail(p []byte) {
	if len(p) >= TailBytes {
		w.tail = append(w.tail[:0], p[len(p)-TailBytes:]...)
		return
	}
	if over := len(w.tail) + len(p) - TailBytes; over > 0 {
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	w.tail = append(w.tail, p...)
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
