package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// The directories of dependencies and batches (format 6), made when first
// needed:
//
//	dependents/<dep id>/<id>             job <id> names <dep id> in its After
//	batches/<sha256(name)>.lock          lock of the batch's membership (flock)
//	batches/<sha256(name)>/members/<id>  job <id> is in the batch
//	batches/<sha256(name)>/callbacks/<id> job <id> is a callback of the batch
//	batches/<sha256(name)>/closed        a callback closed the batch
//
// Every entry is a hard link to one empty file (no inode of its own), made
// durable before the record that it indexes is published, so that a
// record never exists without its entries; an entry without a record
// (a submit that failed or crashed) is passed over.
const (
	dirDependents = "dependents"
	dirBatches    = "batches"
	batchMembers  = "members"
	batchCalls    = "callbacks"
	batchClosed   = "closed"
)

var _ jobstore.DependencyReader = (*Store)(nil)

func (s *Store) dependentsDir(id string) string {
	return filepath.Join(s.dir, dirDependents, id)
}

func (s *Store) batchDir(name string) string {
	return filepath.Join(s.dir, dirBatches, keyName(name))
}

// depLookup is a storekit.DepLookup that reads each dependency's current
// record (without its lock).
func (s *Store) depLookup(ctx context.Context) storekit.DepLookup {
	return func(id string) (jobstore.State, bool, error) {
		j, err := s.get(ctx, id)
		if errors.Is(err, jobstore.ErrNotFound) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return j.State, true, nil
	}
}

// readIDs returns the job IDs named by the entries of dir, sorted; a
// missing dir has none.
func readIDs(dir string) ([]string, error) {
	names, err := readNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids := names[:0]
	for _, n := range names {
		if jobstore.ValidateID(n) == nil {
			ids = append(ids, n)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// dependentIDs returns the IDs of the jobs that may wait for job j: those
// that name it (dependents/), and the callbacks of its batch.
func (s *Store) dependentIDs(id, batch string) ([]string, error) {
	ids, err := readIDs(s.dependentsDir(id))
	if err != nil || batch == "" {
		return ids, err
	}
	calls, err := readIDs(filepath.Join(s.batchDir(batch), batchCalls))
	return append(ids, calls...), err
}

// afterEnd settles the jobs that wait for job j, which has just ended; it
// is called with no lock held, by whatever operation ended j (Complete,
// Cancel, Release, recovery, a settle that canceled it), so a dependent is
// queued (or canceled) before that operation returns. What fails here is
// logged: Repair, and every Store that claims, settle waiting jobs again
// (settleWaiting).
func (s *Store) afterEnd(ctx context.Context, j jobstore.Job) {
	ids, err := s.dependentIDs(j.ID, j.Batch)
	if err != nil {
		s.log.Warn("filestore: cannot read the jobs that wait for a job that ended; they are settled later", "id", j.ID, "err", err)
		return
	}
	for _, d := range ids {
		s.settle(context.WithoutCancel(ctx), d, j.ID, s.lockJob)
	}
}

// settle settles the waiting job id (storekit.Settle), first naming the
// dependency that just ended, if any, under its record lock, taken with
// lock (lockJob, or lockJobNow to leave a job that another holder has); a
// job canceled by it settles its own dependents in turn.
func (s *Store) settle(ctx context.Context, id, first string, lock func(context.Context, string) (func(), error)) {
	j, changed, err := s.changeWith(ctx, "settle", id, lock, func(j jobstore.Job) (jobstore.Job, bool, error) {
		if j.State != jobstore.StateWaiting {
			return j, false, nil
		}
		return storekit.Settle(j, first, s.depLookup(ctx), time.Now())
	})
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		s.noteWaiting(id, false)
	case errors.Is(err, errBusy):
		// Left for the next pass.
	case err != nil:
		s.log.Warn("filestore: cannot settle a waiting job; it is settled later", "id", id, "err", err)
	case j.State != jobstore.StateWaiting:
		s.noteWaiting(id, false)
		if changed && j.State.Terminal() {
			s.afterEnd(ctx, j)
		}
	}
}

// settleInterval is how often a Store that claims settles the waiting jobs
// it knows of, in case the process that ended their last dependency died
// before it settled them.
const settleInterval = 10 * time.Second

// noteWaiting records whether job id, read in queued/, is waiting.
func (s *Store) noteWaiting(id string, waiting bool) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if waiting {
		if s.waiting == nil {
			s.waiting = make(map[string]struct{})
		}
		s.waiting[id] = struct{}{}
	} else {
		delete(s.waiting, id)
	}
}

// settleWaiting settles the waiting jobs this Store has seen in queued/
// whose dependencies decide them. Each is first read without a lock,
// looking at its dependencies from the first on only until one has not
// ended, and locked only if it is decided, without waiting: a job whose
// lock another process holds (stopped, perhaps) is left for the next
// pass, so that this pass never stalls the maintenance loop it runs in.
func (s *Store) settleWaiting(ctx context.Context) {
	s.waitMu.Lock()
	ids := make([]string, 0, len(s.waiting))
	for id := range s.waiting {
		ids = append(ids, id)
	}
	s.waitMu.Unlock()
	lookup := s.depLookup(ctx)
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		j, err := s.get(ctx, id)
		if err != nil || j.State != jobstore.StateWaiting {
			if err == nil || errors.Is(err, jobstore.ErrNotFound) {
				s.noteWaiting(id, false)
			}
			continue
		}
		if _, changed, err := storekit.Settle(j, j.After[0], lookup, time.Now()); err != nil || !changed {
			continue
		}
		s.settle(ctx, id, "", s.lockJobNow)
	}
}

