package filestore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// dirSlots holds, for each queue that has a concurrency limit, the slot
// files of its running jobs: slots/<sha256 of the queue's name>/<i>, made
// when first needed (docs/format.md, "Limits"). A claim of a job of a
// limited queue takes a free slot and holds it, flock'd, for the attempt,
// with the job's ID written in it.
const dirSlots = "slots"

// dirPartitions, in a queue's slot directory, holds a directory of slot
// files for each partition of the queue that has a running job, when the
// queue has a per-partition limit: slots/<queue>/partitions/<sha256 of the
// partition>/<i>. A partition's slot file is removed when its attempt
// gives it back, and its directory when it was the last, so that they do
// not pile up with the partitions a queue has seen.
const dirPartitions = "partitions"

// errQueueFull is claimOne's answer when the job's queue runs as many jobs
// as its limit allows.
var errQueueFull = errors.New("the job's queue runs as many jobs as its limit allows")

// errPartitionFull is claimOne's answer when the job's partition runs as
// many jobs as its queue's per-partition limit allows.
var errPartitionFull = errors.New("the job's partition runs as many jobs as its queue's per-partition limit allows")

// errSlotGone says that a partition's slot file, or its directory, was
// removed while a claim looked at it: the claim looks again.
var errSlotGone = errors.New("slot removed meanwhile")

// heldSlot is a slot that an attempt holds: its file, flock'd, and, for a
// partition's slot, the path that giving it back removes.
type heldSlot struct {
	f *os.File
	// path is the file of a partition's slot; "" for a queue's slot,
	// which is kept for the next claim.
	path string
	s    *Store
}

// free gives the slot back: a partition's slot file is removed first
// (and its directory, if that was the last file in it), while its flock
// is still held, so that a claim that opened it meanwhile finds it gone
// (probeSlot's check) rather than holds a file no one else can see.
func (h heldSlot) free() {
	if h.f == nil {
		return
	}
	if h.path != "" {
		_ = h.s.fs.Remove(h.path)
		_ = h.s.fs.Remove(filepath.Dir(h.path)) // fails while other slots are in it
	}
	unlockFile(h.f)
}

// slotDir returns the directory of queue's slot files.
func (s *Store) slotDir(queue string) string {
	return filepath.Join(s.dir, dirSlots, keyName(queue))
}

// takeSlot takes a slot of queue, whose limit is limit, for job id, whose
// lease the caller holds. It returns the slot file, flock'd, with id
// written in it: the caller holds it until the attempt ends (see
// leaseHold.slot). It returns errQueueFull if limit jobs of the queue run.
//
// A slot is busy while the flock of its file is held (by the process that
// claimed the job), or while the lease of the job its file names is held
// (by the processes of that attempt, which may outlive the process that
// claimed it: execjob's supervisor holds a copy of the lease). A claim
// first takes a free slot below limit; if a slot numbered limit or more is
// busy (a limit lowered below the running jobs), it counts the busy slots
// among all of them, its own included, and if that is more than limit it
// gives the slot back. Every claim holds its slot while it looks, so of
// claims that race, the last to take a slot sees every other: no more than
// limit jobs run at once.
func (s *Store) takeSlot(queue string, limit int, id string) (*os.File, error) {
	dir := s.slotDir(queue)
	if err := s.makeSlotDirs(dir); err != nil {
		return nil, err
	}
	// From a slot chosen at random: with a limit well above the jobs that
	// run, a claim finds a free slot at its first or second look, where a
	// search from slot 0 would look at every busy one first.
	mine, at, err := s.freeSlot(dir, limit, rand.IntN(limit), id, false)
	if err != nil {
		return nil, err
	}
	if mine == nil {
		return nil, errQueueFull
	}
	// This claim holds one of the limit slots below limit, and no two
	// claims hold the same one: no more than limit jobs run, unless slots
	// numbered limit or more are busy, which only a higher limit can have
	// left (one lowered below the jobs that run). Then it counts them all.
	busy, err := s.busySlots(dir, at, limit, id, false)
	if err == nil && busy > 0 {
		var over bool
		if over, err = s.overLimit(dir, at, limit, id, false); err == nil && over {
			err = errQueueFull
		}
	}
	if err == nil {
		err = s.fs.Overwrite(filepath.Join(dir, strconv.Itoa(at)), []byte(id))
	}
	if err != nil {
		unlockFile(mine)
		return nil, err
	}
	return mine, nil
}

