package jobstore

import (
	"fmt"
	"time"

	"github.com/jobdir/jobdir/internal/clip"
)

// The methods below answer questions about a job or a listing that users
// and stores ask alike; the state changes themselves are storekit's.

// Due reports whether j is queued and its RunAt has passed at now.
func (j Job) Due(now time.Time) bool {
	return j.State == StateQueued && !j.RunAt.After(now)
}

// Prunable reports whether j is terminal and finished before cutoff.
func (j Job) Prunable(cutoff time.Time) bool {
	return j.State.Terminal() && j.FinishedAt.Before(cutoff)
}

// MatchesList reports whether j passes the filters of opts (not the cursor).
func (j Job) MatchesList(opts ListOptions) bool {
	if opts.Kind != "" && j.Kind != opts.Kind {
		return false
	}
	if opts.Queue != "" && QueueOf(j.Queue) != opts.Queue {
		return false
	}
	if opts.Tag != "" && !j.HasTag(opts.Tag) {
		return false
	}
	if len(opts.States) == 0 {
		return true
	}
	for _, s := range opts.States {
		if j.State == s {
			return true
		}
	}
	return false
}

// Normalize validates opts and fills in its defaults.
func (opts ListOptions) Normalize() (ListOptions, error) {
	for _, s := range opts.States {
		if !s.Valid() {
			return opts, fmt.Errorf("%w: unknown state %q", ErrInvalidInput, s)
		}
	}
	if opts.Kind != "" {
		if err := ValidateKind(opts.Kind); err != nil {
			return opts, err
		}
	}
	if opts.Queue != "" {
		if err := ValidateQueue(opts.Queue); err != nil {
			return opts, err
		}
	}
	if opts.Tag != "" {
		if err := ValidateTag(opts.Tag); err != nil {
			return opts, err
		}
	}
	if opts.Cursor != "" {
		if err := ValidateID(opts.Cursor); err != nil {
			return opts, fmt.Errorf("%w: bad cursor", err)
		}
	}
	switch {
	case opts.Limit < 0:
		return opts, fmt.Errorf("%w: negative limit", ErrInvalidInput)
	case opts.Limit == 0:
		opts.Limit = DefaultListLimit
	case opts.Limit > MaxListLimit:
		opts.Limit = MaxListLimit
	}
	if opts.Order != NewestFirst && opts.Order != OldestFirst {
		return opts, fmt.Errorf("%w: unknown order %d", ErrInvalidInput, opts.Order)
	}
	if opts.MaxBytes < 0 {
		return opts, fmt.Errorf("%w: negative byte limit", ErrInvalidInput)
	}
	return opts, nil
}

// AfterCursor reports whether id comes after cursor in order (always true
// for an empty cursor).
func (opts ListOptions) AfterCursor(id string) bool {
	if opts.Cursor == "" {
		return true
	}
	if opts.Order == OldestFirst {
		return id > opts.Cursor
	}
	return id < opts.Cursor
}

// ValidateWorker checks a worker name: 1 to 256 bytes of printable ASCII.
func ValidateWorker(w string) error {
	if w == "" || len(w) > 256 {
		return fmt.Errorf("%w: worker name must be 1 to 256 bytes", ErrInvalidInput)
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 0x21 || w[i] > 0x7e {
			return fmt.Errorf("%w: worker name %q: printable ASCII without spaces only", ErrInvalidInput, clip.String(w, 64))
		}
	}
	return nil
}
