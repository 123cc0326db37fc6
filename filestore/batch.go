package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// batchWriters is how many goroutines of one SubmitBatch write records at
// once (and fsync them, for a small batch). The disk merges concurrent
// flushes, so N new records cost far less than N sequential fsyncs.
const batchWriters = 16

// batchRenamers is how many goroutines of one SubmitBatch rename its
// records into place at once. A rename from tmp/ into a state directory
// holds a lock of the whole file system in the kernel, so only its
// look-ups overlap: on 2 cores, 2 to 16 renamers published a batch of
// 1,000 jobs 15-25% sooner than one, and with 16 a profile showed 6% of
// the CPU spinning on that lock.
const batchRenamers = 4

// syncFSBatch is the smallest batch whose records are made durable with
// one syncfs(2) rather than an fsync each. A syncfs writes back everything
// dirty on the file system, so it also waits for other writers' data: it
// pays only for a batch large enough that one flush beats many.
const syncFSBatch = 32

// batchJob is one job SubmitBatch creates.
type batchJob struct {
	i      int // index in the specs
	job    jobstore.Job
	hash   string   // key file name, "" without a key
	tmp    string   // its temp file, "" once published or removed
	nf     *newFile // a journaled batch's: its record's new file, nil once placed or dropped
	unlock func()   // releases its record lock; nil until taken
	linked bool     // its key file is published
	queued bool     // its record is in queued/
	// env and data, for a journaled batch, are its record (naming its
	// entry) and its encoding.
	env  *envelope
	data []byte
}

// SubmitBatch submits every spec as Submit would and returns one result per
// spec, in order. It makes the whole batch durable with a bounded number of
// flushes: the records are written by batchWriters goroutines at once and
// made durable with one syncfs (or, for a small batch, an fsync each), the
// jobs' record locks taken, then the key files are linked and keys/ fsynced
// once, then the records renamed into queued/ (by batchRenamers goroutines)
// and queued/ fsynced once (docs/format.md in the repository). A crash
// during a batch may leave some of its jobs queued, each whole. On an error
// in writing or publishing it takes back every job it created; a key that
// another process took meanwhile is then resolved as Submit does, and if
// that fails the error says that the rest of the batch was submitted.
func (s *Store) SubmitBatch(ctx context.Context, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
	if err := s.enter(ctx, "submit batch"); err != nil {
		return nil, err
	}
	if err := storekit.ValidateBatch(specs, s.opts.MaxPayload); err != nil {
		return nil, fmt.Errorf("filestore: submit batch: %w", err)
	}
	if slices.ContainsFunc(specs, graphSpec) {
		out, err := s.submitGraphRetry(ctx, specs, true)
		if err != nil {
			return nil, fmt.Errorf("filestore: submit batch: %w", err)
		}
		return out, nil
	}
	out := make([]jobstore.Submitted, len(specs))
	// first maps a key to the index of its first spec; later specs with
	// that key get the same result.
	first := make(map[string]int)
	var news []*batchJob
	now := time.Now()
	for i, spec := range specs {
		if spec.Key == "" {
			news = append(news, &batchJob{i: i, job: jobstore.NewJob(spec, now)})
			continue
		}
		if _, dup := first[spec.Key]; dup {
			continue
		}
		first[spec.Key] = i
		hash := keyName(spec.Key)
		s.mu.Lock()
		id, ok := s.keys[hash]
		s.mu.Unlock()
		if ok {
			if j, err := s.jobWithKey(ctx, id, spec.Key); err == nil {
				out[i] = jobstore.Submitted{Job: j}
				continue
			}
		}
		news = append(news, &batchJob{i: i, job: jobstore.NewJob(spec, now), hash: hash})
	}
	taken, err := s.submitBatch(ctx, news, false)
	if err != nil {
		return nil, fmt.Errorf("filestore: submit batch: %w", err)
	}
	for _, b := range news {
		if !taken[b.i] {
			out[b.i] = jobstore.Submitted{Job: b.job, Created: true}
		}
	}
	// A key another process took meanwhile: that job is the answer, found
	// (or a stale key file cleared) as Submit does.
	for _, b := range news {
		if taken[b.i] {
			j, created, err := s.Submit(ctx, specs[b.i])
			if err != nil {
				return nil, fmt.Errorf("filestore: submit batch: spec %d (the batch's other jobs were submitted): %w", b.i, err)
			}
			out[b.i] = jobstore.Submitted{Job: j, Created: created}
		}
	}
	for i, spec := range specs {
		if spec.Key != "" && first[spec.Key] != i {
			out[i] = jobstore.Submitted{Job: out[first[spec.Key]].Job}
		}
	}
	return out, nil
}

