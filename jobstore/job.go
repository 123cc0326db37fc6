package jobstore

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jobdir/jobdir/internal/clip"
	"github.com/oklog/ulid/v2"
)

// Limits and defaults that apply to every store.
const (
	// DefaultMaxPayload is the default limit, in bytes, on a job's payload and
	// on its result.
	DefaultMaxPayload = 1 << 20
	// DefaultMaxAttempts is used when a Spec leaves MaxAttempts zero.
	DefaultMaxAttempts = 3
	// MaxKeyLen is the longest idempotency key accepted, in bytes.
	MaxKeyLen = 512
	// MaxKindLen is the longest kind accepted, in bytes.
	MaxKindLen = 128
	// MaxErrorLen is the longest error message kept on a job, in bytes;
	// longer messages are truncated.
	MaxErrorLen = 16 << 10
)

// Job is one unit of work and everything known about it. Its JSON form is
// the on-disk record of filestore (and what jobdir get --json prints), so
// the field names below are fixed. The HTTP API sends a form of its own,
// httpapi.Job, whose timeout is a duration string.
type Job struct {
	// ID identifies the job: a ULID, 26 characters of Crockford base32,
	// time-sortable and safe in URLs and file names.
	ID string `json:"id"`
	// Key is the optional idempotency key. At most one job exists per key
	// until that job is pruned.
	Key string `json:"key,omitempty"`
	// Kind selects the handler that runs the job.
	Kind string `json:"kind"`
	// Queue is the queue the job is in, DefaultQueue unless its Spec named
	// another. Workers choose the queues they take (ClaimRequest.Queues),
	// and a paused queue's jobs are not claimed (QueueController).
	Queue string `json:"queue"`
	// Partition is the job's partition within its queue, empty for none:
	// a queue's per-partition limit bounds how many jobs of each partition
	// run at once (QueueLimiter.SetPartitionLimit).
	Partition string `json:"partition,omitempty"`
	// Tags label the job for people and filters (ListOptions.Tag), in the
	// order its Spec gave them, without repeats; nil for none.
	Tags []string `json:"tags,omitempty"`
	// Meta is the job's metadata, from its Spec: what its submitter
	// wanted carried with it (a request's ID, a trace context; see
	// Spec.Meta); nil for none. The store never reads it.
	Meta map[string]string `json:"meta,omitempty"`
	// Payload is the job's input, a JSON value.
	Payload json.RawMessage `json:"payload,omitempty"`
	// State is where the job is in its lifecycle.
	State State `json:"state"`
	// Attempt counts the claims so far: 0 before the first, 1 while the
	// first attempt runs.
	Attempt int `json:"attempt"`
	// MaxAttempts bounds Attempt: a failure of attempt MaxAttempts is final.
	MaxAttempts int `json:"max_attempts"`
	// Priority orders due jobs: higher runs first. Default 0.
	Priority int `json:"priority"`
	// RunAt is the earliest time the job may be claimed.
	RunAt time.Time `json:"run_at"`
	// Timeout bounds one attempt; zero means no limit beyond the runner's.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// CreatedAt is when the job was submitted.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// StartedAt is when the latest attempt was claimed.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the job reached a terminal state.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Result is the successful attempt's output, a JSON value.
	Result json.RawMessage `json:"result,omitempty"`
	// LastError is the error of the latest failed attempt.
	LastError string `json:"last_error,omitempty"`
	// CancelRequested is set when Cancel reached the job while it ran.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Worker names the worker that holds (or last held) the job.
	Worker string `json:"worker,omitempty"`
	// After lists the jobs, by ID, that must end before this one may be
	// claimed (Spec.After, AfterKeys and AfterSpecs, resolved at submit);
	// nil for none. While one of them has not ended the job is
	// StateWaiting.
	After []string `json:"after,omitempty"`
	// AfterAny says that the job runs once every job of After ended,
	// whatever their outcomes; without it a dependency that failed or was
	// canceled cancels the job.
	AfterAny bool `json:"after_any,omitempty"`
	// Batch names the batch the job belongs to (Spec.Batch); empty for
	// none.
	Batch string `json:"batch,omitempty"`
	// AfterBatch names the batch whose callback this job is
	// (Spec.AfterBatch): After holds every job of that batch.
	AfterBatch string `json:"after_batch,omitempty"`
	// History lists the job's latest finished attempts, oldest first: at
	// most MaxHistory of them, each with how it ended. The running attempt
	// is not in it until it ends. The Apply functions keep it, so every
	// store does.
	History []AttemptRecord `json:"history,omitempty"`
}

