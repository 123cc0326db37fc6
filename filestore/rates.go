package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// startsFile, in a rate-limited queue's slot directory, holds the times of
// the queue's latest starts, up to the rate's N of them: a little-endian
// int64 of Unix nanoseconds each, in no order (docs/format.md, "Rates").
// A claim of one of the queue's jobs reads it and records its start in it
// under its flock, so that of the claims of every process one at a time
// decides.
const startsFile = "starts"

// errRateFull is claimOne's answer when the job's queue started as many
// jobs as its rate allows in the window that ends now.
var errRateFull = errors.New("the job's queue started as many jobs as its rate allows")

// errRateBusy is claimOne's answer when another claim held the queue's
// starts file longer than startsPatience.
var errRateBusy = errors.New("the queue's starts file is held elsewhere")

// rateError is errRateFull with when the window has room again.
type rateError struct {
	next time.Time
}

func (e *rateError) Error() string { return errRateFull.Error() }
func (e *rateError) Unwrap() error { return errRateFull }

// startsPatience bounds how long a claim tries the flock of a starts
// file, which another claim holds for a read and a write: longer means a
// holder that is stopped, and the claim passes over the queue for now.
const startsPatience = 20 * time.Millisecond

// takeStart decides a claim of a job of queue by its rate: under the flock
// of the queue's starts file it reads the time, and records it as a start
// if the starts of the window that ends then are fewer than rate.N. It
// returns that time, which the claim records as the job's start; or a
// *rateError with the time the window has room again.
func (s *Store) takeStart(queue string, rate jobstore.Rate) (time.Time, error) {
	dir := s.slotDir(queue)
	if err := s.makeSlotDirs(dir); err != nil {
		return time.Time{}, err
	}
	path := filepath.Join(dir, startsFile)
	rel, err := filepath.Rel(s.dir, path)
	if err != nil {
		return time.Time{}, err
	}
	f, err := s.root.OpenFile(rel, os.O_RDWR|os.O_CREATE|noFollow|syscall.O_NONBLOCK, s.filePerm)
	if err != nil {
		return time.Time{}, fmt.Errorf("open the queue's starts: %w", err)
	}
	defer f.Close()
	deadline := time.Now().Add(startsPatience)
	for {
		err = flockFile(f, unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			break
		}
		if time.Now().After(deadline) {
			return time.Time{}, errRateBusy
		}
		time.Sleep(slotRetry)
	}
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = flockFile(f, unix.LOCK_UN) }()
	fi, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return time.Time{}, fmt.Errorf("the queue's starts %s is not a regular file", path)
	}
	buf := make([]byte, min(fi.Size(), 8*(jobstore.MaxRateStarts+1)))
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return time.Time{}, fmt.Errorf("read the queue's starts %s: %w", path, err)
	}
	w := make(jobstore.RateWindow, len(buf)/8)
	for i := range w {
		w[i] = time.Unix(0, int64(binary.LittleEndian.Uint64(buf[8*i:])))
	}
	// A file of another length than its starts (a rate whose N was
	// lowered, a write cut short) is written whole below.
	whole := len(buf)%8 != 0 || len(w) > rate.N
	w = w.Trim(rate.N)
	now := time.Now()
	at, ok, next := w.Allow(rate, now)
	if !ok {
		return time.Time{}, &rateError{next: next}
	}
	if at == len(w) {
		w = append(w, now)
	} else {
		w[at] = now
	}
	if whole {
		out := make([]byte, 8*len(w))
		for i, t := range w {
			binary.LittleEndian.PutUint64(out[8*i:], uint64(t.UnixNano()))
		}
		// Written, then cut to its length: a crash between the two leaves
		// the new starts and some old ones, never none.
		if _, err = f.WriteAt(out, 0); err == nil {
			err = f.Truncate(int64(len(out)))
		}
	} else {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(now.UnixNano()))
		_, err = f.WriteAt(b[:], int64(8*at))
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("write the queue's starts %s: %w", path, err)
	}
	return now, nil
}