// submitBatch writes and publishes news. It returns the indexes of the
// jobs whose key file another job owned: those were not created. With
// whole set, one such key fails the batch with errKeyRace before any of
// its records is published (a graph must not be published in part). On
// error nothing of the batch is left.
func (s *Store) submitBatch(ctx context.Context, news []*batchJob, whole bool) (map[int]bool, error) {
	taken := make(map[int]bool)
	if len(news) == 0 {
		return taken, nil
	}
	// fail takes back what the batch made, while its locks are still held
	// (the deferred unlocks run after it).
	fail := func(err error) (map[int]bool, error) {
		s.takeBack(news)
		return nil, err
	}
	if !whole && !slices.ContainsFunc(news, func(b *batchJob) bool { return b.hash != "" || b.job.State != jobstore.StateQueued }) {
		// Taken before any record lock: taking one may replay it.
		if jr := s.journalFor(ctx); jr != nil {
			if done, err := s.submitBatchJournaled(ctx, jr, news); done || err != nil {
				return taken, err
			}
		}
	}
	if err := s.writeDurably(ctx, news); err != nil {
		return fail(err)
	}
	// The record locks of the jobs are held from before their key files
	// are linked until their records are durable, as in Submit. Each is a
	// new job's own lock file, which nobody else knows yet: no wait.
	defer func() {
		for _, b := range news {
			if b.unlock != nil {
				b.unlock()
			}
		}
	}()
	if err := s.lockNewJobs(ctx, news); err != nil {
		return fail(err)
	}
	linked := false
	for _, b := range news {
		if b.hash == "" {
			continue
		}
		err := s.fs.Link(b.tmp, s.keyPath(b.hash))
		if errors.Is(err, fs.ErrExist) {
			taken[b.i] = true
			_ = s.fs.Remove(b.tmp)
			b.tmp = ""
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("publish key of job %s: %w", b.job.ID, err))
		}
		b.linked, linked = true, true
	}
	if whole && len(taken) > 0 {
		return fail(errKeyRace)
	}
	if linked {
		if err := s.durable.dir(dirKeys); err != nil {
			return fail(err)
		}
	}
	// Renamed by batchRenamers goroutines (see there): nobody can claim a
	// job before its record lock is released. A graph's jobs are renamed
	// one after the other, in order, each after the jobs of the batch it
	// names (AfterSpecs point back), so that a crash halfway leaves a
	// prefix of the graph, never a job without a job it names
	// (TestFaults/SubmitAfter).
	renamers := batchRenamers
	if whole {
		renamers = 1
	}
	dirs := make([]atomic.Bool, len(stateDirs))
	err := inParallel(ctx, renamers, news, func(b *batchJob) error {
		if b.tmp == "" {
			return nil
		}
		// queued/, or done/ for a job that a failed dependency canceled
		// at once (submitGraph).
		d := dirOf(b.job.State)
		if err := s.fs.Rename(b.tmp, s.recordPath(d, b.job.ID)); err != nil {
			return fmt.Errorf("publish job %s: %w", b.job.ID, err)
		}
		b.tmp, b.queued = "", true
		dirs[slices.Index(stateDirs, d)].Store(true)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	for i, d := range stateDirs {
		if dirs[i].Load() {
			if err := s.durable.dir(d); err != nil {
				return fail(err)
			}
		}
	}
	for _, b := range news {
		if b.queued {
			s.published(b.job, b.hash)
		}
	}
	return taken, nil
}

// submitBatchJournaled submits news, jobs without keys, through the
// Store's submission journal: their records written unsynced as new
// files (fileOps.WriteNew: on Linux without a name, in tmp/<sid>/;
// batchWriters at a time) and their entries appended and fdatasynced at
// once (journal.go), and only then named in queued/ (batchRenamers at a
// time). A job is durable before anyone can see it, so the batch takes
// no record locks: with a thousand held at once, the kernel's list of
// them made every lock a walk of a thousand. done is false, with no error,
// if the journal could not take them, or failed them: nothing of the
// batch is visible then, and its entries, if any were written, are voided
// (submit as before). Once the entries are durable, the records are named
// even if ctx ends. A naming that fails takes back the records published so far, each
// under its record lock, and voids the batch's entries; one that another
// process claimed meanwhile stays, and the error says so.
func (s *Store) submitBatchJournaled(ctx context.Context, jr *journal, news []*batchJob) (done bool, err error) {
	jobs := make([]jobstore.Job, len(news))
	for i, b := range news {
		jobs[i] = b.job
	}
	refs := func() []string {
		out := make([]string, 0, len(news))
		for _, b := range news {
			if b.env != nil {
				out = append(out, b.env.Logged)
			}
		}
		return out
	}
	ok, first, jerr := s.journaled(jr, jobs, func(envs []envelope, data [][]byte) error {
		for i, b := range news {
			b.env, b.data = &envs[i], data[i]
		}
		return inParallel(ctx, batchWriters, news, func(b *batchJob) error {
			nf, err := s.fs.WriteNew(s.recordPath(dirQueued, b.job.ID), s.tmpDir, b.data, s.filePerm)
			if err != nil {
				return fmt.Errorf("write job %s: %w", b.job.ID, err)
			}
			b.nf = nf
			return nil
		})
	})
	if !ok {
		for _, b := range news {
			if b.nf != nil {
				s.fs.DropNew(b.nf)
				b.nf = nil
			}
		}
		if jerr != nil && first >= 0 && jr.isBroken() {
			// The entries may be on disk: void them, for no replay to
			// bring back jobs this batch now submits anew. (Only once
			// reserved: before, their offsets may be another submit's.)
			s.log.Warn("filestore: the submission journal failed; submits make their records durable one by one", "err", jerr)
			jr.void(refs())
		}
		if first >= 0 {
			jr.published(first)
		}
		for _, b := range news {
			b.env, b.data = nil, nil
		}
		return false, nil
	}
	// The entries are durable: the records are named whatever becomes of
	// ctx, as a submit that returned at this point would have its job.
	err = inParallel(context.WithoutCancel(ctx), batchRenamers, news, func(b *batchJob) error {
		nf := b.nf
		b.nf = nil
		if err := s.fs.PlaceNew(nf); err != nil {
			return fmt.Errorf("publish job %s: %w", b.job.ID, err)
		}
		b.queued = true
		return nil
	})
	if err != nil {
		// The entries of the jobs taken back (or never published) are
		// voided; those of the jobs kept stay, for a replay to restore
		// their records after a power cut.
		kept := 0
		var gone []string
		for _, b := range news {
			if b.nf != nil {
				s.fs.DropNew(b.nf)
				b.nf = nil
			}
			if !b.queued {
				gone = append(gone, b.env.Logged)
				continue
			}
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			unlock, lerr := s.lockJob(lctx, b.job.ID)
			cancel()
			if lerr != nil || !s.takeBackRecord(b.job.ID, jobstore.StateQueued) {
				kept++
			} else {
				gone = append(gone, b.env.Logged)
			}
			if lerr == nil {
				unlock()
			}
		}
		jr.void(gone)
		jr.published(first)
		if kept > 0 {
			return true, fmt.Errorf("%w (%d of the batch's jobs were submitted and are kept: another process had them already)", err, kept)
		}
		return true, err
	}
	jr.published(first)
	for _, b := range news {
		s.published(b.job, "")
	}
	return true, nil
}

// writeDurably writes the temp file of every job in news and, unless
// Options.NoSync, makes them durable: with one syncfs for a large batch,
// else (or where there is no syncfs) with an fsync each.
func (s *Store) writeDurably(ctx context.Context, news []*batchJob) error {
	return s.durable.batch(s.tmpDir, len(news), func(fsync bool) error { return s.writeBatch(ctx, news, fsync) })
}

// lockNewJobs takes the record lock of every job of news, each a new
// job's own lock file, batchWriters at a time: creating them one after the
// other was a quarter of a batch's time. Each lock taken is in its job's
// unlock, also on error.
func (s *Store) lockNewJobs(ctx context.Context, news []*batchJob) error {
	return inParallel(ctx, batchWriters, news, func(b *batchJob) error {
		unlock, err := s.lockNewJob(ctx, &b.job)
		if err != nil {
			return err
		}
		b.unlock = unlock
		return nil
	})
}

// writeBatch writes the temp file of every job in news, batchWriters at a
// time, each fsynced if fsync is set.
func (s *Store) writeBatch(ctx context.Context, news []*batchJob, fsync bool) error {
	return inParallel(ctx, batchWriters, news, func(b *batchJob) error {
		data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 1, Job: b.job})
		if err == nil {
			b.tmp, err = s.fs.WriteTemp(s.tmpDir, data, s.filePerm, fsync)
		}
		if err != nil {
			return fmt.Errorf("write job %s: %w", b.job.ID, err)
		}
		return nil
	})
}