// Clone returns a copy of j that shares no memory with it: its payload,
// result, tags, meta, dependencies and history are copied, so that a
// change to either leaves the other as it was.
func (j Job) Clone() Job {
	j.Payload = slices.Clone(j.Payload)
	j.Result = slices.Clone(j.Result)
	j.Tags = slices.Clone(j.Tags)
	j.Meta = maps.Clone(j.Meta)
	j.After = slices.Clone(j.After)
	j.History = slices.Clone(j.History)
	return j
}

// Bounds of Job.History.
const (
	// MaxHistory is the most attempts Job.History keeps; older ones are
	// dropped first.
	MaxHistory = 20
	// MaxHistoryErrorLen is the longest error an AttemptRecord keeps, in
	// bytes (the full error of the latest failure is Job.LastError).
	MaxHistoryErrorLen = 512
)

// AttemptEnd says how an attempt ended. Its string form is the on-disk and
// wire form.
type AttemptEnd string

// The ways an attempt ends.
const (
	// EndSucceeded: the handler returned a result.
	EndSucceeded AttemptEnd = "succeeded"
	// EndFailed: the handler returned an error.
	EndFailed AttemptEnd = "failed"
	// EndTimedOut: the attempt ran past its timeout and was stopped.
	EndTimedOut AttemptEnd = "timed_out"
	// EndCanceled: the attempt was stopped because Cancel was requested.
	EndCanceled AttemptEnd = "canceled"
	// EndWorkerLost: the worker died during the attempt and the job was
	// recovered by another process, or the worker gave the attempt back
	// because it could not record its outcome (Store.Release).
	EndWorkerLost AttemptEnd = "worker_lost"
	// EndInterrupted: the worker shut down gracefully during the attempt.
	// Such an attempt does not count against MaxAttempts.
	EndInterrupted AttemptEnd = "interrupted"
)

// AttemptEnds returns every AttemptEnd.
func AttemptEnds() []AttemptEnd {
	return []AttemptEnd{EndSucceeded, EndFailed, EndTimedOut, EndCanceled, EndWorkerLost, EndInterrupted}
}

// Counted reports whether an attempt that ended so counts against the
// job's MaxAttempts: every one but EndInterrupted.
func (e AttemptEnd) Counted() bool { return e != EndInterrupted }

// CountedAttempts returns the attempts of j that count against its limit
// (used), the limit as it was set (limit), and how many attempts did not
// count (interrupted: a worker shut down during them, and each raised
// MaxAttempts by one, see storekit.ApplyOutcome), as a person should read them:
// a job of 3 attempts whose first was interrupted has used 0 of 3, not 1
// of 4. The interrupted attempts are those of History, so the figures are
// exact while the job has had at most MaxHistory attempts; past that, the
// interrupted ones History no longer holds count as used.
func (j Job) CountedAttempts() (used, limit, interrupted int) {
	for _, a := range j.History {
		if !a.End.Counted() {
			interrupted++
		}
	}
	return j.Attempt - interrupted, j.MaxAttempts - interrupted, interrupted
}

// AttemptRecord is one finished attempt in Job.History.
type AttemptRecord struct {
	// Attempt is the attempt's number (Job.Attempt while it ran).
	Attempt int `json:"attempt"`
	// Worker names the worker that ran it.
	Worker string `json:"worker"`
	// StartedAt is when it was claimed.
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is when its end was recorded.
	FinishedAt time.Time `json:"finished_at"`
	// End says how it ended.
	End AttemptEnd `json:"end"`
	// Error is the attempt's error, at most MaxHistoryErrorLen bytes; empty
	// for a success.
	Error string `json:"error,omitempty"`
}

