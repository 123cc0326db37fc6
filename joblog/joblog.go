package joblog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/jobdir/jobdir/jobstore"
)

// Notes are the lines jobdir writes in a log.
const (
	// NotePrefix starts every note.
	NotePrefix = "--- jobdir: "
	// NoteSuffix ends every note, before its newline.
	NoteSuffix = " ---"
	// NoNewlineSuffix ends a note (before NoteSuffix) that follows output
	// that did not end with a newline: jobdir added the newline before it.
	NoNewlineSuffix = " (no newline at the end of the output above)"
)

// ErrNotRegular is returned by Open for a path that holds something other
// than a regular file with one link.
var ErrNotRegular = errors.New("not a regular file")

// Path returns the log file of job id in logDir. It fails with an error
// wrapping jobstore.ErrInvalidID if id is not a job ID, so the path never
// leaves logDir.
func Path(logDir, id string) (string, error) {
	if err := jobstore.ValidateID(id); err != nil {
		return "", err
	}
	return filepath.Join(logDir, id+".log"), nil
}

// Note returns the note line that says text (one line, no newline), after
// output that ended with a newline if atLineStart, or else with the newline
// jobdir adds and NoNewlineSuffix.
func Note(text string, atLineStart bool) string {
	if atLineStart {
		return NotePrefix + text + NoteSuffix + "\n"
	}
	return "\n" + NotePrefix + text + NoNewlineSuffix + NoteSuffix + "\n"
}

// IsNote reports whether line (with or without its newline) is a note.
func IsNote(line []byte) bool {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.HasPrefix(line, []byte(NotePrefix)) && bytes.HasSuffix(line, []byte(NoteSuffix)) &&
		len(line) >= len(NotePrefix)+len(NoteSuffix)
}

// Open opens the log at path for reading. It returns an error wrapping
// fs.ErrNotExist if there is none, and one wrapping ErrNotRegular, without
// following or blocking, if the path holds anything but a regular file
// with one link.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("job log %s: %w (a symbolic link)", path, ErrNotRegular)
		}
		return nil, fmt.Errorf("job log: %w", err)
	}
	if err := CheckRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CheckRegular returns an error wrapping ErrNotRegular unless f is a
// regular file with exactly one link.
func CheckRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("job log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("job log %s: %w (%s)", f.Name(), ErrNotRegular, describeMode(fi.Mode()))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink != 1 {
		return fmt.Errorf("job log %s: %w (it has %d hard links)", f.Name(), ErrNotRegular, st.Nlink)
	}
	return nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "type " + m.Type().String()
}

// RawWriter passes what is written to it on to W without the notes, and
// without the newline jobdir added before a note: what remains is the
// program's output. It holds back a line's newline until it knows whether
// a note follows, and the start of a line that may still turn out to be a
// note; Sync and Flush write what it holds back. It is not safe for
// concurrent use.
type RawWriter struct {
	W       io.Writer
	line    []byte // the start of the current line, while it may be a note
	through bool   // the current line is not a note: its bytes go through
	newline bool   // a newline held back: it belongs to the output unless a note that says it was added follows
}

// Write filters p.
func (r *RawWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		if err := r.add(seg); err != nil {
			return n - len(p), err
		}
		if i < 0 {
			break
		}
		p = p[i+1:]
		if err := r.endLine(); err != nil {
			return n - len(p), err
		}
	}
	return n, nil
}

// add takes more bytes of the current line.
func (r *RawWriter) add(seg []byte) error {
	if r.through {
		_, err := r.W.Write(seg)
		return err
	}
	r.line = append(r.line, seg...)
	if bytes.HasPrefix(r.line, []byte(NotePrefix)) || bytes.HasPrefix([]byte(NotePrefix), r.line) {
		return nil // may be a note: wait for the end of the line
	}
	// Not a note: the held newline was the output's, and so is this line.
	r.through = true
	if err := r.releaseNewline(); err != nil {
		return err
	}
	_, err := r.W.Write(r.line)
	r.line = r.line[:0]
	return err
}

func (r *RawWriter) releaseNewline() error {
	if !r.newline {
		return nil
	}
	r.newline = false
	_, err := r.W.Write([]byte{'\n'})
	return err
}

// endLine ends the current line at a newline.
func (r *RawWriter) endLine() error {
	if r.through {
		r.through, r.newline = false, true
		return nil
	}
	line := r.line
	r.line = r.line[:0]
	if IsNote(line) {
		// The held-back newline was jobdir's if the note says so.
		if bytes.HasSuffix(line, []byte(NoNewlineSuffix+NoteSuffix)) {
			r.newline = false
		}
		return r.releaseNewline()
	}
	if err := r.releaseNewline(); err != nil {
		return err
	}
	if _, err := r.W.Write(line); err != nil {
		return err
	}
	r.newline = true
	return nil
}

// Sync writes a newline held back at the end of what was written so far,
// for a reader following a log that reached its current end: jobdir writes
// a note together with the newline it adds before it, so a newline at the
// end of a log is the program's (unless the reader caught jobdir's write
// half done).
func (r *RawWriter) Sync() error {
	return r.releaseNewline()
}

// Flush writes what Write held back: the newline of the last line, and an
// unfinished line. Call it at the end of the log.
func (r *RawWriter) Flush() error {
	if err := r.releaseNewline(); err != nil {
		return err
	}
	line := r.line
	r.line, r.through = nil, false
	if len(line) > 0 && !IsNote(line) {
		_, err := r.W.Write(line)
		return err
	}
	return nil
}

// TailWriter keeps the last N lines written to it (an unfinished last line
// counts as one) and writes them to W on Flush. It is not safe for
// concurrent use.
type TailWriter struct {
	W     io.Writer
	N     int
	lines [][]byte // ring of the last N finished lines, oldest at start
	start int
	part  []byte // the unfinished line
}

// Write records p.
func (t *TailWriter) Write(p []byte) (int, error) {
	n := len(p)
	if t.N <= 0 {
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.part = append(t.part, p...)
			break
		}
		line := append(t.part, p[:i+1]...)
		t.part = nil
		p = p[i+1:]
		if len(t.lines) < t.N {
			t.lines = append(t.lines, line)
		} else {
			t.lines[t.start] = line
			t.start = (t.start + 1) % t.N
		}
	}
	return n, nil
}

// Flush writes the kept lines.
func (t *TailWriter) Flush() error {
	keep := t.N
	if len(t.part) > 0 {
		keep-- // the unfinished line is the last of the N
	}
	total := len(t.lines)
	for i := max(total-keep, 0); i < total; i++ {
		if _, err := t.W.Write(t.lines[(t.start+i)%len(t.lines)]); err != nil {
			return err
		}
	}
	if len(t.part) > 0 && t.N > 0 {
		if _, err := t.W.Write(t.part); err != nil {
			return err
		}
	}
	t.lines, t.part, t.start = nil, nil, 0
	return nil
}
