package filestore

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// durability makes the store's changes durable. Its mode is fixed at Open:
//
//   - fsync per file and directory (the default): each new file is fsynced,
//     before it is renamed or linked into place (file reports true) or,
//     where its name replaces nothing, once in place (placed), and each
//     directory whose entries changed is fsynced after (dir);
//     concurrent callers that changed one directory share one fsync of it
//     (group commit, see groupSync). Where a syncfs(2) reaches the disk,
//     two changes that need more: a large SubmitBatch writes its files
//     unsynced and makes them durable with one syncfs instead (batch), and
//     the new records placed by Submit and by the moves of Complete,
//     Release, Cancel, Retry and recovery (moved) share one syncfs between
//     the callers that wait at the same moment, while a caller alone
//     fsyncs its file and directory (see flushGroup).
//   - shared syncfs (Options.SyncFS, Linux, where a syncfs reaches the
//     disk): new files are not fsynced one by one; dir is one syncfs(2) of
//     the store's file system, shared by every caller waiting at that
//     moment, which makes their files and their directory entries durable
//     at once.
//   - none (Options.NoSync): file reports false and dir and batch flush
//     nothing.
//
// Whether a syncfs reaches the disk is decided once at Open from the kind
// of file system (choose, syncFSReaches): a syncfs of a FUSE file system
// never reaches its daemon, so there durability rests on fsyncs alone.
//
// Every other part of the store calls file, dir and batch, never fsync or
// syncfs itself. It is safe for concurrent use. TestDurabilityModes shows
// the three modes in the file operations of a Submit and a large
// SubmitBatch; TestNoSyncFSOnUnknownFS the fsyncs that replace every
// syncfs on a file system where it is not known to reach the disk;
// TestGroupSync the shared fsyncs; TestFaults every step of every
// operation failed or crashed, with and without Options.SyncFS.
type durability struct {
	// none is Options.NoSync.
	none bool
	// root is the store's directory; dir names are relative to it.
	root string
	// fs is the store's file operations (Store.fs, which Open pins to the
	// store's directory once it is open).
	fs *fileOps
	// batchMin is the smallest batch that batch makes durable with one
	// syncfs rather than an fsync each (syncFSBatch).
	batchMin int
	// syncFSOK says that a syncfs(2) of the store's file system is known
	// to make its files durable (syncFSReaches), and fsName names that
	// file system; both are set by choose.
	syncFSOK bool
	fsName   string

	// dirs share the fsyncs of each directory between concurrent callers.
	dirsMu sync.Mutex
	dirs   map[string]*groupSync

	// shared, with Options.SyncFS, is the syncfs(2) every dir call waits
	// for, shared through sharedGroup; nil in the other modes.
	shared      syncer
	sharedGroup *groupSync
	// sharedMu is held shared while shared is in use, and exclusively by
	// close to close it; closed is set by close.
	sharedMu sync.RWMutex
	closed   bool

	// moves, in fsync mode where a syncfs reaches the disk, shares the
	// flushes of moved between callers: movesFS is the store's file
	// system, opened at Open (openMoves). nil in the other modes, and
	// where a syncfs is not known to reach the disk.
	moves   *flushGroup
	movesFS syncer
	// share, once a group first flushes with a syncfs, shares those
	// flushes with the store's other processes (syncShare); nil until
	// then, and where it cannot. sharePath and sharePerm are its file's.
	share     atomic.Pointer[syncShare]
	sharePath string
	sharePerm os.FileMode
	// shareJoin is when a flush next tries to open it, after a try that
	// found its lock held for too long. sharePath, and it, are used by
	// the flush of moves alone, one at a time (flushGroup).
	shareJoin time.Time
	// cost tells moved whether the syncfs of several callers has been
	// quick enough to keep using (flushCost).
	cost flushCost
	// log reports a syncfs too slow to share (Debug).
	log *slog.Logger
}

func newDurability(root string, fs *fileOps, noSync bool) *durability {
	return &durability{none: noSync, root: root, fs: fs, batchMin: syncFSBatch, dirs: make(map[string]*groupSync)}
}

// choose decides, at Open, whether syncfs(2) may make changes durable on
// the store's file system. A file system that cannot be told is taken for
// one where it may not.
func (d *durability) choose() {
	fi, err := (*d.fs).FSInfo(d.root)
	if err != nil {
		d.syncFSOK, d.fsName = false, "a file system of unknown type"
		return
	}
	d.syncFSOK, d.fsName = syncFSReaches(fi)
}

