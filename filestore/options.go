package filestore

import (
	"errors"
	"log/slog"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Options configures a Store. A nil *Options is the same as a zero Options;
// every field documents what its zero value means.
type Options struct {
	// NoSync skips every fsync. A crash of the machine (not of the process)
	// may then lose or resurrect jobs. Zero: durable, every Submit and
	// Complete is on disk before it returns.
	NoSync bool
	// SyncFS makes every change durable with syncfs(2), one shared by
	// every operation of this Store waiting at that moment, a lone one
	// too, instead of an fsync of each new file and of its directory. Under concurrency that is far
	// fewer disk flushes (docs/benchmarks.md in the repository), and the guarantees are the
	// same. But a syncfs writes back every dirty file of the whole file
	// system, other programs' too: use it when the store has its file
	// system (its volume) to itself, never beside a program that writes a
	// lot. Linux only, and only on a file system where a syncfs reaches
	// the disk (ext4 and xfs on a block device, btrfs, tmpfs: see
	// Store.Durability); elsewhere, as on FUSE, Open logs a warning that
	// says why and fsyncs as usual. Ignored with NoSync. Zero: fsync each
	// file and directory, except that where a syncfs reaches the disk the
	// new records of the Submits, Completes and other moves that wait at
	// the same moment share one syncfs, unless the recent syncfs flushes
	// took more than 4 times the fsyncs they replaced, or one failed
	// (docs/format.md, Durability).
	SyncFS bool
	// MaxPayload limits the size in bytes of a payload and of a result.
	// Zero means jobstore.DefaultMaxPayload.
	MaxPayload int
	// Backoff sets the delay before a failed job's next attempt. Nil means
	// jobstore.Backoff.
	Backoff jobstore.BackoffFunc
	// GroupAccess creates directories 0770 and files 0660 so that processes
	// of one group can share the store. Zero: 0700 and 0600.
	GroupAccess bool
	// AllowUnsafeFilesystem opens the store on NFS, SMB/CIFS, FUSE or Ceph,
	// where flock, rename and inotify do not give the guarantees the store
	// relies on across machines. It is safe for one process on one machine
	// only, and there a change survives a power cut (or a crash of the
	// file server or FUSE daemon) only if the file system makes an fsync
	// reach its disk: the store fsyncs each file and directory, never
	// relying on syncfs(2), but cannot tell. Zero: Open refuses such
	// filesystems with ErrUnsupportedFilesystem.
	AllowUnsafeFilesystem bool
	// RecoverInterval is how often the store looks for jobs whose worker
	// died. Zero means 250ms, so a dead worker's job is queued again within
	// about one second. On Linux a Store that has claimed also sees another
	// process's Store end (the process killed or its Store closed) as it
	// happens, and looks at once; the interval is then the safety net.
	RecoverInterval time.Duration
	// PollInterval is how often WatchCancel and AwaitWork re-read the disk
	// when no filesystem event arrives, in case events were lost; the one
	// reader that all Waits on a job share re-reads every 10
	// PollIntervals (every PollInterval when the store gets no events).
	// Zero means 1s.
	PollInterval time.Duration
	// Logger receives warnings (unusual filesystem, corrupt records found,
	// recovered jobs). Nil means silent.
	Logger *slog.Logger
	// Faults makes file operations fail, as a failing or full disk would,
	// for tests of what the store does then (this module's torture run
	// injects EIO and ENOSPC through it). Before each change of the file
	// system the store calls it with the operation ("write",
	// "write-temp", "link", "rename", "remove", "overwrite", "setxattr",
	// "journal-write", "journal-sync", "sync-dir",
	// "sync-file", "syncfs", "syncfs-flush", "mkdir") and its path; an
	// error makes that operation fail with it, wrapped in an
	// *fs.PathError, instead of running. Nil: no injected failures.
	Faults func(op, path string) error

	// journalCoverEvery and journalSize, when set, replace the submission
	// journal's defaults (journal.go), and noJournal turns it off: test
	// seams.
	journalCoverEvery time.Duration
	journalSize       int64
	noJournal         bool
	// journalAlways journals submits also where no syncfs is trusted
	// (covers and replays then fsync each record): for the power-cut
	// test, whose FUSE file system is such a place.
	journalAlways bool
}

// Defaults used for zero Options fields.
const (
	// DefaultRecoverInterval is the RecoverInterval used when it is zero.
	DefaultRecoverInterval = 250 * time.Millisecond
	// DefaultPollInterval is the PollInterval used when it is zero.
	DefaultPollInterval = time.Second
)

// FormatVersion is the on-disk format this package reads and writes. It is
// recorded in the FORMAT file of every store directory and in every record
// it writes. Format 8 leases jobs, on Linux, as bytes of one file
// (locks/leases.lock) instead of a lease file per job, and a claim writes
// its note into an extended attribute of the record (where the file
// system keeps them) instead of into that file, so a claim creates no
// file; a program of format 7 would lease the job's lease file, which
// excludes nothing of format 8. Format 7 locks records, on Linux, as bytes of one file
// (locks/records.lock, open file description locks) instead of a lock file
// per job; a program of format 6 would lock the job's lock file, which
// excludes nothing of format 7. Outside Linux the lock files stay. Format 6
// adds dependencies and batches: a record may be in the state waiting (in
// queued/, never claimed) and name its dependencies (job.after), and the
// directories dependents/ and batches/ index them; a program of format 5
// would take a waiting record for corrupt and end jobs without settling the
// ones that wait for them. Format 5 adds a job's tags and metadata to its
// record (job.tags, job.meta), which a program of format 4 would drop when
// it rewrote the record. Format 4 puts each job in a queue (a record
// without one, of an older format, is in jobstore.DefaultQueue) and keeps
// queue settings, such as a pause, in the file QUEUES, which every claim
// consults. Format 3 guards each job's record with a lock file of its own
// (made at submit, removed with the job), so that a process stopped while
// it holds one delays only that job; format 2 had 1,024 lock files shared
// by all jobs; format 1 had a lock file per job and rewrote the record at
// each claim (format 2 to 7 claim with a note in the lease file). Open
// upgrades a store of format 1 to 7 in place (its files are all valid in
// format 8): every process sharing it must be upgraded together, as the
// lock protocols do not exclude each other (docs/operations.md in the
// jobdir repository).
const FormatVersion = 8

// Errors returned by Open. Test for them with errors.Is.
var (
	// ErrUnsupportedFilesystem is returned by Open when the directory is on
	// a network or userspace filesystem (NFS, SMB/CIFS, FUSE, Ceph) where
	// the store cannot keep its guarantees, unless
	// Options.AllowUnsafeFilesystem is set.
	ErrUnsupportedFilesystem = errors.New("filestore: unsupported filesystem")
	// ErrFormatTooNew is returned by Open when the directory was written by
	// a newer version of the store, whose format this code does not know.
	ErrFormatTooNew = errors.New("filestore: store format is newer than this program supports")
	// ErrNotStore is returned by Open when the directory holds a FORMAT file
	// that is not a jobdir store's.
	ErrNotStore = errors.New("filestore: not a jobdir store")
)

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = jobstore.DefaultMaxPayload
	}
	if c.Backoff == nil {
		c.Backoff = jobstore.Backoff
	}
	if c.RecoverInterval <= 0 {
		c.RecoverInterval = DefaultRecoverInterval
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
