package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
)

type resizeArgs struct {
	Path  string `json:"path"`
	Width int    `json:"width"`
}

func (resizeArgs) Kind() string { return "image.resize" }

type sumArgs struct {
	A, B int
}

func (sumArgs) Kind() string { return "math.sum" }

// TestRegister: a typed handler gets its job's payload decoded, and its
// error is the attempt's; a payload that does not decode fails the job at
// once, attempts left or not, with a LastError that names the type.
func TestRegister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, &runner.Options{Concurrency: 2})
		var (
			mu  sync.Mutex
			got []resizeArgs
		)
		runner.Register(r, func(ctx context.Context, job jobstore.Job, args resizeArgs) error {
			mu.Lock()
			got = append(got, args)
			mu.Unlock()
			if args.Width == 0 {
				return errors.New("no width")
			}
			return nil
		})
		runner.RegisterResult(r, func(ctx context.Context, job jobstore.Job, args sumArgs) (int, error) {
			return args.A + args.B, nil
		})
		require.ElementsMatch(t, []string{"image.resize", "math.sum"}, r.Kinds())
		start(t, r)

		ok, _, err := jobstore.SubmitArgs(t.Context(), s, resizeArgs{Path: "a.png", Width: 640}, jobstore.Spec{})
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, wait(t, s, ok.ID).State)

		failing, _, err := jobstore.SubmitArgs(t.Context(), s, resizeArgs{Path: "b.png"}, jobstore.Spec{MaxAttempts: 1})
		require.NoError(t, err)
		j := wait(t, s, failing.ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, "no width", j.LastError)

		bad := submit(t, s, jobstore.Spec{Kind: "image.resize", Payload: json.RawMessage(`{"width":"wide"}`), MaxAttempts: 5})
		j = wait(t, s, bad.ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, 1, j.Attempt, "a payload that does not decode is not retried")
		require.True(t, strings.HasPrefix(j.LastError, fmt.Sprintf("the payload of job %s does not decode as runner_test.resizeArgs: json: cannot unmarshal string", bad.ID)), j.LastError)

		sum, _, err := jobstore.SubmitArgs(t.Context(), s, sumArgs{A: 2, B: 40}, jobstore.Spec{})
		require.NoError(t, err)
		j = wait(t, s, sum.ID)
		require.Equal(t, jobstore.StateSucceeded, j.State)
		require.JSONEq(t, `42`, string(j.Result))

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []resizeArgs{{Path: "a.png", Width: 640}, {Path: "b.png"}}, got, "the undecodable payload never reached the handler")
	})
}

type unencodableResult struct{}

func (unencodableResult) Kind() string { return "bad.result" }

// TestTypedResultThatDoesNotEncode: a result that cannot be encoded fails
// the job at once, saying so.
func TestTypedResultThatDoesNotEncode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, nil)
		r := runner.New(s, nil)
		runner.RegisterResult(r, func(context.Context, jobstore.Job, unencodableResult) (chan int, error) {
			return make(chan int), nil
		})
		start(t, r)
		j, _, err := jobstore.SubmitArgs(t.Context(), s, unencodableResult{}, jobstore.Spec{MaxAttempts: 3})
		require.NoError(t, err)
		j = wait(t, s, j.ID)
		require.Equal(t, jobstore.StateFailed, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Contains(t, j.LastError, "cannot encode the result, a chan int, as JSON")
	})
}

type noKind struct{}

func (noKind) Kind() string { return "" }

// TestRegisterPanicsAsHandle: a type that names no valid kind, or a kind
// already handled, is refused as Handle refuses it.
func TestRegisterPanicsAsHandle(t *testing.T) {
	r := runner.New(newStore(t, nil), nil)
	require.PanicsWithValue(t, "runner: Handle: "+jobstore.ValidateKind("").Error(), func() {
		runner.Register(r, func(context.Context, jobstore.Job, noKind) error { return nil })
	})
	runner.Register(r, func(context.Context, jobstore.Job, sumArgs) error { return nil })
	require.PanicsWithValue(t, `runner: Handle("math.sum"): kind already has a handler`, func() {
		runner.RegisterResult(r, func(context.Context, jobstore.Job, sumArgs) (int, error) { return 0, nil })
	})
}