// Lease identifies one attempt of a job by one worker. Complete and
// WatchCancel accept a lease only while it still holds the job, so a worker
// that lost its job (for example because it was presumed dead and the job
// ran elsewhere) cannot overwrite the newer attempt's outcome.
type Lease struct {
	ID      string `json:"id"`
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

// Validate checks the fields of a lease a caller passes to a store: a
// valid ID and worker name and an attempt of at least 1. Every store calls
// it first in the methods that take a lease (Complete, WatchCancel,
// Release), so a malformed lease fails with the same error in each rather
// than as a lease that is not held. Its error wraps ErrInvalidInput.
func (l Lease) Validate() error {
	if err := ValidateID(l.ID); err != nil {
		return err
	}
	if err := ValidateWorker(l.Worker); err != nil {
		return err
	}
	if l.Attempt < 1 {
		return fmt.Errorf("%w: lease attempt %d", ErrInvalidInput, l.Attempt)
	}
	return nil
}

// Lease returns the lease of the job's current attempt.
func (j Job) Lease() Lease {
	return Lease{ID: j.ID, Worker: j.Worker, Attempt: j.Attempt}
}

// Holds reports whether lease l currently holds job j.
func (j Job) Holds(l Lease) bool {
	return j.State == StateRunning && j.ID == l.ID && j.Worker == l.Worker && j.Attempt == l.Attempt
}

// jobOverhead is what Size counts for the fields of a job's JSON form
// whose size is bounded: names, times, numbers, ID, state, kind and queue.
const jobOverhead = 512

// Size approximates the bytes of j's JSON form: its payload, result, last
// error, key, partition and worker name, plus a fixed 512 bytes for the other fields.
// ListOptions.MaxBytes counts it.
func (j Job) Size() int {
	n := jobOverhead + len(j.Payload) + len(j.Result) + len(j.LastError) + len(j.Key) + len(j.Partition) + len(j.Worker) +
		len(j.After)*(ulid.EncodedSize+3) + len(j.Batch) + len(j.AfterBatch)
	for _, t := range j.Tags {
		n += len(t) + 3
	}
	for k, v := range j.Meta {
		n += len(k) + len(v) + 6
	}
	return n
}

// RerunSpec returns the spec of a new job that does what j does: its kind,
// queue, partition, tags, metadata, payload, attempts, priority and
// timeout, without its key (which names j), its dependencies and its
// batch, and due at once.
func (j Job) RerunSpec() Spec {
	return Spec{Kind: j.Kind, Queue: j.Queue, Partition: j.Partition, Tags: slices.Clone(j.Tags),
		Meta: cloneMeta(j.Meta), Payload: j.Payload,
		MaxAttempts: j.MaxAttempts, Priority: j.Priority, Timeout: j.Timeout}
}

// Spec describes a job to submit.
type Spec struct {
	// Kind selects the handler. Required: 1 to MaxKindLen bytes of letters,
	// digits and ._:/- .
	Kind string `json:"kind"`
	// Key is an optional idempotency key: printable UTF-8, at most MaxKeyLen
	// bytes.
	Key string `json:"key,omitempty"`
	// Queue names the job's queue (see ValidateQueue); empty means
	// DefaultQueue.
	Queue string `json:"queue,omitempty"`
	// Partition puts the job in a partition of its queue (a customer's ID,
	// say; see ValidatePartition), empty for none. A queue's per-partition
	// limit bounds how many jobs of each partition run at once; a job
	// without a partition is bounded only by the queue's own limit.
	Partition string `json:"partition,omitempty"`
	// Tags label the job (see ValidateTags): at most MaxTags of 1 to
	// MaxTagLen bytes of letters, digits and ._:/-= each ("team=billing",
	// "nightly"). List filters by one (ListOptions.Tag). A tag given twice
	// is kept once.
	Tags []string `json:"tags,omitempty"`
	// Meta is metadata carried with the job and shown with it, never read
	// by the store (see ValidateMeta): at most MaxMetaEntries entries,
	// keys of letters, digits and ._:/- , printable values of at most
	// MaxMetaValueLen bytes. otelrunner keeps the submitter's trace context
	// here ("traceparent"), so that an attempt's span is a child of the
	// submit's, in whatever process runs it.
	Meta map[string]string `json:"meta,omitempty"`
	// Payload is the job's input, a JSON value (empty means none).
	Payload json.RawMessage `json:"payload,omitempty"`
	// MaxAttempts bounds the attempts; zero means DefaultMaxAttempts.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Priority orders due jobs, higher first.
	Priority int `json:"priority,omitempty"`
	// RunAt delays the job until then; zero means now.
	RunAt time.Time `json:"run_at,omitzero"`
	// Timeout bounds each attempt; zero means none.
	Timeout time.Duration `json:"timeout_ns,omitempty"`

	// After names jobs by ID that must end before this one may be claimed
	// (its dependencies); the job is StateWaiting until then. Each must
	// exist when the job is submitted, so no cycle can be built. Together
	// with AfterKeys and AfterSpecs at most MaxAfter.
	After []string `json:"after,omitempty"`
	// AfterKeys names dependencies by idempotency key: of a job of the
	// store, or of an earlier spec of the same SubmitBatch.
	AfterKeys []string `json:"after_keys,omitempty"`
	// AfterSpecs names dependencies by their index among the specs of the
	// same SubmitBatch; each must be lower than this spec's own. Submit
	// refuses it.
	AfterSpecs []int `json:"after_specs,omitempty"`
	// AfterAny runs the job once every dependency ended, whatever their
	// outcomes (the shape of a callback). Without it a dependency that
	// fails or is canceled cancels the job, with a LastError that names
	// it, as soon as that happens.
	AfterAny bool `json:"after_any,omitempty"`
	// Batch adds the job to a batch, a group of jobs that a callback can
	// wait for (AfterBatch; see ValidateBatchName). A batch exists from
	// its first job on; once a callback closed it, a submit to it fails
	// with ErrBatchClosed.
	Batch string `json:"batch,omitempty"`
	// AfterBatch makes the job a callback of a batch: it waits for every
	// job of the batch and runs once all ended, whatever their outcomes
	// (AfterAny is implied). Submitting it closes the batch. An unknown
	// or empty batch is refused.
	AfterBatch string `json:"after_batch,omitempty"`
}

// Validate checks the spec against the rules above and the payload limit
// maxPayload (zero means DefaultMaxPayload). Errors wrap ErrInvalidInput, or
// ErrPayloadTooLarge.
func (s Spec) Validate(maxPayload int) error {
	if err := ValidateKind(s.Kind); err != nil {
		return err
	}
	if s.Key != "" {
		if err := ValidateKey(s.Key); err != nil {
			return err
		}
	}
	if s.Queue != "" {
		if err := ValidateQueue(s.Queue); err != nil {
			return err
		}
	}
	if s.Partition != "" {
		if err := ValidatePartition(s.Partition); err != nil {
			return err
		}
	}
	if err := ValidateTags(s.Tags); err != nil {
		return err
	}
	if err := ValidateMeta(s.Meta); err != nil {
		return err
	}
	if err := ValidatePayload(s.Payload, maxPayload); err != nil {
		return err
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > 1000 {
		return fmt.Errorf("%w: max attempts %d out of range 0..1000", ErrInvalidInput, s.MaxAttempts)
	}
	if s.Priority < -1000 || s.Priority > 1000 {
		return fmt.Errorf("%w: priority %d out of range -1000..1000", ErrInvalidInput, s.Priority)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout %s", ErrInvalidInput, s.Timeout)
	}
	return s.validateDeps()
}

// NewJob returns the queued job that submitting spec at time now creates,
// with a fresh ID. It does not validate spec.
func NewJob(spec Spec, now time.Time) Job {
	now = now.UTC()
	j := Job{
		ID:          NewID(now),
		Key:         spec.Key,
		Kind:        spec.Kind,
		Queue:       QueueOf(spec.Queue),
		Partition:   spec.Partition,
		Tags:        uniqueTags(spec.Tags),
		Meta:        cloneMeta(spec.Meta),
		Payload:     compactOrNil(spec.Payload),
		State:       StateQueued,
		MaxAttempts: spec.MaxAttempts,
		Priority:    spec.Priority,
		RunAt:       spec.RunAt.UTC(),
		Timeout:     spec.Timeout,
		CreatedAt:   now,
		UpdatedAt:   now,
		Batch:       spec.Batch,
		AfterBatch:  spec.AfterBatch,
		AfterAny:    spec.AfterAny || spec.AfterBatch != "",
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = DefaultMaxAttempts
	}
	if j.RunAt.IsZero() || j.RunAt.Before(now) {
		j.RunAt = now
	}
	return j
}

func compactOrNil(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), p...)
}