// makeSlotDirs makes, once per Store, the slot directory dir of a queue
// and those above it.
func (s *Store) makeSlotDirs(dir string) error {
	if _, made := s.slotDirs.Load(dir); made {
		return nil
	}
	if err := s.fs.Mkdir(filepath.Join(s.dir, dirSlots), s.dirPerm); err != nil {
		return err
	}
	if err := s.fs.Mkdir(dir, s.dirPerm); err != nil {
		return err
	}
	s.slotDirs.Store(dir, true)
	return nil
}

// takePartitionSlot takes a slot of the partition of queue, whose
// per-partition limit is limit, for job id, as takeSlot takes a queue's.
// Its slots live in a directory of their own that is removed with its
// last slot file (heldSlot.free); a claim that meets a file or directory
// removed meanwhile looks again.
func (s *Store) takePartitionSlot(queue, partition string, limit int, id string) (heldSlot, error) {
	qdir := s.slotDir(queue)
	if err := s.makeSlotDirs(qdir); err != nil {
		return heldSlot{}, err
	}
	pdir := filepath.Join(qdir, dirPartitions)
	if err := s.makeSlotDirs(pdir); err != nil {
		return heldSlot{}, err
	}
	dir := filepath.Join(pdir, keyName(partition))
	for try := 0; try < 100; try++ {
		if try > 0 {
			time.Sleep(slotRetry)
		}
		h, err := s.tryPartitionSlot(dir, limit, id)
		if !errors.Is(err, errSlotGone) {
			return h, err
		}
		// A slot, or the partition's directory, given back under this
		// claim: a moment's race.
	}
	return heldSlot{}, errSlotsBusy
}

// errSlotsBusy is claimOne's answer when the slots of the job's partition
// kept changing under its claim: the claim passes over the partition, and
// asks to be called again soon, as for a lease held elsewhere.
var errSlotsBusy = errors.New("the partition's slots changed under the claim")

// tryPartitionSlot is one try of takePartitionSlot in the partition's
// slot directory dir.
func (s *Store) tryPartitionSlot(dir string, limit int, id string) (heldSlot, error) {
	if err := s.fs.Mkdir(dir, s.dirPerm); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Made, or found, then removed by the end of the partition's
			// last attempt before this claim could look at it.
			return heldSlot{}, errSlotGone
		}
		return heldSlot{}, err
	}
	mine, at, err := s.freeSlot(dir, limit, 0, id, true)
	if err != nil {
		return heldSlot{}, err
	}
	if mine == nil {
		return heldSlot{}, errPartitionFull
	}
	h := heldSlot{f: mine, path: filepath.Join(dir, strconv.Itoa(at)), s: s}
	over, err := s.overLimit(dir, at, limit, id, true)
	if err == nil && over {
		err = errPartitionFull
	}
	if err == nil {
		err = s.fs.Overwrite(h.path, []byte(id))
	}
	if err != nil {
		h.free()
		return heldSlot{}, err
	}
	return h, nil
}

// busySlots counts the busy slot files of dir numbered from or more,
// other than slot skip, from a listing of dir (a partition's slot files
// are removed when given back, and a queue's are made in no order).
// removable is probeSlot's.
func (s *Store) busySlots(dir string, skip, from int, self string, removable bool) (int, error) {
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil {
		return 0, err
	}
	d, err := s.root.Open(rel)
	if err != nil {
		return 0, fmt.Errorf("list slots: %w", err)
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return 0, fmt.Errorf("list slots: %w", err)
	}
	busy := 0
	for _, name := range names {
		i, err := strconv.Atoi(name)
		if err != nil || i < from || i == skip || strconv.Itoa(i) != name {
			continue // not a slot, or not one counted
		}
		f, free, err := s.probeSlot(dir, i, self, false, removable)
		if errors.Is(err, errSlotGone) {
			continue // given back meanwhile
		}
		if err != nil {
			return 0, err
		}
		if f != nil {
			unlockFile(f)
		}
		if !free {
			busy++
		}
	}
	return busy, nil
}

// overLimit reports whether more than limit slots of dir are busy, the
// caller's own, skip, included. Another claim's look holds a slot's flock
// for a moment, which makes a free slot look busy: it counts again, once,
// a moment later, before it says so. removable is probeSlot's.
func (s *Store) overLimit(dir string, skip, limit int, self string, removable bool) (bool, error) {
	for try := range 2 {
		if try > 0 {
			time.Sleep(slotRetry)
		}
		busy, err := s.busySlots(dir, skip, 0, self, removable)
		if err != nil || busy+1 <= limit {
			return false, err
		}
	}
	return true, nil
}