// inParallel calls fn for each job of news from n goroutines (fewer for a
// small batch) and returns the first error; after an error or the end of
// ctx it starts no more calls, and it returns once every call made has
// returned.
func inParallel(ctx context.Context, n int, news []*batchJob, fn func(*batchJob) error) error {
	if len(news) == 1 {
		// One job (a Submit with dependencies): no goroutine.
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(news[0])
	}
	work := make(chan *batchJob)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range min(n, len(news)) {
		wg.Go(func() {
			for b := range work {
				if err := fn(b); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	var err error
feed:
	for _, b := range news {
		select {
		case work <- b:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// takeBack removes whatever a failed batch made: temp files, records in
// queued/ and key files. A record goes before its key file, as in Prune.
// The caller holds the record locks of the jobs it published or linked,
// since before it did, so nobody else can have changed them; each record
// and key file is still checked before it goes (see unpublish).
func (s *Store) takeBack(news []*batchJob) {
	for _, b := range news {
		if b.tmp != "" {
			_ = s.fs.Remove(b.tmp)
		}
		if b.queued && !s.takeBackRecord(b.job.ID, b.job.State) {
			continue // the job stays, with its key
		}
		if b.linked {
			if err := s.removeKeyFile(b.hash, b.job.ID); err != nil {
				s.log.Warn("filestore: submit batch failed; a key file stays (the next submit of the key removes it)", "id", b.job.ID, "err", err)
			}
		}
	}
}
