package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
	sort.Strings(ids)
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
		s.settle(context.WithoutCancel(ctx), d, j.ID)
	}
}

// settle settles the waiting job id (storekit.Settle), first naming the
// dependency that just ended, if any; a job canceled by it settles its own
// dependents in turn.
func (s *Store) settle(ctx context.Context, id, first string) {
	j, changed, err := s.change(ctx, "settle", id, func(j jobstore.Job) (jobstore.Job, bool, error) {
		if j.State != jobstore.StateWaiting {
			return j, false, nil
		}
		return storekit.Settle(j, first, s.depLookup(ctx), time.Now())
	})
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		s.noteWaiting(id, false)
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

// settleWaiting settles every waiting job this Store has seen in queued/.
func (s *Store) settleWaiting(ctx context.Context) {
	s.waitMu.Lock()
	ids := make([]string, 0, len(s.waiting))
	for id := range s.waiting {
		ids = append(ids, id)
	}
	s.waitMu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		s.settle(ctx, id, "")
	}
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
	calls, err := readIDs(filepath.Join(dir, batchCalls))
	if err != nil {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: batch %q: %w", name, err)
	}
	info := jobstore.BatchInfo{Name: name, States: map[jobstore.State]int{}}
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
	for _, id := range calls {
		if _, err := s.get(ctx, id); err == nil {
			info.Callbacks = append(info.Callbacks, id)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, batchClosed)); err == nil {
		info.Closed = true
	}
	if info.Total == 0 && len(info.Callbacks) == 0 {
		return jobstore.BatchInfo{}, fmt.Errorf("filestore: %w", storekit.NoBatch(name))
	}
	return info, nil
}