var (
	entropyMu sync.Mutex
	entropy   = ulid.Monotonic(rand.Reader, 0)
)

// NewID returns a new ULID for a job created at t. IDs from one process are
// strictly increasing; IDs from different processes sort by their
// millisecond.
func NewID(t time.Time) string {
	entropyMu.Lock()
	defer entropyMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(t), entropy).String()
}

// ValidateID returns nil if id is a canonical job ID (26 upper-case
// Crockford base32 characters) and an error wrapping ErrInvalidID otherwise.
// A valid ID contains no path separator, dot or NUL, so it is safe as a file
// name.
func ValidateID(id string) error {
	if len(id) != ulid.EncodedSize {
		return fmt.Errorf("%w: %q: want %d characters", ErrInvalidID, clip.String(id, 64), ulid.EncodedSize)
	}
	for i := 0; i < len(id); i++ {
		if !isCrockford(id[i]) {
			return fmt.Errorf("%w: %q: character %d is not Crockford base32", ErrInvalidID, clip.String(id, 64), i)
		}
	}
	if id[0] > '7' { // the first character holds only 3 bits
		return fmt.Errorf("%w: %q: timestamp overflows", ErrInvalidID, id)
	}
	return nil
}

func isCrockford(c byte) bool {
	switch {
	case c >= '0' && c <= '9':
		return true
	case c >= 'A' && c <= 'Z':
		return c != 'I' && c != 'L' && c != 'O' && c != 'U'
	}
	return false
}

