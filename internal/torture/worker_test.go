package torture

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/stretchr/testify/require"
)

func TestHandle(t *testing.T) {
	job := func(attempt int, tk task) jobstore.Job {
		p, err := json.Marshal(tk)
		require.NoError(t, err)
		return jobstore.Job{ID: idA, Attempt: attempt, Payload: p}
	}
	tests := []struct {
		name   string
		job    jobstore.Job
		ctx    func() context.Context
		label  string
		failed bool
		perm   bool
	}{
		{name: "success", job: job(1, task{Class: classQuick, SleepMS: 1}), label: outcomeOK},
		{name: "planned failure", job: job(1, task{Class: classFlaky, FailAttempts: 2}), label: outcomeFailed, failed: true},
		{name: "success after planned failures", job: job(3, task{Class: classFlaky, FailAttempts: 2}), label: outcomeOK},
		{name: "permanent failure", job: job(1, task{Class: classDoomed, FailAttempts: 1000, Permanent: true}), label: outcomeFailed, failed: true, perm: true},
		{name: "bad payload", job: jobstore.Job{Payload: json.RawMessage(`[]`)}, label: outcomeFailed, failed: true, perm: true},
		{
			name: "timeout", job: job(1, task{Class: classTimeout, SleepMS: 60_000}), label: outcomeTimeout, failed: true,
			ctx: func() context.Context {
				ctx, cancel := context.WithTimeoutCause(t.Context(), time.Millisecond, errTimeout)
				t.Cleanup(cancel)
				return ctx
			},
		},
		{
			name: "canceled", job: job(1, task{Class: classSlow, SleepMS: 60_000}), label: outcomeCanceled, failed: true,
			ctx: func() context.Context {
				ctx, cancel := context.WithCancelCause(t.Context())
				cancel(errCanceled)
				return ctx
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			o, label := handle(ctx, tt.job)
			require.Equal(t, tt.label, label)
			require.Equal(t, tt.failed, o.Error != "", "outcome %+v", o)
			require.Equal(t, tt.perm, o.Permanent)
		})
	}
}

func TestNewSpecIsValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	classes := map[string]int{}
	keyed := 0
	for range 2000 {
		spec, class := newSpec(rng, 10, false)
		require.NoError(t, spec.Validate(0))
		classes[class]++
		if spec.Key != "" {
			keyed++
		}
	}
	for _, c := range []string{classQuick, classDelayed, classFlaky, classDoomed, classTimeout, classSlow, classCancelQueued} {
		require.Positive(t, classes[c], "class %s never drawn", c)
	}
	require.InDelta(t, 2000/3, keyed, 150)
}
