//go:build linux

package filestore

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// watchEnds watches tmp/ with inotify for the close of a staging lock
// opened for writing (see ends.go), which it reports on s.ended, as it
// does a lost event (the queue overflowed). It returns the function that
// stops the watch; s.wg counts the reader.
func (s *Store) watchEnds() (func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	dir := filepath.Join(s.dir, dirTmp)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends a Read in progress.
	f := os.NewFile(uintptr(fd), "inotify of "+dir)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 4096) // room for at least one event of any name
		for {
			n, err := f.Read(buf)
			if err != nil {
				return // closed
			}
			if endIn(buf[:n]) {
				select {
				case s.ended <- struct{}{}:
				default: // one is pending: its pass covers this end too
				}
			}
		}
	}()
	return func() { _ = f.Close() }, nil
}

// endIn reports whether the inotify events in b include the close of a
// staging lock, or a lost event.
func endIn(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(b[4:8])
		n := int(binary.NativeEndian.Uint32(b[12:16]))
		if len(b) < unix.SizeofInotifyEvent+n {
			return true // torn: cannot happen; look rather than miss one
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+n], "\x00"))
		if mask&unix.IN_Q_OVERFLOW != 0 || (mask&unix.IN_CLOSE_WRITE != 0 && strings.HasSuffix(name, recordLock)) {
			return true
		}
		b = b[unix.SizeofInotifyEvent+n:]
	}
	return false
}