// open opens the store's file system for the shared syncfs of
// Options.SyncFS, before anything is written that a syncfs must cover.
// Where there is no syncfs(2), or it is not known to reach the disk, it
// logs so and stays in fsync mode.
func (d *durability) open(log *slog.Logger) error {
	if d.none {
		return nil
	}
	if !d.syncFSOK {
		log.Warn("filestore: Options.SyncFS is not used: on " + d.fsName + " a syncfs(2) is not known to reach the disk; fsyncing each file and directory instead")
		return nil
	}
	sy, err := (*d.fs).SyncFS(d.root)
	if errors.Is(err, errors.ErrUnsupported) {
		log.Warn("filestore: SyncFS needs syncfs(2), which this system lacks; fsyncing each file")
		return nil
	}
	if err != nil {
		return err
	}
	d.shared, d.sharedGroup = sy, newGroupSync()
	return nil
}

// openMoves, in fsync mode where a syncfs reaches the disk, opens the
// store's file system for the syncfs that moved shares between callers.
// Like the shared syncfs of Options.SyncFS it is opened before anything
// is written that it must cover, so that writeback errors from then on
// are reported by the next syncfs. Without syncfs(2), moved fsyncs each
// file and directory. Those flushes are shared with the store's other
// processes through the file at sharePath (made with perm), opened at the
// first (syncShare).
func (d *durability) openMoves(log *slog.Logger, sharePath string, perm os.FileMode) error {
	d.log = log
	if d.none || d.shared != nil || !d.syncFSOK {
		return nil
	}
	sy, err := (*d.fs).SyncFS(d.root)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return err
	}
	d.movesFS, d.moves = sy, newFlushGroup()
	d.sharePath, d.sharePerm = sharePath, perm
	return nil
}

// mode describes, for people, how changes are made durable (Store.Durability).
func (d *durability) mode() string {
	switch {
	case d.none:
		return "none (NoSync): nothing is flushed, so a power cut may lose acknowledged changes or bring back undone ones"
	case d.shared != nil:
		return fmt.Sprintf("syncfs: one syncfs(2) of the store's file system (%s), shared by the operations waiting at that moment", d.fsName)
	case d.moves != nil:
		return fmt.Sprintf("fsync: each new file and each changed directory; a batch of %d jobs or more, and the new records of operations that wait at the same moment, with one syncfs(2) of the store's file system (%s), shared with the store's other processes", d.batchMin, d.fsName)
	}
	return fmt.Sprintf("fsync: each new file and each changed directory; never syncfs(2), which is not known to reach the disk on %s", d.fsName)
}

// close closes the shared syncfs; dir calls after it return
// jobstore.ErrClosed.
func (d *durability) close() {
	d.sharedMu.Lock()
	defer d.sharedMu.Unlock()
	d.closed = true
	if d.shared != nil {
		_ = d.shared.Close()
	}
	if sh := d.share.Load(); sh != nil {
		sh.close()
	}
	if d.movesFS != nil {
		_ = d.movesFS.Close()
	}
}

// file reports whether a new file is fsynced before it is renamed or
// linked into place: durable, and not the shared syncfs, whose dir covers
// the file's data too.
func (d *durability) file() bool { return !d.none && d.shared == nil }

