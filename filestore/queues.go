package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

var _ jobstore.QueueLimiter = (*Store)(nil)

// queuesFile, in the store's directory, holds the settings of the queues
// that have some, as JSON (docs/format.md, "Queues"). Its name has no
// .json, which at the top of a store would be a record of the old
// single-process store (legacy.go). It is replaced whole, never
// changed in place: written to tmp/, fsynced, renamed over the old one,
// and the store's directory fsynced, all under the exclusive lock of
// queuesLock, so that two processes changing settings at once leave both
// changes. Readers take no lock: a rename is atomic.
const queuesFile = "QUEUES"

// queuesLock, in the store's directory, is the lock file of changes to
// queuesFile.
const queuesLock = "QUEUES.lock"

// maxQueuesFile bounds how much of queuesFile is read.
const maxQueuesFile = 4 << 20

// queuesDoc is the contents of queuesFile.
type queuesDoc struct {
	// Queues holds each queue's settings, by name.
	Queues map[string]json.RawMessage `json:"queues"`
}

// queueDoc is one queue's settings in queuesFile. A program that finds a
// field it does not know in it claims none of that queue's jobs: the field
// is a setting of a newer program (a limit, say) that this one cannot
// keep.
type queueDoc struct {
	Paused       bool `json:"paused,omitempty"`
	Limit        int  `json:"limit,omitempty"`
	PerPartition int  `json:"per_partition,omitempty"`
	// Rate is the rate's text form, such as "20/1s" (jobstore.Rate).
	Rate string `json:"rate,omitempty"`
}

// queueDocFields are the JSON names of queueDoc's fields.
var queueDocFields = []string{"paused", "limit", "per_partition", "rate"}

// queueView is the settings of every queue as read from one version of
// queuesFile. It is never changed once made.
type queueView struct {
	settings map[string]jobstore.QueueSettings
	// blocked holds the queues whose jobs this program claims none of:
	// the paused ones, and those with settings it does not know.
	blocked map[string]bool
	// unknown holds the queues with settings this program does not know.
	unknown map[string]bool
	// limits holds the concurrency limit of each limited queue.
	limits map[string]int
	// perPartition holds the per-partition limit of each queue that has
	// one.
	perPartition map[string]int
	// rates holds the rate limit of each queue that has one.
	rates map[string]jobstore.Rate
}

// queueCache holds the last version of queuesFile this Store read, and the
// file itself, open: as long as it is open its inode cannot be reused, so
// a file of the same device and inode number is that very version (the
// store replaces the file, never changes it), and a stat(2) says whether
// the settings changed. Its size and modification time are compared too,
// for a file a person edited in place.
type queueCache struct {
	mu   sync.Mutex
	f    *os.File // nil when there was no queuesFile
	id   fileID
	view *queueView
}

// fileID is what tells one version of queuesFile from another.
type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

func fileIDOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: fi.Size(), mtime: fi.ModTime().UnixNano()}, true
}

// statQueues returns the identity of queuesFile as it is now: one
// fstatat(2) relative to the store's pinned directory, which allocates
// nothing (a claim makes one), or an lstat through the root for a Store
// whose file operations are not the real ones.
func (s *Store) statQueues() (fileID, error) {
	if s.pins == nil {
		fi, err := s.root.Lstat(queuesFile)
		if err != nil {
			return fileID{}, err
		}
		if !fi.Mode().IsRegular() {
			return fileID{}, s.queuesNotFile()
		}
		id, _ := fileIDOf(fi)
		return id, nil
	}
	d, err := s.pins.get(".")
	if err != nil {
		return fileID{}, err
	}
	var st unix.Stat_t
	err = d.use(func(fd int) error {
		return ignoringEINTR(func() error { return unix.Fstatat(fd, queuesFile, &st, unix.AT_SYMLINK_NOFOLLOW) })
	})
	if err != nil {
		return fileID{}, &os.PathError{Op: "lstat", Path: filepath.Join(s.dir, queuesFile), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileID{}, s.queuesNotFile()
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, mtime: time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)).UnixNano()}, nil
}

