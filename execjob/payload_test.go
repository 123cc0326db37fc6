package execjob_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
)

func TestPayloadValidate(t *testing.T) {
	tests := []struct {
		name string
		p    execjob.Payload
		ok   bool
	}{
		{"minimal", execjob.Payload{Argv: []string{"true"}, Dir: "/"}, true},
		{"env", execjob.Payload{Argv: []string{"env"}, Dir: "/tmp", Env: []string{"A=1", "B="}}, true},
		{"no argv", execjob.Payload{Dir: "/"}, false},
		{"empty program", execjob.Payload{Argv: []string{""}, Dir: "/"}, false},
		{"nul in arg", execjob.Payload{Argv: []string{"echo", "a\x00b"}, Dir: "/"}, false},
		{"no dir", execjob.Payload{Argv: []string{"true"}}, false},
		{"relative dir", execjob.Payload{Argv: []string{"true"}, Dir: "src"}, false},
		{"env without =", execjob.Payload{Argv: []string{"true"}, Dir: "/", Env: []string{"A"}}, false},
		{"env without key", execjob.Payload{Argv: []string{"true"}, Dir: "/", Env: []string{"=1"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
		})
	}
}

func TestNewSpecRoundTrip(t *testing.T) {
	p := execjob.Payload{Argv: []string{"echo", "hi there"}, Dir: "/tmp", Env: []string{"X=1"}}
	spec, err := execjob.NewSpec(p)
	require.NoError(t, err)
	require.Equal(t, execjob.Kind, spec.Kind)
	require.NoError(t, spec.Validate(0))
	require.JSONEq(t, `{"argv":["echo","hi there"],"dir":"/tmp","env":["X=1"]}`, string(spec.Payload))

	got, err := execjob.ParsePayload(spec.Payload)
	require.NoError(t, err)
	require.Equal(t, p, got)

	_, err = execjob.NewSpec(execjob.Payload{Argv: []string{"x"}})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

func TestParsePayloadRejects(t *testing.T) {
	for name, raw := range map[string]string{
		"not json":      `argv`,
		"unknown field": `{"argv":["true"],"dir":"/","shell":true}`,
		"wrong type":    `{"argv":"true","dir":"/"}`,
		"trailing":      `{"argv":["true"],"dir":"/"} {}`,
		"empty":         ``,
		"invalid":       `{"argv":[],"dir":"/"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := execjob.ParsePayload(json.RawMessage(raw))
			require.Error(t, err)
			require.True(t, errors.Is(err, jobstore.ErrInvalidInput), "%v", err)
		})
	}
}

// FuzzParsePayload checks that any payload either is refused with
// ErrInvalidInput or parses into a valid Payload that survives a round trip.
func FuzzParsePayload(f *testing.F) {
	f.Add([]byte(`{"argv":["echo","hi"],"dir":"/tmp","env":["A=1"]}`))
	f.Add([]byte(`{"argv":[""],"dir":"/"}`))
	f.Add([]byte(`{"argv":["x"],"dir":"rel"}`))
	f.Add([]byte(`{"argv":["x"],"dir":"/","env":["=v"]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := execjob.ParsePayload(raw)
		if err != nil {
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			return
		}
		require.NoError(t, p.Validate())
		spec, err := execjob.NewSpec(p)
		require.NoError(t, err)
		back, err := execjob.ParsePayload(spec.Payload)
		require.NoError(t, err)
		require.Equal(t, p, back)
	})
}