// errBusy is lockJobNow's error for a record lock that another holder has.
var errBusy = errors.New("the job's record lock is held")

// lockJobNow takes job id's record lock as lockJob does, but fails with
// errBusy at once if another holder has it.
func (s *Store) lockJobNow(_ context.Context, id string) (func(), error) {
	unlock, ok, err := s.tryLockJob(id)
	if err == nil && !ok {
		err = errBusy
	}
	return unlock, err
}

// Dependents returns the jobs that name id in their After, and the
// callbacks of id's batch, oldest first. It implements
// jobstore.DependencyReader.
func (s *Store) Dependents(ctx context.Context, id string) ([]jobstore.Job, error) {
	if err := s.enter(ctx, "dependents"); err != nil {
		return nil, err
	}
	if err := jobstore.ValidateID(id); err != nil {
		return nil, fmt.Errorf("filestore: dependents: %w", err)
	}
	j, err := s.get(ctx, id)
	if err != nil && !errors.Is(err, jobstore.ErrNotFound) {
		return nil, fmt.Errorf("filestore: dependents: %w", err)
	}
	ids, err := s.dependentIDs(id, j.Batch)
	if err != nil {
		return nil, fmt.Errorf("filestore: dependents of %s: %w", id, err)
	}
	slices.Sort(ids)
	var out []jobstore.Job
	for _, d := range slices.Compact(ids) {
		dj, err := s.get(ctx, d)
		if errors.Is(err, jobstore.ErrNotFound) {
			continue // its submit failed, or it was pruned
		}
		if err != nil {
			return nil, fmt.Errorf("filestore: dependents of %s: %w", id, err)
		}
		if slices.Contains(dj.After, id) {
			out = append(out, dj)
		}
	}
	return out, nil
}

// Batch returns the named batch and the states of its jobs. It implements
// jobstore.DependencyReader.
func (s *Store) Batch(ctx context.Context, name string) (jobstore.BatchInfo, error) {
	if err := s.enter(ctx, "batch"); err != nil {
		return jobstore.BatchInfo{}, err
	}
	if err := jobstore.ValidateBatchName(name); err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: batch: %w", err)
	}
	dir := s.batchDir(name)
	members, err := readIDs(filepath.Join(dir, batchMembers))
	if err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: batch %q: %w", name, err)
	}
	calls, err := s.liveIDs(ctx, filepath.Join(dir, batchCalls))
	if err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: batch %q: %w", name, err)
	}
	info := jobstore.BatchInfo{Name: name, States: map[jobstore.State]int{}, Callbacks: calls}
	for _, id := range members {
		j, err := s.get(ctx, id)
		if errors.Is(err, jobstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return jobstore.BatchInfo{}, fmt.Errorf("filestore: batch %q: %w", name, err)
		}
		info.Total++
		info.States[j.State]++
	}
	if info.Closed, err = s.batchIsClosed(ctx, name); err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: batch %q: %w", name, err)
	}
	if info.Total == 0 && len(info.Callbacks) == 0 {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: %w", storekit.NoBatch(name))
	}
	return info, nil
}

