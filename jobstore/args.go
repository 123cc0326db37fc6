package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// Args is the payload of a typed job: a Go value, encoded as JSON, whose
// Kind method names the kind of the jobs it is the payload of. Give Kind a
// value receiver, so that it answers on the zero value:
//
//	type Welcome struct {
//		To string `json:"to"`
//	}
//
//	func (Welcome) Kind() string { return "email.welcome" }
//
// SubmitArgs submits a job of it, and runner.Register runs the jobs of its
// kind with their payload decoded into it.
type Args interface {
	// Kind returns the kind of the jobs whose payload is such a value. It
	// must be the same for every value of the type.
	Kind() string
}

// KindOf returns the kind that T names: Kind called on the zero T, or on a
// pointer to a new zero value if T is a pointer type.
func KindOf[T Args]() string {
	var zero T
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		return reflect.New(t.Elem()).Interface().(T).Kind()
	}
	return zero.Kind()
}

// NewSpec returns spec with the kind of args as its Kind and args, encoded
// as JSON, as its Payload. spec gives the job's other fields (Key,
// Priority, RunAt, Timeout, MaxAttempts); its Kind must be empty or that of
// args, and its Payload empty. Otherwise, and when args does not encode,
// the error wraps ErrInvalidInput. The Spec is not validated further: the
// store's Submit does that.
func NewSpec(args Args, spec Spec) (Spec, error) {
	if args == nil {
		return Spec{}, fmt.Errorf("%w: no args", ErrInvalidInput)
	}
	kind := args.Kind()
	if spec.Kind != "" && spec.Kind != kind {
		return Spec{}, fmt.Errorf("%w: the spec says kind %q, but a %T is the payload of kind %q", ErrInvalidInput, spec.Kind, args, kind)
	}
	if len(spec.Payload) > 0 {
		return Spec{}, fmt.Errorf("%w: the spec has a payload already; the payload of a typed job is its args", ErrInvalidInput)
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidInput, args, err)
	}
	spec.Kind, spec.Payload = kind, payload
	return spec, nil
}

// SubmitArgs submits through c a job of the kind of args, with args as its
// payload and the other fields of spec (see NewSpec), and returns what
// c.Submit returns.
func SubmitArgs(ctx context.Context, c Client, args Args, spec Spec) (Job, bool, error) {
	sp, err := NewSpec(args, spec)
	if err != nil {
		return Job{}, false, err
	}
	return c.Submit(ctx, sp)
}

// DecodeArgs decodes the payload of job into a T. An empty payload (a job
// submitted without one) decodes as JSON null: the zero T. The error of a
// payload that does not decode names T and wraps the decoder's.
func DecodeArgs[T Args](job Job) (T, error) {
	var args T
	payload := []byte(job.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	if err := json.Unmarshal(payload, &args); err != nil {
		return args, fmt.Errorf("the payload of job %s does not decode as %s: %w", job.ID, reflect.TypeFor[T](), err)
	}
	return args, nil
}