var noQueues = &queueView{}

// queues returns the queue settings as they are now: one lstat of
// queuesFile, and a read of it only when it was replaced since the last
// call.
func (s *Store) queues() (*queueView, error) {
	c := &s.queueCache
	// The stat outside the mutex, which the claims of a batch take one
	// after another: a version replaced after it is seen by the next call.
	id, err := s.statQueues()
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return c.none(), nil
	}
	var se *settingsError
	if errors.As(err, &se) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read queue settings: %w", err)
	}
	if c.f != nil && id == c.id {
		return c.view, nil
	}
	f, err := s.root.OpenFile(queuesFile, os.O_RDONLY|noFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return c.none(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read queue settings: %w", err)
	}
	view, id, err := s.readQueues(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c.drop()
	c.f, c.id, c.view = f, id, view
	return view, nil
}

// none records that there is no queuesFile, and returns the settings of
// a store without one. The caller holds c.mu.
func (c *queueCache) none() *queueView {
	c.drop()
	c.view = noQueues
	return c.view
}

// drop closes the cached file. The caller holds c.mu.
func (c *queueCache) drop() {
	if c.f != nil {
		_ = c.f.Close()
		c.f = nil
	}
}

// close releases the cache, at Close.
func (c *queueCache) close() {
	c.mu.Lock()
	c.drop()
	c.view = nil
	c.mu.Unlock()
}

// readQueues reads and checks one version of queuesFile, open as f.
func (s *Store) readQueues(f *os.File) (*queueView, fileID, error) {
	path := filepath.Join(s.dir, queuesFile)
	fi, err := f.Stat()
	if err != nil {
		return nil, fileID{}, fmt.Errorf("read queue settings: %w", err)
	}
	id, ok := fileIDOf(fi)
	if !fi.Mode().IsRegular() || !ok {
		return nil, fileID{}, &settingsError{path: path, reason: fmt.Sprintf("is not a regular file (%s)", fi.Mode().Type())}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxQueuesFile+1))
	if err != nil {
		return nil, fileID{}, fmt.Errorf("read queue settings: %w", err)
	}
	view, err := decodeQueues(path, data)
	if err != nil {
		return nil, fileID{}, err
	}
	return view, id, nil
}

// settingsError says that queuesFile cannot be used as it is. It wraps
// jobstore.ErrCorrupt: claims stop, as a pause they cannot read must not
// be ignored.
type settingsError struct {
	path, reason string
}

func (e *settingsError) Error() string {
	return fmt.Sprintf("the queue settings %s cannot be read: %s", e.path, e.reason)
}

func (e *settingsError) Unwrap() error { return jobstore.ErrCorrupt }

// queuesNotFile is the error of a queuesFile that is not a regular file,
// such as a link planted for it, which the store never follows.
func (s *Store) queuesNotFile() error {
	return &settingsError{path: filepath.Join(s.dir, queuesFile), reason: "is not a regular file (a link is never followed): remove it, then set the queues' settings again"}
}

