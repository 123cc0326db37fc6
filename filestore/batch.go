package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// batchWriters is how many goroutines of one SubmitBatch write records at
// once (and fsync them, for a small batch). The disk merges concurrent
// flushes, so N new records cost far less than N sequential fsyncs.
const batchWriters = 16

// syncFSBatch is the smallest batch whose records are made durable with
// one syncfs(2) rather than an fsync each. A syncfs writes back everything
// dirty on the file system, so it also waits for other writers' data: it
// pays only for a batch large enough that one flush beats many.
const syncFSBatch = 32

// batchJob is one job SubmitBatch creates.
type batchJob struct {
	i      int // index in the specs
	job    jobstore.Job
	hash   string // key file name, "" without a key
	tmp    string // its temp file, "" once published or removed
	linked bool   // its key file is published
	queued bool   // its record is in queued/
}

// SubmitBatch submits every spec as Submit would and returns one result per
// spec, in order. It makes the whole batch durable with a bounded number of
// flushes: the records are written by batchWriters goroutines at once and
// made durable with one syncfs (or, for a small batch, an fsync each), then
// the key files are linked and keys/ fsynced once, then the records renamed
// into queued/ and queued/ fsynced once (docs/format.md in the repository). A crash during a
// batch may leave some of its jobs queued, each whole. On an error in
// writing or publishing it takes back every job it created; a key that
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
	if err := s.writeDurably(ctx, news); err != nil {
		return fail(err)
	}
	// The record locks of the jobs are held from before their key files
	// are linked until their records are durable, as in Submit. Each is a
	// new job's own lock file, which nobody else knows yet: no wait.
	unlocks, err := s.lockNewJobs(ctx, news)
	defer func() {
		for _, u := range unlocks {
			if u != nil {
				u()
			}
		}
	}()
	if err != nil {
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
	dirs := map[string]bool{}
	for _, b := range news {
		if b.tmp == "" {
			continue
		}
		// queued/, or done/ for a job that a failed dependency canceled
		// at once (submitGraph).
		d := dirOf(b.job.State)
		if err := s.fs.Rename(b.tmp, s.recordPath(d, b.job.ID)); err != nil {
			return fail(fmt.Errorf("publish job %s: %w", b.job.ID, err))
		}
		b.tmp, b.queued = "", true
		dirs[d] = true
	}
	for _, d := range stateDirs {
		if dirs[d] {
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

// lockNewJobs takes the record lock of every job of news, each a new
// job's own lock file, batchWriters at a time for a large batch: creating
// them one after the other was a quarter of its time. It returns the unlock
// function of each lock it took (nil for the others), also on error.
func (s *Store) lockNewJobs(ctx context.Context, news []*batchJob) ([]func(), error) {
	unlocks := make([]func(), len(news))
	errs := make([]error, len(news))
	if len(news) < syncFSBatch {
		// A small batch: not worth the goroutines.
		for i, b := range news {
			if unlocks[i], errs[i] = s.lockNewJob(ctx, &b.job); errs[i] != nil {
				break
			}
		}
		return unlocks, errors.Join(errs...)
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(batchWriters, len(news)) {
		wg.Go(func() {
			for i := range next {
				unlocks[i], errs[i] = s.lockNewJob(ctx, &news[i].job)
			}
		})
	}
	for i := range news {
		next <- i
	}
	close(next)
	wg.Wait()
	return unlocks, errors.Join(errs...)
}

// writeDurably writes the temp file of every job in news and, unless
// Options.NoSync, makes them durable: with one syncfs for a large batch,
// else (or where there is no syncfs) with an fsync each.
func (s *Store) writeDurably(ctx context.Context, news []*batchJob) error {
	return s.durable.batch(s.tmpDir, len(news), func(fsync bool) error { return s.writeBatch(ctx, news, fsync) })
}

// writeBatch writes the temp file of every job in news, batchWriters at a
// time, each fsynced if fsync is set.
func (s *Store) writeBatch(ctx context.Context, news []*batchJob, fsync bool) error {
	work := make(chan *batchJob)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range min(batchWriters, len(news)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 1, Job: b.job})
				if err == nil {
					b.tmp, err = s.fs.WriteTemp(s.tmpDir, data, s.filePerm, fsync)
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("write job %s: %w", b.job.ID, err):
					default:
					}
				}
			}
		}()
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
