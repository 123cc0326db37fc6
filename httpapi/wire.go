package httpapi

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// This file holds the API's wire types: the JSON the routes send and take,
// apart from jobstore's types, whose JSON is filestore's on-disk record.
// The two may differ (durations are strings here, nanoseconds on disk), so
// neither format can change the other by accident.

// Duration is a length of time that JSON carries as a string in Go's
// duration syntax (time.ParseDuration): "30s", "1m30s", "2h0m0s", "1.5s",
// "250ms". Units are ns, us (or µs), ms, s, m and h; a bare number is
// refused, "0" apart.
type Duration time.Duration

// String returns d in Go's duration syntax, as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText encodes d as a duration string such as "1m30s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText decodes a duration string such as "30s" or "1h30m".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 30s or 1h30m", truncate(string(b), 64))
	}
	*d = Duration(v)
	return nil
}

// Job is a job as the API sends it: the body of the get, wait, submit,
// cancel and retry routes, and each element of a list page or a batch's
// results. Optional fields are absent when empty. Times are RFC 3339
// strings (with up to nanoseconds); durations are Duration strings.
type Job struct {
	// ID identifies the job: a ULID, 26 characters of Crockford base32.
	ID string `json:"id"`
	// Key is the optional idempotency key.
	Key string `json:"key,omitempty"`
	// Kind selects the handler.
	Kind string `json:"kind"`
	// Queue is the job's queue ("default" unless its submit named one).
	Queue string `json:"queue"`
	// Partition is the job's partition within its queue; absent for none.
	Partition string `json:"partition,omitempty"`
	// Tags label the job; absent for none.
	Tags []string `json:"tags,omitempty"`
	// Meta is the job's metadata; absent for none.
	Meta map[string]string `json:"meta,omitempty"`
	// Payload is the job's input, byte for byte as submitted.
	Payload json.RawMessage `json:"payload,omitempty"`
	// State is where the job is in its lifecycle.
	State jobstore.State `json:"state"`
	// Attempt counts the claims so far (1 while the first attempt runs).
	Attempt int `json:"attempt"`
	// MaxAttempts bounds Attempt: a failure of this attempt is final.
	MaxAttempts int `json:"max_attempts"`
	// Priority orders due jobs, higher first.
	Priority int `json:"priority"`
	// RunAt is the earliest time the job may run.
	RunAt time.Time `json:"run_at"`
	// Timeout bounds one attempt; absent (zero) means no limit.
	Timeout Duration `json:"timeout,omitzero"`
	// TimeoutNS is Timeout in nanoseconds, sent next to it so that clients
	// written before Timeout existed keep reading it.
	//
	// Deprecated: read Timeout. A future version stops sending it.
	TimeoutNS int64 `json:"timeout_ns,omitempty"`
	// CreatedAt is when the job was submitted.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the job last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// StartedAt is when the latest attempt was claimed.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the job reached a terminal state.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Result is a successful attempt's output.
	Result json.RawMessage `json:"result,omitempty"`
	// LastError is the latest failed attempt's error.
	LastError string `json:"last_error,omitempty"`
	// CancelRequested says cancel reached the job while it ran.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Worker names the worker that holds (or last held) the job.
	Worker string `json:"worker,omitempty"`
	// After lists, by ID, the jobs that must end before this one may run
	// (its dependencies); absent for none. While one has not ended the
	// job is "waiting".
	After []string `json:"after,omitempty"`
	// AfterAny says that the job runs once its dependencies ended,
	// whatever their outcomes; without it a dependency that failed or was
	// canceled cancels the job.
	AfterAny bool `json:"after_any,omitempty"`
	// Batch names the batch the job belongs to; absent for none.
	Batch string `json:"batch,omitempty"`
	// AfterBatch names the batch whose callback this job is: After holds
	// every job of that batch.
	AfterBatch string `json:"after_batch,omitempty"`
	// History lists the latest finished attempts, oldest first.
	History []AttemptRecord `json:"history,omitempty"`
}

// AttemptRecord is one finished attempt in Job.History.
type AttemptRecord struct {
	// Attempt is the attempt's number.
	Attempt int `json:"attempt"`
	// Worker names the worker that ran it.
	Worker string `json:"worker"`
	// StartedAt is when it was claimed.
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is when its end was recorded.
	FinishedAt time.Time `json:"finished_at"`
	// End says how it ended.
	End jobstore.AttemptEnd `json:"end"`
	// Error is the attempt's error, cut to jobstore.MaxHistoryErrorLen
	// bytes; empty for a success.
	Error string `json:"error,omitempty"`
}

