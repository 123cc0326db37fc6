package filestore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// This file reads a directory written by the old single-process file store
// (flat <id>.json files; see testdata/legacy/README.md) and maps each record
// to a jobstore.Job. It only reads: Open decides what to write.

// legacyRecord is the old store's record.
type legacyRecord struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"max_attempts"`
	Priority       int             `json:"priority"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	Result         json.RawMessage `json:"result"`
	Error          string          `json:"error"`
}

// legacyWorker is the worker recorded on jobs the old store left running.
// No process holds their lease, so recovery treats them as a dead worker's.
const legacyWorker = "legacy-file-store"

var legacyStates = map[string]jobstore.State{
	"pending":   jobstore.StateQueued,
	"running":   jobstore.StateRunning,
	"completed": jobstore.StateSucceeded,
	"failed":    jobstore.StateFailed,
	"cancelled": jobstore.StateCanceled,
}

// legacyProblem is a legacy file that was not migrated as it stood.
type legacyProblem struct {
	Path string
	Err  error
	// Kept is true when the job was migrated with a change (its key
	// dropped) rather than set aside.
	Kept bool
}

// legacyScan is what scanLegacy found.
type legacyScan struct {
	// Jobs are the migratable jobs, ordered by ID.
	Jobs []jobstore.Job
	// Sources maps a job ID to the legacy file it came from.
	Sources map[string]string
	// Temps are the old store's leftover temp files.
	Temps []string
	// Problems are files set aside (and jobs changed), each with the reason.
	Problems []legacyProblem
}

// isLegacyTemp reports whether name is a temp file of the old store.
func isLegacyTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".json.tmp")
}

// hasLegacyFiles reports whether dir holds files of the old store at its top
// level.
func hasLegacyFiles(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && (strings.HasSuffix(e.Name(), ".json") || isLegacyTemp(e.Name())) {
			return true, nil
		}
	}
	return false, nil
}

// scanLegacy reads every top-level *.json file in dir as an old record. A
// file that cannot be read, decoded or mapped is a problem, never a guess.
// When several records share a key (two processes of the old store both
// accepted it), the oldest keeps it and the others lose it.
func scanLegacy(dir string, maxPayload int) (legacyScan, error) {
	scan := legacyScan{Sources: map[string]string{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return scan, err
	}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case isLegacyTemp(name) && e.Type().IsRegular():
			scan.Temps = append(scan.Temps, path)
			continue
		case !strings.HasSuffix(name, ".json"):
			continue
		case !e.Type().IsRegular():
			scan.Problems = append(scan.Problems, legacyProblem{Path: path, Err: fmt.Errorf("%w: not a regular file", jobstore.ErrCorrupt)})
			continue
		}
		job, err := readLegacyRecord(path, strings.TrimSuffix(name, ".json"), maxPayload)
		if err != nil {
			scan.Problems = append(scan.Problems, legacyProblem{Path: path, Err: err})
			continue
		}
		scan.Jobs = append(scan.Jobs, job)
		scan.Sources[job.ID] = path
	}
	sort.Slice(scan.Jobs, func(i, k int) bool { return scan.Jobs[i].ID < scan.Jobs[k].ID })
	owner := map[string]string{}
	for i := range scan.Jobs {
		j := &scan.Jobs[i]
		if j.Key == "" {
			continue
		}
		if first, dup := owner[j.Key]; dup {
			scan.Problems = append(scan.Problems, legacyProblem{
				Path: scan.Sources[j.ID],
				Err:  fmt.Errorf("key %q already belongs to job %s (the old store accepted it twice); job %s kept without its key", j.Key, first, j.ID),
				Kept: true,
			})
			j.Key = ""
			continue
		}
		owner[j.Key] = j.ID
	}
	return scan, nil
}

// readLegacyRecord reads and maps one old record whose file name gives
// wantID.
func readLegacyRecord(path, wantID string, maxPayload int) (jobstore.Job, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return jobstore.Job{}, err
	}
	var rec legacyRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rec); err != nil {
		return jobstore.Job{}, fmt.Errorf("%w: %s: %v", jobstore.ErrCorrupt, path, err)
	}
	if dec.More() {
		return jobstore.Job{}, fmt.Errorf("%w: %s: trailing data after the record", jobstore.ErrCorrupt, path)
	}
	job, err := rec.job(wantID, maxPayload)
	if err != nil {
		return jobstore.Job{}, fmt.Errorf("%s: %w", path, err)
	}
	return job, nil
}

// job maps an old record to a Job.
func (r legacyRecord) job(wantID string, maxPayload int) (jobstore.Job, error) {
	if err := jobstore.ValidateID(r.ID); err != nil {
		return jobstore.Job{}, err
	}
	if r.ID != wantID {
		return jobstore.Job{}, fmt.Errorf("%w: record id %s does not match its file name", jobstore.ErrCorrupt, r.ID)
	}
	state, ok := legacyStates[r.Status]
	if !ok {
		return jobstore.Job{}, fmt.Errorf("%w: unknown status %q", jobstore.ErrCorrupt, r.Status)
	}
	if r.CreatedAt.IsZero() {
		return jobstore.Job{}, fmt.Errorf("%w: no created_at", jobstore.ErrCorrupt)
	}
	spec := jobstore.Spec{Kind: r.Type, Key: r.IdempotencyKey, Payload: r.Payload, MaxAttempts: r.MaxAttempts, Priority: r.Priority}
	if string(spec.Payload) == "null" {
		spec.Payload = nil
	}
	if err := spec.Validate(maxPayload); err != nil {
		return jobstore.Job{}, err
	}
	if r.Attempts < 0 {
		return jobstore.Job{}, fmt.Errorf("%w: negative attempts", jobstore.ErrCorrupt)
	}
	if len(r.Result) > 0 && !json.Valid(r.Result) {
		return jobstore.Job{}, fmt.Errorf("%w: result is not JSON", jobstore.ErrCorrupt)
	}
	updated := r.UpdatedAt
	if updated.IsZero() {
		updated = r.CreatedAt
	}
	j := jobstore.Job{
		ID:          r.ID,
		Key:         r.IdempotencyKey,
		Kind:        r.Type,
		Payload:     spec.Payload,
		State:       state,
		Attempt:     r.Attempts,
		MaxAttempts: r.MaxAttempts,
		Priority:    r.Priority,
		RunAt:       r.CreatedAt.UTC(),
		CreatedAt:   r.CreatedAt.UTC(),
		UpdatedAt:   updated.UTC(),
		LastError:   jobstore.TruncateError(r.Error),
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = jobstore.DefaultMaxAttempts
	}
	if j.Attempt > j.MaxAttempts && !state.Terminal() {
		j.MaxAttempts = j.Attempt
	}
	switch {
	case state == jobstore.StateRunning:
		if j.Attempt == 0 {
			j.Attempt = 1
		}
		j.Worker = legacyWorker
		j.StartedAt = j.UpdatedAt
	case state.Terminal():
		j.FinishedAt = j.UpdatedAt
		if state == jobstore.StateSucceeded && len(r.Result) > 0 && string(r.Result) != "null" {
			j.Result = r.Result
		}
	}
	return j, nil
}