// freeSlot takes the first free slot of dir below limit, from slot start
// on and round, for job id, and returns it locked with its number; nil if
// none is free. Another claim's
// count holds a slot's flock for a moment: it looks again, once, a moment
// later, before it finds none, as nothing would wake the claim when that
// count let go. removable is probeSlot's.
func (s *Store) freeSlot(dir string, limit, start int, id string, removable bool) (*os.File, int, error) {
	for try := range 2 {
		if try > 0 {
			time.Sleep(slotRetry)
		}
		for k := range limit {
			i := (start + k) % limit
			f, free, err := s.probeSlot(dir, i, id, true, removable)
			if err != nil {
				return nil, 0, err
			}
			if free {
				return f, i, nil
			}
		}
	}
	return nil, 0, nil
}

// slotRetry is how long a claim waits before it looks again at slots
// that another claim's count held.
const slotRetry = 200 * time.Microsecond

// probeSlot opens (creating it if create) slot i of dir and tries its flock
// without blocking. With removable (a partition's slots, which are removed
// when given back), a file or directory that is gone, or a file that was
// removed between its open and its flock, gives errSlotGone. It reports free, with the slot locked in f, if no one
// held the flock and the job the slot names is not running, or no process
// holds its lease (but for self, the job being claimed, whose lease the
// caller holds); else it leaves the slot unlocked. A slot that does not
// exist is free, with f nil. The job's record must be in claimed/ for its
// lease to count: a lease is also held for a moment by a recovery pass or
// a claim that looks at a job, which must not make its old slot busy.
func (s *Store) probeSlot(dir string, i int, self string, create, removable bool) (f *os.File, free bool, err error) {
	path := filepath.Join(dir, strconv.Itoa(i))
	rel, err := filepath.Rel(s.dir, path)
	if err != nil {
		return nil, false, err
	}
	flag := os.O_RDWR | noFollow
	if create {
		flag |= os.O_CREATE
	}
	// O_NONBLOCK: a FIFO planted for a slot does not block the open; its
	// read fails below.
	f, err = s.root.OpenFile(rel, flag|syscall.O_NONBLOCK, s.filePerm)
	if errors.Is(err, fs.ErrNotExist) && removable {
		return nil, false, errSlotGone
	}
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open slot: %w", err)
	}
	err = flockFile(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		_ = f.Close()
		return nil, false, nil
	}
	if err != nil {
		_ = f.Close()
		return nil, false, err
	}
	if removable {
		if same, err := sameInode(f, path, 0); err != nil || !same {
			unlockFile(f)
			return nil, false, errSlotGone
		}
	}
	var b [64]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		unlockFile(f)
		return nil, false, fmt.Errorf("slot %s: %w", path, err)
	}
	if other := string(b[:n]); other != "" && other != self && jobstore.ValidateID(other) == nil && s.inClaimed(other) && s.leaseHeld(other) {
		unlockFile(f)
		return nil, false, nil
	}
	return f, true, nil
}

// inClaimed reports whether job id has a record in claimed/.
func (s *Store) inClaimed(id string) bool {
	_, err := os.Lstat(s.recordPath(dirClaimed, id))
	return err == nil
}

// leaseHeld reports whether any process holds the lease of job id: this
// one (its table), or another (its byte of locks/leases.lock, or the flock
// of its lease file, is locked).
func (s *Store) leaseHeld(id string) bool {
	if _, held := heldLease(s, id); held {
		return true
	}
	if s.ranges != nil {
		held, err := rangeLeaseHeld(s.locksPath(leasesName), rangeOffset(id))
		return held || err != nil
	}
	lp := s.leasePath(id)
	f, err := os.OpenFile(lp, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return false // no lease file: no attempt holds it
	}
	defer f.Close()
	err = flockFile(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true
	}
	if err == nil {
		_ = flockFile(f, unix.LOCK_UN)
	}
	return false
}

// releaseSlot gives back the slots of an attempt, once its handler is
// done.
func releaseSlot(h *leaseHold) {
	leases.Lock()
	slots := h.slots
	h.slots = nil
	leases.Unlock()
	freeSlots(slots)
}

// freeSlots gives back slots.
func freeSlots(slots []heldSlot) {
	for _, sl := range slots {
		sl.free()
	}
}