// ValidateKind checks a job kind.
func ValidateKind(kind string) error {
	if kind == "" {
		return fmt.Errorf("%w: kind is required", ErrInvalidInput)
	}
	if len(kind) > MaxKindLen {
		return fmt.Errorf("%w: kind is %d bytes, limit %d", ErrInvalidInput, len(kind), MaxKindLen)
	}
	if !nameOf(kind) {
		return fmt.Errorf("%w: kind %q: only letters, digits and ._:/- are allowed", ErrInvalidInput, clip.String(kind, 64))
	}
	return nil
}

// ValidateKey checks an idempotency key: valid UTF-8, at most MaxKeyLen bytes,
// no control characters.
func ValidateKey(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, limit %d", ErrInvalidInput, len(key), MaxKeyLen)
	}
	return checkPrintable("key", key)
}

// checkPrintable checks that s, the what of a job, is printable UTF-8.
func checkPrintable(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidInput, what)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: %s contains control character %U", ErrInvalidInput, what, r)
		}
	}
	return nil
}

// MaxPartitionLen is the longest partition accepted, in bytes.
const MaxPartitionLen = 256

// ValidatePartition checks a job's partition: 1 to MaxPartitionLen bytes of
// printable UTF-8, as a key. Its error wraps ErrInvalidInput.
func ValidatePartition(partition string) error {
	if partition == "" {
		return fmt.Errorf("%w: partition is empty", ErrInvalidInput)
	}
	if len(partition) > MaxPartitionLen {
		return fmt.Errorf("%w: partition is %d bytes, limit %d", ErrInvalidInput, len(partition), MaxPartitionLen)
	}
	return checkPrintable("partition", partition)
}

// ValidateLookupKey checks the key of a lookup by key (Client.GetByKey):
// a valid key, and not empty.
func ValidateLookupKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidInput)
	}
	return ValidateKey(key)
}

// ValidatePayload checks that p is empty or one JSON value of at most
// maxPayload bytes (zero means DefaultMaxPayload).
func ValidatePayload(p json.RawMessage, maxPayload int) error {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if len(p) > maxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(p), maxPayload)
	}
	if len(p) > 0 && !json.Valid(p) {
		return fmt.Errorf("%w: payload is not valid JSON", ErrInvalidInput)
	}
	return nil
}

// TruncateError shortens an error message to MaxErrorLen bytes, keeping
// valid UTF-8.
func TruncateError(msg string) string {
	return clip.String(msg, MaxErrorLen)
}