// FromJob returns j as the API sends it.
func FromJob(j jobstore.Job) Job {
	w := Job{
		ID: j.ID, Key: j.Key, Kind: j.Kind, Queue: jobstore.QueueOf(j.Queue), Partition: j.Partition, Tags: j.Tags, Meta: j.Meta, Payload: j.Payload, State: j.State,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Priority: j.Priority,
		RunAt: j.RunAt, Timeout: Duration(j.Timeout), TimeoutNS: int64(j.Timeout),
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Result: j.Result, LastError: j.LastError, CancelRequested: j.CancelRequested, Worker: j.Worker,
		After: j.After, AfterAny: j.AfterAny, Batch: j.Batch, AfterBatch: j.AfterBatch,
	}
	if j.History != nil {
		w.History = make([]AttemptRecord, len(j.History))
		for i, a := range j.History {
			w.History[i] = AttemptRecord{Attempt: a.Attempt, Worker: a.Worker, StartedAt: a.StartedAt,
				FinishedAt: a.FinishedAt, End: a.End, Error: a.Error}
		}
	}
	return w
}

// ToJob returns the jobstore.Job that j describes, for a client that
// works with jobstore's type. The timeout is Timeout, or TimeoutNS when
// Timeout is zero (as a server that sends only timeout_ns has it); if
// both are set and differ, ToJob returns an error wrapping
// jobstore.ErrInvalidInput.
func (j Job) ToJob() (jobstore.Job, error) {
	timeout, err := pickTimeout(j.Timeout.String(), time.Duration(j.Timeout), j.Timeout != 0, j.TimeoutNS, j.TimeoutNS != 0)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	out := jobstore.Job{
		ID: j.ID, Key: j.Key, Kind: j.Kind, Queue: jobstore.QueueOf(j.Queue), Partition: j.Partition, Tags: j.Tags, Meta: j.Meta, Payload: j.Payload, State: j.State,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Priority: j.Priority,
		RunAt: j.RunAt, Timeout: timeout,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Result: j.Result, LastError: j.LastError, CancelRequested: j.CancelRequested, Worker: j.Worker,
		After: j.After, AfterAny: j.AfterAny, Batch: j.Batch, AfterBatch: j.AfterBatch,
	}
	if j.History != nil {
		out.History = make([]jobstore.AttemptRecord, len(j.History))
		for i, a := range j.History {
			out.History[i] = jobstore.AttemptRecord{Attempt: a.Attempt, Worker: a.Worker, StartedAt: a.StartedAt,
				FinishedAt: a.FinishedAt, End: a.End, Error: a.Error}
		}
	}
	return out, nil
}

// pickTimeout returns the timeout that a duration string (text, which
// parsed as d) and the deprecated nanosecond count describe, each given or
// not: the one given, or the common value of both, or an error wrapping
// jobstore.ErrInvalidInput when both are given and differ.
func pickTimeout(text string, d time.Duration, dGiven bool, ns int64, nsGiven bool) (time.Duration, error) {
	if dGiven && nsGiven && int64(d) != ns {
		return 0, fmt.Errorf("%w: timeout %q (%s) and timeout_ns %d (%s) disagree: send timeout alone, a duration such as 30s (timeout_ns is deprecated)",
			jobstore.ErrInvalidInput, truncate(text, 64), d, ns, time.Duration(ns))
	}
	if nsGiven && !dGiven {
		return time.Duration(ns), nil
	}
	return d, nil
}