// decodeQueues parses the contents of queuesFile.
func decodeQueues(path string, data []byte) (*queueView, error) {
	if len(data) > maxQueuesFile {
		return nil, &settingsError{path: path, reason: fmt.Sprintf("larger than %d bytes", maxQueuesFile)}
	}
	var doc queuesDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, &settingsError{path: path, reason: fmt.Sprintf("not queue settings: %v", err)}
	}
	v := &queueView{settings: make(map[string]jobstore.QueueSettings, len(doc.Queues)), blocked: make(map[string]bool)}
	for name, raw := range doc.Queues {
		if err := jobstore.ValidateQueue(name); err != nil {
			return nil, &settingsError{path: path, reason: fmt.Sprintf("bad queue name: %v", err)}
		}
		var q queueDoc
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			var plain queueDoc
			if json.Unmarshal(raw, &plain) != nil {
				return nil, &settingsError{path: path, reason: fmt.Sprintf("queue %s: %v", name, err)}
			}
			// A setting of a newer program: keep off the queue.
			if v.unknown == nil {
				v.unknown = make(map[string]bool)
			}
			v.unknown[name] = true
			v.blocked[name] = true
			q = plain
		}
		if q.Limit < 0 || q.Limit > jobstore.MaxQueueLimit {
			return nil, &settingsError{path: path, reason: fmt.Sprintf("queue %s: limit %d out of range 0..%d", name, q.Limit, jobstore.MaxQueueLimit)}
		}
		if q.PerPartition < 0 || q.PerPartition > jobstore.MaxQueueLimit {
			return nil, &settingsError{path: path, reason: fmt.Sprintf("queue %s: per-partition limit %d out of range 0..%d", name, q.PerPartition, jobstore.MaxQueueLimit)}
		}
		var rate jobstore.Rate
		if q.Rate != "" {
			var err error
			if rate, err = jobstore.ParseRate(q.Rate); err != nil {
				return nil, &settingsError{path: path, reason: fmt.Sprintf("queue %s: %v", name, err)}
			}
			if v.rates == nil {
				v.rates = make(map[string]jobstore.Rate)
			}
			v.rates[name] = rate
		}
		v.settings[name] = jobstore.QueueSettings{Paused: q.Paused, Limit: q.Limit, PerPartition: q.PerPartition, Rate: rate}
		if q.Paused {
			v.blocked[name] = true
		}
		if q.Limit > 0 {
			if v.limits == nil {
				v.limits = make(map[string]int)
			}
			v.limits[name] = q.Limit
		}
		if q.PerPartition > 0 {
			if v.perPartition == nil {
				v.perPartition = make(map[string]int)
			}
			v.perPartition[name] = q.PerPartition
		}
	}
	return v, nil
}

// Queues returns every queue that has jobs or settings, sorted by name. It
// implements jobstore.QueueController. A queue whose settings were written
// by a newer program, which this one does not know, is shown paused: this
// program claims none of its jobs.
func (s *Store) Queues(ctx context.Context) ([]jobstore.QueueInfo, error) {
	if err := s.enter(ctx, "queues"); err != nil {
		return nil, err
	}
	st, err := s.Stats(ctx)
	if err != nil {
		return nil, err
	}
	v, err := s.queues()
	if err != nil {
		return nil, fmt.Errorf("filestore: queues: %w", err)
	}
	settings := maps.Clone(v.settings)
	for q := range v.unknown {
		st := settings[q]
		st.Paused = true
		settings[q] = st
	}
	return jobstore.QueueInfos(st, settings), nil
}

// PauseQueue stops claims of queue's jobs, in every process, until
// ResumeQueue: a Claim that begins after PauseQueue returned takes none
// of them. It implements jobstore.QueueController.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	return s.changeQueue(ctx, "pause queue", queue, func(q *queueDoc) { q.Paused = true })
}

// ResumeQueue lets queue's jobs be claimed again. The change of
// queuesFile wakes AwaitWork in every process that watches the store. It
// implements jobstore.QueueController.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	return s.changeQueue(ctx, "resume queue", queue, func(q *queueDoc) { q.Paused = false })
}

// SetQueueLimit makes limit the most jobs of queue that run at once, in
// every process; 0 removes the limit. Each running job of a limited queue
// holds a slot file (slots.go), which its claim takes. It implements
// jobstore.QueueLimiter.
func (s *Store) SetQueueLimit(ctx context.Context, queue string, limit int) error {
	if err := jobstore.ValidateQueueLimit(limit); err != nil {
		return fmt.Errorf("filestore: limit queue: %w", err)
	}
	return s.changeQueue(ctx, "limit queue", queue, func(q *queueDoc) { q.Limit = limit })
}

