package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
)

// recordLocksName is the file in locks/ whose bytes are the record locks
// of a store of format 7 or later on Linux (see rangeLocks): job id's lock is the
// byte at rangeOffset(id).
const recordLocksName = "records.lock"

// leasesName is the file in locks/ whose bytes are the leases of a store
// of format 8 on Linux (tryRangeLease): job id's lease is the byte at
// rangeOffset(id), as its record lock is in records.lock.
const leasesName = "leases.lock"

// rangeOffset is the byte of locks/records.lock that is job id's record
// lock, and of locks/leases.lock that is its lease: 62 bits of the FNV-1a
// hash of the ID. Two jobs whose IDs hash alike share a record lock, which
// only makes one wait for the other (the in-process table is keyed by the
// byte too), and a lease, which makes a claim of one skip the other while
// it runs, and its recovery wait until the other's lease is free; among a
// million jobs locked at once that happens with a chance of about one in
// ten million.
func rangeOffset(id string) int64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= prime
	}
	return int64(h >> 2)
}

// lockFilesIn holds the store directories (absolute) whose Stores keep a
// lock file per job even where range locks exist: a seam for the tests of
// that protocol, which is the one outside Linux. Every Store of a
// directory must use the same protocol, so only tests set it.
var lockFilesIn sync.Map

// openRecordLocks, at Open, chooses how this Store takes record locks: the
// bytes of locks/records.lock where the system has open file description
// locks (Linux), else a lock file per job (lockPath).
func (s *Store) openRecordLocks(context.Context) error {
	if _, files := lockFilesIn.Load(s.dir); files {
		return nil
	}
	s.ranges = openRangeLocks(s.locksPath(recordLocksName), s.filePerm)
	return nil
}

// lockRange takes job id's record lock in locks/records.lock: exclusive
// or shared, waiting until ctx ends or not at all (then ok=false if
// another holder has it).
func (s *Store) lockRange(ctx context.Context, id string, exclusive, wait bool) (func(), bool, error) {
	unlock, ok, err := s.ranges.lock(ctx, rangeOffset(id), exclusive, wait)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("lock job %s: %w", id, err) // err names the file
	}
	return unlock, ok, err
}

// recordLockPath names, in errors and reports, the file that holds job
// id's record lock.
func (s *Store) recordLockPath(id string) string {
	if s.ranges != nil {
		return s.locksPath(recordLocksName)
	}
	return s.lockPath(id)
}

// dropOldLockFile removes job id's lock file of format 6 or older, if it
// has one: in a store of format 7 with range locks nothing else removes it
// once the job is gone. The caller holds the job's record lock and has
// just removed its last record.
func (s *Store) dropOldLockFile(id string) {
	if s.ranges == nil {
		return // the lock file is the lock: its unlock removes it
	}
	if err := s.fs.Remove(s.lockPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Debug("filestore: remove the old lock file of a job that is gone", "id", id, "err", err)
	}
}