// placed makes durable the data of the new file at path, written
// unsynced and then renamed or linked into place (see fileOps.SyncFile):
// in fsync mode an fsync of the file; in the other modes nothing, since
// the shared syncfs of the caller's dir covers it, or nothing is flushed.
// An fsync of a file in place commits its new name with its data, so the
// directory's fsync after it has nothing left to commit: one journal
// commit for the two, where a file fsynced before its rename costs one
// of its own. Only a file whose name replaced nothing may be placed so: a
// power cut before the fsync may leave the name on an empty or cut-short
// file, which Open sets aside (ProblemTornRecord), and that must not be
// the only copy of an acknowledged record.
func (d *durability) placed(path string) error {
	if !d.file() {
		return nil
	}
	if err := (*d.fs).SyncFile(path); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// mark returns what a caller of moved notes before it writes its new file
// (see syncShare.mark).
func (d *durability) mark() uint64 {
	if d.moves == nil {
		return 0
	}
	return d.share.Load().mark()
}

// moved makes durable a new file at path (none if path is "", see
// entries) whose name replaced nothing in the store's directory dir (a
// state directory): its data and its name, as placed and then dir would.
// since is what mark returned before the file was written.
// With the shared syncfs of Options.SyncFS that is dir's syncfs. In fsync
// mode where a syncfs reaches the disk, the callers waiting at the same
// moment share one flush (flushGroup): a caller alone fsyncs its file and
// dir; several are covered by one syncfs(2), which makes every file
// written before it durable with its directory entries, instead of two
// fsyncs each, unless a recent syncfs was slow (flushCost: another
// program is writing a lot to the file system) or one failed, when they
// fsync their files at once and each directory once. That syncfs may be
// another process's, made after the callers' changes (syncShare). A
// failed flush fails every caller it covered.
func (d *durability) moved(path, dir string, since uint64) error {
	if d.moves == nil {
		if path != "" {
			if err := d.placed(path); err != nil {
				return err
			}
		}
		return d.dir(dir)
	}
	d.sharedMu.RLock()
	defer d.sharedMu.RUnlock()
	if d.closed {
		return fmt.Errorf("filestore: syncfs: %w", jobstore.ErrClosed)
	}
	return d.moves.flush(&flushWaiter{path: path, dir: dir, since: since}, d.flushOne, d.flushSeveral)
}

// entries makes the entries of the store's state directory dir durable,
// as dir does; where new records share a flush (moved), it joins theirs:
// alone it fsyncs dir, with others it is covered by their syncfs. The
// claim flusher makes claims durable with it, so that the claims and the
// Completes of a moment cost one journal commit, not two. Entries are
// written through the journal, whose failure fails every later syncfs,
// not as data written back, whose errors a syncfs reports only to
// descriptors opened before them: any process's syncfs covers them
// (since is the highest mark).
func (d *durability) entries(dir string) error { return d.moved("", dir, math.MaxUint64) }

// canSyncAll reports whether a syncfs may make the store's file system
// durable at once: one reaches its disk, and none failed in this Store.
func (d *durability) canSyncAll() bool { return d.syncFSOK && !d.cost.isBroken() }

// prepareSyncAll returns, before anything is written that it must cover,
// the flush that will make everything written on the store's file system
// durable: syncAll where new records share a syncfs, the shared syncfs of
// Options.SyncFS, else (NoSync, whose Stores still replay the journals of
// others) a syncfs of its own, opened now, so that it reports the
// writeback errors of what is written after. done releases it.
func (d *durability) prepareSyncAll() (sync func(since uint64) error, done func(), err error) {
	switch {
	case !d.canSyncAll():
		return nil, nil, errNoSyncFS
	case d.moves != nil:
		return d.syncAll, func() {}, nil
	case d.shared != nil:
		return func(uint64) error { return d.dir(".") }, func() {}, nil
	}
	sy, err := (*d.fs).SyncFS(d.root)
	if err != nil {
		return nil, nil, err
	}
	return func(uint64) error { return sy.Sync() }, func() { _ = sy.Close() }, nil
}

// errNoSyncFS says syncAll cannot make the file system durable at once:
// no syncfs reaches its disk, or one failed before (whose writeback
// errors another descriptor may have been told).
var errNoSyncFS = errors.New("no syncfs to make everything durable with")

// syncAll makes every file written on the store's file system before the
// call durable, with one syncfs(2) that begins after the call (one of
// this Store's, or another process's through a descriptor opened before
// the mark since, see syncShare), whatever flushCost says of syncfs
// flushes: the submission journal's cover, which has no other way. It
// shares the flushes of moved, one at a time.
func (d *durability) syncAll(since uint64) error {
	if d.moves == nil || !d.canSyncAll() {
		return errNoSyncFS
	}
	d.sharedMu.RLock()
	defer d.sharedMu.RUnlock()
	if d.closed {
		return fmt.Errorf("filestore: syncfs: %w", jobstore.ErrClosed)
	}
	return d.moves.flush(&flushWaiter{since: since, all: true}, d.flushOne, d.flushSeveral)
}

// flushOne makes one caller's new file durable: an fsync of the file and
// one of its directory (only the directory for a caller of entries).
func (d *durability) flushOne(w *flushWaiter) error {
	if w.all {
		return d.flushSeveral([]*flushWaiter{w})
	}
	start := time.Now()
	var err error
	if w.path != "" {
		err = d.placed(w.path)
	}
	if err == nil {
		err = d.dir(w.dir)
	}
	if err == nil && w.path != "" {
		d.cost.lone(time.Since(start))
	}
	return err
}

// flushSeveral makes the new files of several callers durable: with one
// syncfs, or, while flushCost says a syncfs is slow, with an fsync of each
// file (batchWriters at a time) and then of each directory.
func (d *durability) flushSeveral(ws []*flushWaiter) error {
	d.joinShare()
	start := time.Now()
	if d.cost.useSyncFS(start) || slices.ContainsFunc(ws, func(w *flushWaiter) bool { return w.all }) {
		took, err := d.syncMoves(ws)
		if err != nil {
			// A syncfs reports a write error once per descriptor, and
			// the write that failed may have been of a file that the
			// next group covers: that group's syncfs would find nothing
			// left to write and no new error. An fsync of that file
			// reports the error it has not reported yet, so from now on
			// every group fsyncs its files.
			d.cost.failed()
			return fmt.Errorf("syncfs: %w", err)
		}
		if took == 0 {
			return nil // another process's syncfs: nothing of this one's to time
		}
		if fsyncs, backoff, slow := d.cost.shared(len(ws), took, time.Now()); slow && d.log != nil {
			d.log.Debug("filestore: a syncfs took much longer than fsyncs of its files would have (another program is writing a lot to the file system?): fsyncing each file for a while",
				"files", len(ws), "syncfs", took, "fsyncs", fsyncs, "for", backoff)
		}
		return nil
	}
	errs := make([]error, len(ws))
	sem := make(chan struct{}, batchWriters)
	var wg sync.WaitGroup
	dirs := map[string]bool{}
	for i, w := range ws {
		dirs[w.dir] = true
		if w.path == "" {
			continue // a caller of entries: its directory only
		}
		sem <- struct{}{}
		wg.Go(func() {
			errs[i] = d.placed(w.path)
			<-sem
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for dir := range dirs {
		if err := d.dir(dir); err != nil {
			return err
		}
	}
	return nil
}

// joinShare opens the flushes shared with the store's other processes
// (syncShare) if they are not open yet and may be tried.
func (d *durability) joinShare() {
	if d.share.Load() == nil && d.sharePath != "" && !time.Now().Before(d.shareJoin) {
		sh, err := joinSyncShare(d.sharePath, d.sharePerm, d.movesFS, d.log)
		switch {
		case err == nil:
			d.share.Store(sh)
		case errors.Is(err, errShareBusy):
			d.shareJoin = time.Now().Add(shareSolo)
			d.log.Debug("filestore: cannot share flushes with the store's other processes yet; flushing alone for a while", "err", err)
		default:
			d.log.Warn("filestore: cannot share flushes with the store's other processes; flushing alone", "path", d.sharePath, "err", err)
			d.sharePath = ""
		}
	}
}

// syncMoves makes the new files of ws durable with a syncfs: one shared
// with the store's other processes (syncShare), or this Store's own, and
// returns how long its own took (zero if it made none): what flushCost
// judges, not the wait for another's, nor for its lock.
func (d *durability) syncMoves(ws []*flushWaiter) (time.Duration, error) {
	sh := d.share.Load()
	if sh == nil {
		start := time.Now()
		err := d.movesFS.Sync()
		return time.Since(start), err
	}
	since := uint64(math.MaxUint64)
	for _, w := range ws {
		since = min(since, w.since)
	}
	return sh.sync(since)
}

// Syncfs flushes are slow when they have lately taken more than
// syncFSSlowFactor times what fsyncs of their files would: a lone flush
// (an fsync of a file and of its directory) for each batchWriters files,
// which flushSeveral fsyncs at once. "Lately" is a moving average of that
// ratio that gives each syncfs a weight of 1/syncFSSlowWeight and starts
// at 1: a syncfs now and then that waits for a journal commit under load
// must not count (one alone has to take about 25 times the fsyncs'
// time), a few slow ones in a row must. A syncfs waits for every dirty
// file of the file system, and another program writing a lot there makes
// it wait for that program's data. Groups then fsync their files for
// syncFSBackoff, after which a syncfs is tried again, its average
// starting over; each slow spell with no quick syncfs between doubles the
// time, up to syncFSBackoffMax. On a file system of the store's own, a
// syncfs of a hundred new records took 15 ms where a lone flush took
// 1.4 ms; under a work-off of 100 workers, syncfs of 2 to 100 records took
// 2 to 17 ms where a lone flush took 2 to 16 ms, and a group fsyncing its
// files 13 to 20 ms.
const (
	syncFSSlowFactor = 4
	syncFSSlowWeight = 8
	syncFSBackoff    = time.Second
	syncFSBackoffMax = time.Minute
)

// flushCost keeps what moved needs to choose between one syncfs and an
// fsync of each file: the typical duration of a lone flush (an average
// that gives each new one a weight of 1/8), how much longer than fsyncs
// the syncfs flushes have lately taken (slowness), until when groups
// fsync each file because syncfs flushes were slow, and the back-off
// after the next slow spell; and whether a syncfs failed, after which
// groups fsync their files for good. Safe for concurrent use.
type flushCost struct {
	mu         sync.Mutex
	loneAvg    time.Duration
	slowness   float64 // 0 stands for 1, the average's start
	fsyncUntil time.Time
	backoff    time.Duration
	broken     bool
}

// failed records that a syncfs failed.
func (c *flushCost) failed() {
	c.mu.Lock()
	c.broken = true
	c.mu.Unlock()
}

// isBroken reports whether a syncfs failed.
func (c *flushCost) isBroken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

// fsyncs is how long fsyncs of n files would take, from the typical lone
// flush; c.mu is held.
func (c *flushCost) fsyncs(n int) time.Duration {
	return c.loneAvg * time.Duration((n+batchWriters-1)/batchWriters)
}

// lone records the duration of a lone flush.
func (c *flushCost) lone(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loneAvg == 0 {
		c.loneAvg = d
		return
	}
	c.loneAvg += (d - c.loneAvg) / 8
}

// useSyncFS reports whether a group flushes with one syncfs at now.
func (c *flushCost) useSyncFS(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.broken && !now.Before(c.fsyncUntil)
}

// shared records that a syncfs of n callers' files, done at now, took
// took, and reports whether syncfs flushes are now slow (see
// syncFSSlowFactor), with what fsyncs of these files would have taken
// and how long groups now fsync each file instead: syncFSBackoff, or
// twice the time before if no quick syncfs came since, up to
// syncFSBackoffMax. Before any lone flush was timed nothing is slow.
func (c *flushCost) shared(n int, took time.Duration, now time.Time) (fsyncs, backoff time.Duration, slow bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fsyncs = c.fsyncs(n)
	if fsyncs == 0 {
		return 0, 0, false
	}
	ratio := float64(took) / float64(fsyncs)
	if ratio <= syncFSSlowFactor {
		c.backoff = 0 // a quick syncfs ends the doubling
	}
	if c.slowness == 0 {
		c.slowness = 1
	}
	c.slowness += (ratio - c.slowness) / syncFSSlowWeight
	if c.slowness <= syncFSSlowFactor {
		return fsyncs, 0, false
	}
	c.slowness = 0
	c.backoff = min(max(2*c.backoff, syncFSBackoff), syncFSBackoffMax)
	c.fsyncUntil = now.Add(c.backoff)
	return fsyncs, c.backoff, true
}

// dir makes the entries of the store's directory name durable (a state
// directory, or "." for the store's own), and with the shared syncfs
// every file written before the call too. Concurrent callers share the
// flush (group commit).
func (d *durability) dir(name string) error {
	if d.none {
		return nil
	}
	if d.shared != nil {
		// One syncfs for every waiting operation, whatever directory they
		// changed. The descriptor was opened at Open, so the writeback
		// errors since then are reported (Linux 5.8 and later), each to
		// the syncfs that follows it and so to every caller it covers.
		d.sharedMu.RLock()
		defer d.sharedMu.RUnlock()
		if d.closed {
			return fmt.Errorf("filestore: syncfs: %w", jobstore.ErrClosed)
		}
		if err := d.sharedGroup.sync(d.shared.Sync); err != nil {
			return fmt.Errorf("syncfs (%s/): %w", name, err)
		}
		return nil
	}
	d.dirsMu.Lock()
	g := d.dirs[name]
	if g == nil {
		g = newGroupSync()
		d.dirs[name] = g
	}
	d.dirsMu.Unlock()
	p := filepath.Join(d.root, name)
	if err := g.sync(func() error { return (*d.fs).SyncDir(p) }); err != nil {
		return fmt.Errorf("fsync %s/: %w", name, err)
	}
	return nil
}

// batch has write write n new files in directory at, fsyncing each if
// write is told to, and makes them durable: in fsync mode a batch of
// batchMin files or more is written unsynced and made durable with one
// syncfs of at's file system, where a syncfs reaches the disk (one fsync
// each elsewhere, and where there is no syncfs); in the other modes write
// does as file says, and the caller's dir after the renames does the rest.
func (d *durability) batch(at string, n int, write func(fsync bool) error) error {
	if !d.file() || n < d.batchMin || !d.syncFSOK {
		return write(d.file())
	}
	sy, err := (*d.fs).SyncFS(at)
	if errors.Is(err, errors.ErrUnsupported) {
		return write(true)
	}
	if err != nil {
		return fmt.Errorf("open for syncfs: %w", err)
	}
	defer sy.Close()
	if err := write(false); err != nil {
		return err
	}
	if err := sy.Sync(); err != nil {
		return fmt.Errorf("syncfs: %w", err)
	}
	return nil
}

// groupSync shares directory fsyncs between concurrent callers (group
// commit). A caller needs an fsync that starts after its own change to the
// directory; while one fsync runs, every caller that arrives waits for the
// next one, which a single caller then makes for all of them. One caller
// alone pays exactly one fsync, as before.
type groupSync struct {
	mu   sync.Mutex
	cond *sync.Cond
	// started and completed count the fsyncs begun and finished; running
	// says one is in flight.
	started, completed uint64
	running            bool
	// failed is the latest generation whose fsync failed, and err its
	// error. A caller covered by a generation at or before a failure gets
	// the error: after a failed fsync nothing it covered is known durable.
	failed uint64
	err    error
}

func newGroupSync() *groupSync {
	g := &groupSync{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// sync returns once an fsync (made by fsync) that started after the call
// has finished, with its error.
func (g *groupSync) sync(fsync func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := g.started + 1
	for g.completed < want {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := fsync()
		g.mu.Lock()
		g.running = false
		g.completed = gen
		if err != nil {
			g.failed, g.err = gen, err
		}
		g.cond.Broadcast()
	}
	if g.failed >= want && g.err != nil {
		return g.err
	}
	return nil
}

// flushGroup shares the flushes of new files between the callers that
// wait at the same moment. A caller arrives with its change made and
// needs a flush that begins after it; while one flush runs, every caller
// that arrives waits, and the next flush, made by one of them, covers
// all of them: with one (a flush of its own) if it is alone, else with
// several (a flush of all of theirs). One caller alone pays exactly its
// own flush, as before; under load the flushes fall towards one per
// flush's duration, whatever the number of callers. Each caller gets the
// error of the flush that covered it.
type flushGroup struct {
	mu   sync.Mutex
	cond *sync.Cond
	// running says a flush is under way; pending are the callers that
	// arrived since it began, in order.
	running bool
	pending []*flushWaiter
}

// flushWaiter is one caller of flushGroup.flush: the new file (none for a
// caller of entries), its directory and the mark noted before it was
// written, and, once a flush covered it, its outcome.
type flushWaiter struct {
	path, dir string
	since     uint64 // see moved
	all       bool   // syncAll's: a syncfs, whatever flushCost says
	done      bool
	err       error
}

func newFlushGroup() *flushGroup {
	g := &flushGroup{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// flush returns once a flush that began after the call covered w, with
// that flush's error: one(w) if w was the only caller waiting, else
// several of all the callers waiting.
func (g *flushGroup) flush(w *flushWaiter, one func(*flushWaiter) error, several func([]*flushWaiter) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = append(g.pending, w)
	for !w.done {
		if g.running {
			g.cond.Wait()
			continue
		}
		batch := g.pending
		g.pending, g.running = nil, true
		g.mu.Unlock()
		var err error
		if len(batch) == 1 {
			err = one(batch[0])
		} else {
			err = several(batch)
		}
		g.mu.Lock()
		for _, b := range batch {
			b.done, b.err = true, err
		}
		g.running = false
		g.cond.Broadcast()
	}
	return w.err
}