// SetPartitionLimit makes limit the most jobs of each partition of queue
// that run at once, in every process; 0 removes the limit. Each running
// job of a partition of such a queue holds a slot file of its partition
// (slots.go), which its claim takes and its end removes. It implements
// jobstore.QueueLimiter.
func (s *Store) SetPartitionLimit(ctx context.Context, queue string, limit int) error {
	if err := jobstore.ValidateQueueLimit(limit); err != nil {
		return fmt.Errorf("filestore: limit partitions: %w", err)
	}
	return s.changeQueue(ctx, "limit partitions", queue, func(q *queueDoc) { q.PerPartition = limit })
}

// SetQueueRate makes rate the queue's rate limit, in every process; the
// zero Rate removes it. A claim of the queue's jobs records its start in
// the queue's starts file (slots.go), which it reads first. It implements
// jobstore.QueueLimiter.
func (s *Store) SetQueueRate(ctx context.Context, queue string, rate jobstore.Rate) error {
	if err := rate.Validate(); err != nil {
		return fmt.Errorf("filestore: rate-limit queue: %w", err)
	}
	return s.changeQueue(ctx, "rate-limit queue", queue, func(q *queueDoc) { q.Rate = rate.String() })
}

// changeQueue applies change to queue's settings in queuesFile, durably,
// under queuesLock. A queue's settings that this program does not know
// are kept as they are, beside the change.
func (s *Store) changeQueue(ctx context.Context, op, queue string, change func(*queueDoc)) error {
	if err := jobstore.ValidateQueue(queue); err != nil {
		return fmt.Errorf("filestore: %s: %w", op, err)
	}
	if err := s.enter(ctx, op); err != nil {
		return err
	}
	if err := s.changeQueueLocked(ctx, queue, change); err != nil {
		return fmt.Errorf("filestore: %s %s: %w", op, queue, err)
	}
	return nil
}

func (s *Store) changeQueueLocked(ctx context.Context, queue string, change func(*queueDoc)) error {
	unlock, err := lockRecord(ctx, filepath.Join(s.dir, queuesLock), true, true, s.filePerm)
	if err != nil {
		return err
	}
	defer unlock()
	path := filepath.Join(s.dir, queuesFile)
	doc := queuesDoc{Queues: make(map[string]json.RawMessage)}
	if _, err := s.statQueues(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := s.root.OpenFile(queuesFile, os.O_RDONLY|noFollow, 0)
	switch {
	case err == nil:
		data, rerr := io.ReadAll(io.LimitReader(f, maxQueuesFile+1))
		_ = f.Close()
		if rerr != nil {
			return rerr
		}
		if _, err := decodeQueues(path, data); err != nil {
			return fmt.Errorf("%w (run jobdir fsck)", err)
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return err
		}
		if doc.Queues == nil {
			doc.Queues = make(map[string]json.RawMessage)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// Change the fields this program knows; keep the others.
	fields := make(map[string]json.RawMessage)
	if raw, ok := doc.Queues[queue]; ok {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return err
		}
	}
	var q queueDoc
	if raw, ok := doc.Queues[queue]; ok {
		_ = json.Unmarshal(raw, &q)
	}
	before := q
	change(&q)
	if q == before {
		return nil // no change
	}
	known, err := json.Marshal(q)
	if err != nil {
		return err
	}
	for _, f := range queueDocFields {
		delete(fields, f)
	}
	if err := json.Unmarshal(known, &fields); err != nil {
		return err
	}
	if len(fields) == 0 {
		delete(doc.Queues, queue) // a queue with no settings needs no entry
	} else if doc.Queues[queue], err = json.Marshal(fields); err != nil {
		return err
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := s.fs.WriteFile(path, s.tmpDir, append(data, '\n'), s.filePerm, s.durable.file()); err != nil {
		return err
	}
	if err := s.durable.dir("."); err != nil {
		return err
	}
	// This process's waiters, whether or not it watches the store.
	s.mu.Lock()
	s.signalWork()
	s.mu.Unlock()
	return nil
}
