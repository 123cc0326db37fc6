package joblog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Logs keeps the logs of exec jobs, one a job, which attempts append to and
// readers read from any offset: execjob writes them, Copy reads them.
// Dir keeps them in files on one machine; pgstore keeps them in the
// database, where every machine reads them. Implementations are safe for
// concurrent use.
type Logs interface {
	// Append opens the log of job id for appending, making it if there is
	// none. It returns an error wrapping jobstore.ErrInvalidID for a
	// string that is not a job ID, and one wrapping ErrNotRegular if what
	// is there cannot be a log.
	Append(ctx context.Context, id string) (Appender, error)
	// CopyFrom copies the log of job id from byte off to its current end
	// into w and returns how many bytes it copied. A job without a log has
	// an empty one.
	CopyFrom(ctx context.Context, w io.Writer, id string, off int64) (int64, error)
	// Size returns the size of the log of job id: 0 if it has none.
	Size(ctx context.Context, id string) (int64, error)
}

// Watcher is implemented by Logs that tell a follower when a log grows,
// so that CopyLogs follows it without polling: pgstore's Logs do, through
// LISTEN/NOTIFY, for writers in any process. Dir does not: CopyLogs polls
// files every Options.Poll.
type Watcher interface {
	// WatchLog returns a channel that receives a value after the log of
	// job id may have grown, until ctx ends; values coalesce. Every
	// append that a read of the log made after WatchLog returns does not
	// see wakes the channel. It returns an error wrapping
	// jobstore.ErrNotFound if the job does not exist.
	WatchLog(ctx context.Context, id string) (<-chan struct{}, error)
}

// Appender appends to the log of one job. It is not safe for concurrent
// use; Close it when done.
type Appender interface {
	// Write appends p. What it buffers is written by Close, and, by an
	// Appender that buffers, soon after the write.
	io.Writer
	// Size returns the size the log had when it was opened.
	Size() int64
	// AtLineStart reports whether the log was empty or ended with a
	// newline when it was opened.
	AtLineStart() bool
	// Close writes what is buffered and releases the log.
	Close() error
}

// Dir keeps logs in files, <Path>/<job ID>.log, in a directory made (0700,
// files 0600; 0770 and 0660 with GroupAccess) when the first log is
// written. It never follows a symbolic link or blocks on a FIFO planted
// there, and refuses anything at a log's path that is not a regular file
// with one link.
type Dir struct {
	// Path is the directory.
	Path string
	// GroupAccess makes the directory and the files writable by their
	// group (filestore.Options.GroupAccess).
	GroupAccess bool
}

var _ Logs = Dir{}

// Append opens the log file of job id for appending.
func (d Dir) Append(ctx context.Context, id string) (Appender, error) {
	path, err := Path(d.Path, id)
	if err != nil {
		return nil, err
	}
	dirPerm, filePerm := os.FileMode(0o700), os.FileMode(0o600)
	if d.GroupAccess {
		dirPerm, filePerm = 0o770, 0o660
	}
	if err := os.MkdirAll(d.Path, dirPerm); err != nil {
		return nil, fmt.Errorf("log directory: %w", err)
	}
	f, err := openAppend(path, filePerm)
	if err != nil {
		return nil, err
	}
	if d.GroupAccess {
		// The umask would take the group's write bit away. Keep the
		// setgid bit the directory inherits in a setgid store: it gives
		// every log the store's group, whichever member writes it, and a
		// log in the writer's own group could not be read by the others
		// (TestDirGroupAccessKeepsSetgid).
		if fi, err := os.Lstat(d.Path); err == nil && fi.IsDir() {
			_ = os.Chmod(d.Path, dirPerm|fi.Mode()&os.ModeSetgid)
		}
		_ = f.Chmod(filePerm)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("open log: %w", err)
	}
	a := &fileAppender{f: f, size: fi.Size(), lineStart: true}
	if fi.Size() > 0 {
		var b [1]byte
		_, err := f.ReadAt(b[:], fi.Size()-1)
		a.lineStart = err != nil || b[0] == '\n'
	}
	return a, nil
}

// CopyFrom copies the log file of job id from byte off.
func (d Dir) CopyFrom(ctx context.Context, w io.Writer, id string, off int64) (int64, error) {
	path, err := Path(d.Path, id)
	if err != nil {
		return 0, err
	}
	return copyFrom(w, path, off)
}

// Size returns the size of the log file of job id.
func (d Dir) Size(ctx context.Context, id string) (int64, error) {
	path, err := Path(d.Path, id)
	if err != nil {
		return 0, err
	}
	f, err := Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("job log: %w", err)
	}
	return fi.Size(), nil
}

type fileAppender struct {
	f         *os.File
	size      int64
	lineStart bool
}

func (a *fileAppender) Write(p []byte) (int, error) { return a.f.Write(p) }
func (a *fileAppender) Size() int64                 { return a.size }
func (a *fileAppender) AtLineStart() bool           { return a.lineStart }
func (a *fileAppender) Close() error                { return a.f.Close() }

// openAppend opens the log at path for appending, creating it with perm,
// without following a symbolic link or blocking on a FIFO planted there,
// and refuses anything but a regular file with one link: the job's output
// must never land in another file. It opens the file for reading too, to
// read its last byte.
func openAppend(path string, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrNotRegular, path)
		}
		if errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("%w: %s is a FIFO", ErrNotRegular, path)
		}
		return nil, fmt.Errorf("open log: %w", err)
	}
	if err := CheckRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.SetNonblock(int(fd), false) })
	}
	return f, nil
}