// batchIsClosed reports whether a callback closed batch name: its closed
// marker is there (written once the callback is published, and kept while
// the batch has jobs), or a callback of the batch exists (one published
// by a process that died before it wrote the marker). A callbacks/ entry
// whose record was never published (a submit that failed or crashed)
// closes nothing. A submit asks it under the batch's lock.
func (s *Store) batchIsClosed(ctx context.Context, name string) (bool, error) {
	dir := s.batchDir(name)
	_, err := os.Lstat(filepath.Join(dir, batchClosed))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	calls, err := s.liveIDs(ctx, filepath.Join(dir, batchCalls))
	return len(calls) > 0, err
}

// liveIDs returns the IDs named by the entries of dir whose jobs exist.
func (s *Store) liveIDs(ctx context.Context, dir string) ([]string, error) {
	ids, err := readIDs(dir)
	if err != nil {
		return nil, err
	}
	out := ids[:0]
	for _, id := range ids {
		_, err := s.get(ctx, id)
		if errors.Is(err, jobstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// lockBatches takes the exclusive lock of every batch the specs join or
// close, in one order, so that a callback's set of jobs is final: a
// member's submit holds it from its check that the batch is open until its
// record is published, and a callback's from its reading of the members
// until the batch is marked closed.
func (s *Store) lockBatches(ctx context.Context, specs []jobstore.Spec) (func(), error) {
	var names []string
	for _, sp := range specs {
		for _, b := range []string{sp.Batch, sp.AfterBatch} {
			if b != "" {
				names = append(names, keyName(b))
			}
		}
	}
	if len(names) == 0 {
		return func() {}, nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if err := s.fs.Mkdir(filepath.Join(s.dir, dirBatches), s.dirPerm); err != nil {
		return nil, err
	}
	var unlocks []func()
	release := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, h := range names {
		u, err := lockRecord(ctx, filepath.Join(s.dir, dirBatches, h+recordLock), true, true, s.filePerm)
		if err != nil {
			release()
			return nil, fmt.Errorf("lock batch: %w", err)
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}

// graphEntries are the index entries of the new jobs of one submit.
type graphEntries struct {
	s *Store
	// made are the entries made, to take back on failure.
	made []string
	// dirs are the directories whose entries changed, to fsync: those the
	// entries went into, and the parents of those made for them.
	dirs map[string]bool
	// ready are the directories known to exist.
	ready map[string]bool
	// proto is the empty file every entry links to; "" until made.
	proto string
}

func newGraphEntries(s *Store) *graphEntries {
	return &graphEntries{s: s, dirs: make(map[string]bool), ready: make(map[string]bool)}
}

// link makes the entry name in dir (a link to the empty proto file),
// making dir and the directories above it, up to the store's, if need be.
func (g *graphEntries) link(dir, name string) error {
	s := g.s
	if g.proto == "" {
		p, err := s.fs.WriteTemp(s.tmpDir, nil, s.filePerm, false)
		if err != nil {
			return err
		}
		g.proto = p
	}
	if !g.ready[dir] {
		if err := g.mkdirAll(dir); err != nil {
			return err
		}
	}
	g.dirs[dir] = true
	p := filepath.Join(dir, name)
	err := s.fs.Link(g.proto, p)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	g.made = append(g.made, p)
	return nil
}

// mkdirAll makes dir and the directories above it, up to the store's,
// noting the parent of each one it makes as changed.
func (g *graphEntries) mkdirAll(dir string) error {
	s := g.s
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil {
		return err
	}
	p := s.dir
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		parent := p
		p = filepath.Join(p, part)
		if g.ready[p] {
			continue
		}
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			// Mkdir refuses what is there and is not a directory (a link).
			if err := s.fs.Mkdir(p, s.dirPerm); err != nil {
				return err
			}
			g.dirs[parent] = true
		} else if err != nil {
			return err
		}
		g.ready[p] = true
	}
	return nil
}

// index links the entries of the new job j: dependents/ for each job of
// named, the dependencies it named itself (a callback's batch jobs find it
// through the batch's callbacks/ instead), and its batch's entries.
func (g *graphEntries) index(j jobstore.Job, named []string) error {
	s := g.s
	for _, d := range named {
		if err := g.link(s.dependentsDir(d), j.ID); err != nil {
			return err
		}
	}
	if j.Batch != "" {
		if err := g.link(filepath.Join(s.batchDir(j.Batch), batchMembers), j.ID); err != nil {
			return err
		}
	}
	if j.AfterBatch != "" {
		if err := g.link(filepath.Join(s.batchDir(j.AfterBatch), batchCalls), j.ID); err != nil {
			return err
		}
	}
	return nil
}

// sync makes the entries durable: an fsync of each directory they changed,
// up to 16 at once (one syncfs with Options.SyncFS).
func (g *graphEntries) sync() error {
	s := g.s
	if g.proto != "" {
		_ = s.fs.Remove(g.proto)
		g.proto = ""
	}
	if len(g.made) == 0 || s.durable.none {
		return nil
	}
	if s.durable.shared != nil {
		return s.durable.dir(dirDependents)
	}
	dirs := make([]string, 0, len(g.dirs))
	for d := range g.dirs {
		dirs = append(dirs, d)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(dirs))
	sem := make(chan struct{}, batchWriters)
	for _, d := range dirs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := s.fs.SyncDir(d); err != nil {
				errs <- fmt.Errorf("fsync %s: %w", d, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// undo removes the entries made.
func (g *graphEntries) undo() {
	if g.proto != "" {
		_ = g.s.fs.Remove(g.proto)
	}
	for _, p := range g.made {
		_ = g.s.fs.Remove(p)
	}
}

// graphJob is a planned job of submitGraph.
type graphJob struct {
	*batchJob
	// named are the dependencies the job named itself, as IDs: those of
	// After, AfterKeys and AfterSpecs, not the jobs of a batch it is the
	// callback of.
	named []string
}

// submitGraph submits specs, some of which name dependencies or batches,
// as SubmitBatch (batch) or Submit. Under the locks of the batches the
// specs join or close, and a shared record lock of every job they name
// (so that no Prune or Delete removes one meanwhile), the dependencies are
// resolved and must exist, each new job is settled against them, the
// index entries of every new job are made durable, then the jobs are
// published as SubmitBatch publishes them (waiting and queued jobs into
// queued/, a job whose dependency already failed into done/, canceled).
// Once the locks are released the new waiting jobs are settled again, for
// a dependency that ended while they were being published (its ender may
// have looked for them before their entries existed). An error means no
// job of the specs was created.
func (s *Store) submitGraph(ctx context.Context, specs []jobstore.Spec, batch bool) ([]jobstore.Submitted, error) {
	out, news, err := s.submitGraphLocked(ctx, specs, batch)
	if err != nil {
		return nil, err
	}
	read := s.depLookup(ctx)
	for _, g := range news {
		if g.job.State != jobstore.StateWaiting {
			continue
		}
		if _, changed, err := storekit.Settle(g.job, "", read, time.Now()); err == nil && changed {
			s.settle(context.WithoutCancel(ctx), g.job.ID, "", s.lockJob)
			if j, err := s.get(ctx, g.job.ID); err == nil {
				out[g.i].Job = j
			}
		}
	}
	return out, nil
}

// submitGraphLocked is submitGraph but for the settling after the locks.
func (s *Store) submitGraphLocked(ctx context.Context, specs []jobstore.Spec, batch bool) ([]jobstore.Submitted, []*graphJob, error) {
	unlockBatches, err := s.lockBatches(ctx, specs)
	if err != nil {
		return nil, nil, err
	}
	defer unlockBatches()
	specErr := func(i int, err error) error {
		if batch {
			return fmt.Errorf("spec %d: %w", i, err)
		}
		return err
	}
	out := make([]jobstore.Submitted, len(specs))
	ids := make([]string, len(specs)) // each spec's job
	first := make(map[string]int)     // key -> its first spec
	newByKey := make(map[string]string)
	isNew := make(map[string]bool)
	joined := make(map[string][]string) // batch -> its new jobs
	closing := make(map[string]bool)
	byKey := func(key string) (string, error) {
		if id, ok := newByKey[key]; ok {
			return id, nil
		}
		j, err := s.getByKey(ctx, key)
		if errors.Is(err, jobstore.ErrNotFound) {
			return "", nil
		}
		return j.ID, err
	}
	// Each spec resolved: the jobs found by their keys, the new ones with
	// every dependency as an ID.
	var news []*graphJob
	external := make(map[string]bool) // dependencies that are not new
	now := time.Now()
	for i, spec := range specs {
		if spec.Key != "" {
			if f, dup := first[spec.Key]; dup {
				ids[i] = ids[f]
				continue
			}
			first[spec.Key] = i
			j, err := s.getByKey(ctx, spec.Key)
			if err == nil {
				out[i], ids[i] = jobstore.Submitted{Job: j}, j.ID
				continue
			}
			if !errors.Is(err, jobstore.ErrNotFound) {
				return nil, nil, specErr(i, err)
			}
		}
		var prior []string
		if batch {
			prior = ids[:i]
		}
		named, err := storekit.ResolveAfter(spec, byKey, prior)
		if err != nil {
			return nil, nil, specErr(i, err)
		}
		after := slices.Clone(named)
		if b := spec.Batch; b != "" {
			closed, err := s.batchIsClosed(ctx, b)
			if err != nil {
				return nil, nil, specErr(i, err)
			}
			if closed || closing[b] {
				return nil, nil, specErr(i, storekit.BatchClosed(b))
			}
		}
		if b := spec.AfterBatch; b != "" {
			members, err := s.liveIDs(ctx, filepath.Join(s.batchDir(b), batchMembers))
			if err != nil {
				return nil, nil, specErr(i, err)
			}
			members = append(members, joined[b]...)
			if len(members) == 0 {
				return nil, nil, specErr(i, storekit.BatchEmpty(b))
			}
			if len(members) > jobstore.MaxAfter {
				return nil, nil, specErr(i, storekit.BatchTooLarge(b, len(members)))
			}
			after = append(after, members...)
			closing[b] = true
		}
		j := jobstore.NewJob(spec, now)
		j.SetAfter(after)
		if len(j.After) > jobstore.MaxAfter {
			return nil, nil, specErr(i, fmt.Errorf("%w: %d dependencies with the jobs of batch %q, limit %d", jobstore.ErrInvalidInput, len(j.After), spec.AfterBatch, jobstore.MaxAfter))
		}
		for _, d := range named {
			if !isNew[d] {
				external[d] = true
			}
		}
		ids[i], isNew[j.ID] = j.ID, true
		if spec.Key != "" {
			newByKey[spec.Key] = j.ID
		}
		if spec.Batch != "" {
			joined[spec.Batch] = append(joined[spec.Batch], j.ID)
		}
		b := &batchJob{i: i, job: j}
		if spec.Key != "" {
			b.hash = keyName(spec.Key)
		}
		news = append(news, &graphJob{batchJob: b, named: named})
	}
	// The jobs named are kept from Prune and Delete until the new jobs
	// that wait for them are published: each one's record lock, shared.
	locked := make([]string, 0, len(external))
	for id := range external {
		locked = append(locked, id)
	}
	slices.Sort(locked)
	for _, id := range locked {
		unlock, err := s.shareJob(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		defer unlock()
	}
	// Each named job read once, under its lock: it must exist, and its
	// state settles the new jobs.
	read := s.depLookup(ctx)
	states := make(map[string]jobstore.State)
	lookup := func(id string) (jobstore.State, bool, error) {
		if st, ok := states[id]; ok {
			return st, true, nil
		}
		st, ok, err := read(id)
		if err == nil && ok {
			states[id] = st
		}
		return st, ok, err
	}
	for _, g := range news {
		for _, d := range g.named {
			if _, ok, err := lookup(d); err != nil {
				return nil, nil, specErr(g.i, err)
			} else if !ok {
				return nil, nil, specErr(g.i, storekit.DependencyMissing(d))
			}
		}
		j, _, err := storekit.Settle(g.job, "", lookup, now)
		if err != nil {
			return nil, nil, specErr(g.i, err)
		}
		g.job = j
		states[j.ID] = j.State
	}
	if len(news) > 0 {
		if err := s.publishGraph(ctx, news); err != nil {
			return nil, nil, err
		}
	}
	for _, g := range news {
		out[g.i] = jobstore.Submitted{Job: g.job, Created: true}
	}
	for i := range specs {
		if f, ok := first[specs[i].Key]; ok && specs[i].Key != "" && f != i {
			out[i] = jobstore.Submitted{Job: out[f].Job}
		}
	}
	return out, news, nil
}

// publishGraph makes the index entries of news durable and publishes the
// jobs, taking everything back on error. A key that another process took
// meanwhile takes the whole submit back before any record is published
// (errKeyRace), and the caller submits again, which finds that job by
// its key. A callback's batch is marked closed once the callback is
// published.
func (s *Store) publishGraph(ctx context.Context, news []*graphJob) error {
	g := newGraphEntries(s)
	for _, n := range news {
		if err := g.index(n.job, n.named); err != nil {
			g.undo()
			return err
		}
	}
	if err := g.sync(); err != nil {
		g.undo()
		return err
	}
	bs := make([]*batchJob, len(news))
	for i, n := range news {
		bs[i] = n.batchJob
	}
	if _, err := s.submitBatch(ctx, bs, true); err != nil {
		g.undo()
		return err
	}
	closing := newGraphEntries(s)
	var err error
	for _, n := range news {
		if b := n.job.AfterBatch; b != "" && err == nil {
			err = closing.link(s.batchDir(b), batchClosed)
		}
	}
	if err == nil {
		err = closing.sync()
	}
	if err != nil {
		// The batch is closed all the same while its callback exists.
		s.log.Warn("filestore: cannot mark a batch closed; its callback keeps it closed", "err", err)
	}
	return nil
}

// errKeyRace asks Submit and SubmitBatch to try a graph again.
var errKeyRace = errors.New("a key of the submit was taken by another submit meanwhile")

// waitedFor returns the ID of a waiting job that waits for job id, or "",
// so that Prune and Delete keep a job its dependents still need.
func (s *Store) waitedFor(ctx context.Context, id, batch string) (string, error) {
	ids, err := s.dependentIDs(id, batch)
	if err != nil {
		return "", err
	}
	for _, d := range ids {
		j, err := s.get(ctx, d)
		if errors.Is(err, jobstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		if j.State == jobstore.StateWaiting && slices.Contains(j.After, id) {
			return d, nil
		}
	}
	return "", nil
}

// unindex removes the index entries of the pruned job j: the jobs that
// named it, and its membership of a batch. A batch none of whose jobs and
// callbacks exist any more is removed whole, so that its name may be used
// again, as a pruned job's key may. The caller holds no record lock: the
// batch's lock comes first, as in submitGraph.
func (s *Store) unindex(ctx context.Context, j jobstore.Job) {
	if err := s.fs.RemoveAll(s.dependentsDir(j.ID)); err != nil {
		s.log.Warn("filestore: prune: cannot remove a job's dependents entries", "id", j.ID, "err", err)
	}
	for _, b := range []struct{ name, sub string }{{j.Batch, batchMembers}, {j.AfterBatch, batchCalls}} {
		if b.name == "" {
			continue
		}
		unlock, err := s.lockBatches(ctx, []jobstore.Spec{{Batch: b.name}})
		if err != nil {
			s.log.Warn("filestore: prune: cannot lock a job's batch; its entry stays", "id", j.ID, "err", err)
			continue
		}
		dir := s.batchDir(b.name)
		_ = s.fs.Remove(filepath.Join(dir, b.sub, j.ID))
		members, err1 := s.liveIDs(ctx, filepath.Join(dir, batchMembers))
		calls, err2 := s.liveIDs(ctx, filepath.Join(dir, batchCalls))
		if len(members) == 0 && len(calls) == 0 && err1 == nil && err2 == nil {
			if err := s.fs.RemoveAll(dir); err != nil {
				s.log.Warn("filestore: prune: cannot remove an empty batch", "path", dir, "err", err)
			}
		}
		unlock()
	}
}

// graphSpec reports whether spec names dependencies or a batch, which
// submitGraph submits.
func graphSpec(spec jobstore.Spec) bool {
	return spec.HasDeps() || spec.Batch != ""
}

// submitGraphRetry is submitGraph, tried again after a key race.
func (s *Store) submitGraphRetry(ctx context.Context, specs []jobstore.Spec, batch bool) ([]jobstore.Submitted, error) {
	for try := 0; ; try++ {
		out, err := s.submitGraph(ctx, specs, batch)
		if !errors.Is(err, errKeyRace) || try >= 3 {
			return out, err
		}
	}
}
