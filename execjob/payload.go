package execjob

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jobdir/jobdir/jobstore"
)

// Kind is the job kind that Handler runs.
const Kind = "exec"

// Payload is the input of an exec job, stored as the job's JSON payload.
type Payload struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH
	// when it has no slash. There is no shell: write ["sh", "-c", "..."] to
	// get one. Required.
	Argv []string `json:"argv"`
	// Dir is the absolute working directory the program starts in. Required.
	Dir string `json:"dir"`
	// Env holds extra "KEY=VALUE" entries added to the worker's environment
	// (they override the worker's values of the same keys).
	Env []string `json:"env,omitempty"`
}

// Validate checks p: a non-empty Argv whose first element is not empty, an
// absolute Dir, Env entries of the form KEY=VALUE, and no NUL byte anywhere.
// Errors wrap jobstore.ErrInvalidInput.
func (p Payload) Validate() error {
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return fmt.Errorf("%w: exec payload: argv needs at least a program name", jobstore.ErrInvalidInput)
	}
	for i, a := range p.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: exec payload: argv[%d] contains a NUL byte", jobstore.ErrInvalidInput, i)
		}
	}
	if p.Dir == "" || !filepath.IsAbs(p.Dir) {
		return fmt.Errorf("%w: exec payload: dir %q is not an absolute path", jobstore.ErrInvalidInput, p.Dir)
	}
	if strings.IndexByte(p.Dir, 0) >= 0 {
		return fmt.Errorf("%w: exec payload: dir contains a NUL byte", jobstore.ErrInvalidInput)
	}
	for i, e := range p.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return fmt.Errorf("%w: exec payload: env[%d] %q is not KEY=VALUE", jobstore.ErrInvalidInput, i, e)
		}
		if strings.IndexByte(e, 0) >= 0 {
			return fmt.Errorf("%w: exec payload: env[%d] contains a NUL byte", jobstore.ErrInvalidInput, i)
		}
	}
	return nil
}

// ParsePayload decodes and validates the payload of an exec job. Unknown
// fields are refused, so that a misspelt field is not silently ignored.
// Errors wrap jobstore.ErrInvalidInput.
func ParsePayload(raw json.RawMessage) (Payload, error) {
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Payload{}, fmt.Errorf("%w: exec payload: %v", jobstore.ErrInvalidInput, err)
	}
	if dec.More() {
		return Payload{}, fmt.Errorf("%w: exec payload: trailing data after the JSON object", jobstore.ErrInvalidInput)
	}
	if len(p.Env) == 0 {
		p.Env = nil
	}
	return p, p.Validate()
}

// NewSpec returns the spec of an exec job that runs p, after validating p.
// Set the spec's Key, MaxAttempts, Priority, RunAt and Timeout as needed
// before submitting it. Errors wrap jobstore.ErrInvalidInput.
func NewSpec(p Payload) (jobstore.Spec, error) {
	if err := p.Validate(); err != nil {
		return jobstore.Spec{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return jobstore.Spec{}, fmt.Errorf("execjob: encode payload: %w", err)
	}
	return jobstore.Spec{Kind: Kind, Payload: raw}, nil
}