// SubmitRequest is the body of POST /v1/jobs, and each element of a batch
// submit's "jobs": what a Go client encodes to submit a job. The server
// also takes the deprecated "timeout_ns" (nanoseconds) in place of, or
// equal to, Timeout, and refuses unknown fields.
type SubmitRequest struct {
	// Kind selects the handler; required.
	Kind string `json:"kind"`
	// Key is the optional idempotency key.
	Key string `json:"key,omitempty"`
	// Queue is the job's queue; empty means "default".
	Queue string `json:"queue,omitempty"`
	// Partition is the job's partition within its queue; empty for none.
	Partition string `json:"partition,omitempty"`
	// Tags label the job (jobstore.Spec.Tags); empty for none.
	Tags []string `json:"tags,omitempty"`
	// Meta is the job's metadata (jobstore.Spec.Meta); empty for none.
	Meta map[string]string `json:"meta,omitempty"`
	// Payload is the job's input, any JSON value; empty means none.
	Payload json.RawMessage `json:"payload,omitempty"`
	// MaxAttempts bounds the attempts; zero means the store's default.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Priority orders due jobs, higher first.
	Priority int `json:"priority,omitempty"`
	// RunAt delays the job until then; zero means now.
	RunAt time.Time `json:"run_at,omitzero"`
	// Timeout bounds each attempt; zero means none.
	Timeout Duration `json:"timeout,omitzero"`
	// After names, by ID, jobs that must end before this one may run (its
	// dependencies): each must exist. Empty for none.
	After []string `json:"after,omitempty"`
	// AfterKeys names dependencies by idempotency key: of a job of the
	// store, or of an earlier job of the same batch submit.
	AfterKeys []string `json:"after_keys,omitempty"`
	// AfterSpecs names dependencies by their index in the "jobs" of the
	// same batch submit, each lower than this job's own; a single submit
	// refuses it.
	AfterSpecs []int `json:"after_specs,omitempty"`
	// AfterAny runs the job once its dependencies ended, whatever their
	// outcomes; without it a dependency that fails or is canceled cancels
	// the job.
	AfterAny bool `json:"after_any,omitempty"`
	// Batch adds the job to the named batch.
	Batch string `json:"batch,omitempty"`
	// AfterBatch makes the job the callback of the named batch: it waits
	// for every job of the batch, runs once all ended whatever their
	// outcomes, and closes the batch.
	AfterBatch string `json:"after_batch,omitempty"`
}

// FromSpec returns the request that submits spec.
func FromSpec(spec jobstore.Spec) SubmitRequest {
	return SubmitRequest{Kind: spec.Kind, Key: spec.Key, Queue: spec.Queue, Partition: spec.Partition, Tags: spec.Tags, Meta: spec.Meta, Payload: spec.Payload, MaxAttempts: spec.MaxAttempts,
		Priority: spec.Priority, RunAt: spec.RunAt, Timeout: Duration(spec.Timeout),
		After: spec.After, AfterKeys: spec.AfterKeys, AfterSpecs: spec.AfterSpecs, AfterAny: spec.AfterAny, Batch: spec.Batch, AfterBatch: spec.AfterBatch}
}

// ToSpec returns the spec that r describes.
func (r SubmitRequest) ToSpec() jobstore.Spec {
	return jobstore.Spec{Kind: r.Kind, Key: r.Key, Queue: r.Queue, Partition: r.Partition, Tags: r.Tags, Meta: r.Meta, Payload: r.Payload, MaxAttempts: r.MaxAttempts,
		Priority: r.Priority, RunAt: r.RunAt, Timeout: time.Duration(r.Timeout),
		After: r.After, AfterKeys: r.AfterKeys, AfterSpecs: r.AfterSpecs, AfterAny: r.AfterAny, Batch: r.Batch, AfterBatch: r.AfterBatch}
}

// BatchRequest is the body of POST /v1/jobs/batch.
type BatchRequest struct {
	// Jobs are the jobs to submit, at most jobstore.MaxBatch.
	Jobs []SubmitRequest `json:"jobs"`
}

// BatchResult is one element of BatchResponse.Results.
type BatchResult struct {
	// Job is the new job, or the job that already had the key.
	Job Job `json:"job"`
	// Created is false when the key already named a job, or an earlier
	// job of the batch had the same key.
	Created bool `json:"created"`
}

// BatchResponse is the body of the answer to POST /v1/jobs/batch.
type BatchResponse struct {
	// Results holds one result per submitted job, in request order.
	Results []BatchResult `json:"results"`
}

// ListResponse is the body of the answer to GET /v1/jobs.
type ListResponse struct {
	// Jobs is the page, never null.
	Jobs []Job `json:"jobs"`
	// Next is the cursor of the following page; empty on the last.
	Next string `json:"next,omitempty"`
	// ByteLimited says the page holds fewer jobs than the limit because
	// their size reached the server's byte budget (Options.MaxListBytes);
	// Next continues it.
	ByteLimited bool `json:"byte_limited,omitempty"`
	// Skipped names records the store could not read (corrupt) and left
	// out of the page.
	Skipped []string `json:"skipped,omitempty"`
}
