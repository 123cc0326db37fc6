package jobstore

import (
	"context"
	"fmt"
)

// SubmitFunc submits specs, as Client.SubmitBatch does: one result per
// spec, in order, or an error and no job.
type SubmitFunc func(ctx context.Context, specs []Spec) ([]Submitted, error)

// SubmitMiddleware wraps the submits of a Client (see
// WithSubmitMiddleware): it returns a SubmitFunc that does what it adds
// (a default, a check, a log line, a metric, a trace span) around a call
// of next, or instead of it. It may change the specs it passes on (a
// copy: the caller's slice is its own) or refuse them with an error, and
// it sees the results after.
type SubmitMiddleware func(next SubmitFunc) SubmitFunc

// WithSubmitMiddleware returns a Client that is c, but whose Submit and
// SubmitBatch go through mw, mw[0] outermost. A Submit is a call of the
// chain with one spec, which c.Submit makes at the end; a SubmitBatch is
// one call with every spec, which c.SubmitBatch makes, so that a batch
// stays one durable write (an empty batch, which submits nothing, goes to
// c.SubmitBatch without them). The other methods are c's. The Client returned
// is only a Client: the optional interfaces of c's store (Importer,
// StatePruner and others) are not on it.
func WithSubmitMiddleware(c Client, mw ...SubmitMiddleware) (Client, error) {
	last := SubmitFunc(func(ctx context.Context, specs []Spec) ([]Submitted, error) {
		if len(specs) == 1 {
			j, created, err := c.Submit(ctx, specs[0])
			if err != nil {
				return nil, err
			}
			return []Submitted{{Job: j, Created: created}}, nil
		}
		return c.SubmitBatch(ctx, specs)
	})
	f := last
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			return nil, fmt.Errorf("jobstore: submit middleware %d is nil", i)
		}
		if f = mw[i](f); f == nil {
			return nil, fmt.Errorf("jobstore: submit middleware %d returned no SubmitFunc", i)
		}
	}
	return &submitClient{Client: c, submit: f}, nil
}

// submitClient is the Client of WithSubmitMiddleware.
type submitClient struct {
	Client
	submit SubmitFunc
}

func (s *submitClient) Submit(ctx context.Context, spec Spec) (Job, bool, error) {
	res, err := s.submit(ctx, []Spec{spec})
	if err != nil {
		return Job{}, false, err
	}
	if len(res) != 1 {
		return Job{}, false, fmt.Errorf("jobstore: a submit middleware returned %d results for one spec", len(res))
	}
	return res[0].Job, res[0].Created, nil
}

func (s *submitClient) SubmitBatch(ctx context.Context, specs []Spec) ([]Submitted, error) {
	if len(specs) == 0 {
		return s.Client.SubmitBatch(ctx, specs)
	}
	res, err := s.submit(ctx, append([]Spec(nil), specs...))
	if err != nil {
		return nil, err
	}
	if len(res) != len(specs) {
		return nil, fmt.Errorf("jobstore: a submit middleware returned %d results for %d specs", len(res), len(specs))
	}
	return res, nil
}
