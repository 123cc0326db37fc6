package jobstore

import (
	"context"
	"errors"
)

// ErrKeyTaken is returned by Import for a job whose idempotency key already
// names another job in the store: importing it would make two jobs of one
// key.
var ErrKeyTaken = errors.New("idempotency key names another job")

// MaxImport is the most jobs one Import takes.
const MaxImport = 1000

// Importer is implemented by stores that can take in jobs made by another
// store as they are, keeping their IDs: "jobdir copy" moves jobs between
// stores with it. storetest.Run checks every store that implements it.
type Importer interface {
	// Import adds each of jobs, in order, with every field as it is (ID,
	// key, state, attempts, times, payload, result, last error, history),
	// unless the store already holds a job with its ID, which it leaves
	// alone; it returns how many it added. So a second Import of the same
	// jobs adds none: an interrupted copy is resumed by copying again.
	//
	// An imported queued job is claimable as a submitted one is (its
	// Attempt goes on counting from where it was), an imported key belongs
	// to its job until that job is pruned, and an imported finished job is
	// pruned by its FinishedAt. A running job is refused: it belongs to a
	// worker of the other store.
	//
	// Returns an error wrapping ErrInvalidInput, before adding any job, if
	// a job is invalid for storekit.ValidateImport or there are more than
	// MaxImport; and an error wrapping ErrKeyTaken, naming the job, if a
	// job's key names another job here. On an error, the jobs before the
	// one that failed may have been added (count them with Get): Import
	// again after fixing the cause.
	Import(ctx context.Context, jobs []Job) (int, error)
}