// batchMembers returns the jobs of batch name that exist.
func (s *Store) batchMemberIDs(ctx context.Context, name string) ([]string, error) {
	ids, err := readIDs(filepath.Join(s.batchDir(name), batchMembers))
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

// batchIsClosed reports whether a callback closed batch name.
func (s *Store) batchIsClosed(name string) (bool, error) {
	_, err := os.Lstat(filepath.Join(s.batchDir(name), batchClosed))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
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
	// dirs are the directories whose entries changed, to fsync.
	dirs map[string]bool
	// proto is the empty file every entry links to; "" until made.
	proto string
}

// link makes the entry path (a link to the empty proto file) in dir,
// making dir if need be.
func (g *graphEntries) link(dir, name string) error {
	s := g.s
	if g.proto == "" {
		p, err := s.fs.WriteTemp(s.tmpDir, nil, s.filePerm, false)
		if err != nil {
			return err
		}
		g.proto = p
	}
	if !g.dirs[dir] {
		if err := s.mkdirAll(dir); err != nil {
			return err
		}
		g.dirs[dir] = true
		g.dirs[filepath.Dir(dir)] = true
	}
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

// index links the entries of the new job j: dependents/ for each job of
// its After (of a callback, only those of named, as its batch's jobs find
// it through the batch's callbacks/), and its batch's entries.
func (g *graphEntries) index(j jobstore.Job, named []string) error {
	s := g.s
	for _, d := range j.After {
		if j.AfterBatch != "" && !slices.Contains(named, d) {
			continue
		}
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
		dir := s.batchDir(j.AfterBatch)
		if err := g.link(filepath.Join(dir, batchCalls), j.ID); err != nil {
			return err
		}
		if err := g.link(dir, batchClosed); err != nil {
			return err
		}
	}
	return nil
}

// mkdirAll makes dir and the directories above it, up to the store's.
func (s *Store) mkdirAll(dir string) error {
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil {
		return err
	}
	p := s.dir
	for _, part := range splitPath(rel) {
		p = filepath.Join(p, part)
		if err := s.fs.Mkdir(p, s.dirPerm); err != nil {
			return err
		}
	}
	return nil
}

func splitPath(rel string) []string {
	var parts []string
	for rel != "." && rel != "" {
		parts = append([]string{filepath.Base(rel)}, parts...)
		rel = filepath.Dir(rel)
	}
	return parts
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
	spec jobstore.Spec
}

// submitGraph submits specs, some of which name dependencies or batches,
// as SubmitBatch (batch) or Submit: the dependencies are resolved and must
// exist, each new job is settled against them, the index entries of every
// new job are made durable, then the jobs are published as SubmitBatch
// publishes them (waiting and queued jobs into queued/, a job whose
// dependency already failed into done/, canceled), and finally the new
// waiting jobs are settled again, for a dependency that ended while they
// were being published (its ender may have looked for them before their
// entries existed). An error means no job of the specs was created.
func (s *Store) submitGraph(ctx context.Context, specs []jobstore.Spec, batch bool) ([]jobstore.Submitted, error) {
	unlockBatches, err := s.lockBatches(ctx, specs)
	if err != nil {
		return nil, err
	}
	defer unlockBatches()
	out := make([]jobstore.Submitted, len(specs))
	ids := make([]string, len(specs)) // each spec's job
	first := make(map[string]int)     // key -> its first spec
	newByKey := make(map[string]string)
	states := make(map[string]jobstore.State) // the new jobs'
	joined := make(map[string][]string)       // batch -> its new jobs
	closing := make(map[string]bool)
	// Each dependency is read once: whether it exists, and its state.
	read := s.depLookup(ctx)
	type seen struct {
		st jobstore.State
		ok bool
	}
	known := make(map[string]seen)
	lookup := func(id string) (jobstore.State, bool, error) {
		if k, ok := known[id]; ok {
			return k.st, k.ok, nil
		}
		st, ok, err := read(id)
		if err == nil {
			known[id] = seen{st, ok}
		}
		return st, ok, err
	}
	planLookup := func(id string) (jobstore.State, bool, error) {
		if st, ok := states[id]; ok {
			return st, true, nil
		}
		return lookup(id)
	}
	byKey := func(key string) (string, error) {
		if id, ok := newByKey[key]; ok {
			return id, nil
		}
		j, err := s.GetByKey(ctx, key)
		if errors.Is(err, jobstore.ErrNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return j.ID, nil
	}
	specErr := func(i int, err error) error {
		if batch {
			return fmt.Errorf("spec %d: %w", i, err)
		}
		return err
	}
	var news []*graphJob
	now := time.Now()
	for i, spec := range specs {
		if spec.Key != "" {
			if f, dup := first[spec.Key]; dup {
				ids[i] = ids[f]
				continue
			}
			first[spec.Key] = i
			id, err := byKey(spec.Key)
			if err != nil {
				return nil, specErr(i, err)
			}
			if id != "" {
				j, err := s.get(ctx, id)
				if err != nil {
					return nil, specErr(i, err)
				}
				out[i], ids[i] = jobstore.Submitted{Job: j}, id
				continue
			}
		}
		var prior []string
		if batch {
			prior = ids[:i]
		}
		after, err := storekit.ResolveAfter(spec, byKey, prior)
		if err != nil {
			return nil, specErr(i, err)
		}
		for _, id := range spec.After {
			if _, ok, err := lookup(id); err != nil {
				return nil, specErr(i, err)
			} else if !ok {
				return nil, specErr(i, storekit.DependencyMissing(id))
			}
		}
		if b := spec.Batch; b != "" {
			closed, err := s.batchIsClosed(b)
			if err != nil {
				return nil, specErr(i, err)
			}
			if closed || closing[b] {
				return nil, specErr(i, storekit.BatchClosed(b))
			}
		}
		if b := spec.AfterBatch; b != "" {
			members, err := s.batchMemberIDs(ctx, b)
			if err != nil {
				return nil, specErr(i, err)
			}
			members = append(members, joined[b]...)
			if len(members) == 0 {
				return nil, specErr(i, storekit.BatchEmpty(b))
			}
			if len(members) > jobstore.MaxAfter {
				return nil, specErr(i, storekit.BatchTooLarge(b, len(members)))
			}
			after = append(after, members...)
			closing[b] = true
		}
		j := jobstore.NewJob(spec, now)
		j.SetAfter(after)
		if j, _, err = storekit.Settle(j, "", planLookup, now); err != nil {
			return nil, specErr(i, err)
		}
		states[j.ID] = j.State
		ids[i] = j.ID
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
		news = append(news, &graphJob{batchJob: b, spec: spec})
	}
	if len(news) > 0 {
		if err := s.publishGraph(ctx, news); err != nil {
			return nil, err
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
	// Settled again once published and indexed (see above), if a
	// dependency ended meanwhile: read again, without a lock.
	for _, g := range news {
		if g.job.State != jobstore.StateWaiting {
			continue
		}
		if _, changed, err := storekit.Settle(g.job, "", read, time.Now()); err == nil && changed {
			s.settle(ctx, g.job.ID, "")
			if j, err := s.get(ctx, g.job.ID); err == nil && j.State != jobstore.StateWaiting {
				out[g.i].Job = j
			}
		}
	}
	return out, nil
}

// publishGraph makes the index entries of news durable and publishes the
// jobs, taking everything back on error. A key that another process took
// meanwhile takes the whole submit back, and the caller is told to submit
// again, which finds that job by its key.
func (s *Store) publishGraph(ctx context.Context, news []*graphJob) error {
	g := &graphEntries{s: s, dirs: make(map[string]bool)}
	for _, n := range news {
		if err := g.index(n.job, n.spec.After); err != nil {
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
	taken, err := s.submitBatch(ctx, bs)
	if err != nil {
		g.undo()
		return err
	}
	if len(taken) > 0 {
		// Rare: another process took one of the keys between the look-up
		// and the link. Take back what was published, under fresh locks.
		for _, b := range bs {
			if !taken[b.i] {
				if unlock, err := s.lockJob(ctx, b.job.ID); err == nil {
					b.queued = true
					s.takeBack([]*batchJob{b})
					unlock()
				}
			}
		}
		g.undo()
		return fmt.Errorf("%w: a key of the submit was taken by another submit meanwhile; submit again", errKeyRace)
	}
	return nil
}

// errKeyRace asks Submit and SubmitBatch to try a graph again.
var errKeyRace = errors.New("key race")

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
// named it, and its membership of a batch. A batch whose last job goes is
// removed whole, so that its name may be used again, as a pruned job's
// key may.
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
		members, err1 := readNames(filepath.Join(dir, batchMembers))
		calls, err2 := readNames(filepath.Join(dir, batchCalls))
		if len(members) == 0 && len(calls) == 0 && (err1 == nil || errors.Is(err1, fs.ErrNotExist)) && (err2 == nil || errors.Is(err2, fs.ErrNotExist)) {
			for _, p := range []string{filepath.Join(dir, batchMembers), filepath.Join(dir, batchCalls), filepath.Join(dir, batchClosed), dir} {
				if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					s.log.Warn("filestore: prune: cannot remove an empty batch", "path", p, "err", err)
				}
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
