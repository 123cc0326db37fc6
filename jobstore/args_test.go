package jobstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

type welcome struct {
	To string `json:"to"`
}

func (welcome) Kind() string { return "email.welcome" }

// resize has a pointer receiver: KindOf calls it on a new zero value.
type resize struct {
	Width int `json:"width"`
}

func (*resize) Kind() string { return "image.resize" }

type unencodable struct {
	C chan int
}

func (unencodable) Kind() string { return "never" }

func TestKindOf(t *testing.T) {
	require.Equal(t, "email.welcome", jobstore.KindOf[welcome]())
	require.Equal(t, "image.resize", jobstore.KindOf[*resize]())
}

// TestNewSpec: the kind and payload come from the args, every other field
// from the spec; a spec that names another kind or has a payload of its
// own, and args that do not encode, are refused with ErrInvalidInput.
func TestNewSpec(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	sp, err := jobstore.NewSpec(welcome{To: "ada@example.com"}, jobstore.Spec{Key: "welcome-1", Priority: 5, RunAt: at})
	require.NoError(t, err)
	require.Equal(t, jobstore.Spec{Kind: "email.welcome", Key: "welcome-1", Priority: 5, RunAt: at,
		Payload: json.RawMessage(`{"to":"ada@example.com"}`)}, sp)
	_, err = jobstore.NewSpec(welcome{}, jobstore.Spec{Kind: "email.welcome"})
	require.NoError(t, err, "the same kind may be named")

	for name, c := range map[string]struct {
		args jobstore.Args
		spec jobstore.Spec
		msg  string
	}{
		"other kind": {welcome{}, jobstore.Spec{Kind: "sms"}, `the spec says kind "sms", but a jobstore_test.welcome is the payload of kind "email.welcome"`},
		"payload":    {welcome{}, jobstore.Spec{Payload: json.RawMessage(`{}`)}, "the spec has a payload already"},
		"encode":     {unencodable{C: make(chan int)}, jobstore.Spec{}, "cannot encode jobstore_test.unencodable as JSON"},
		"nil":        {nil, jobstore.Spec{}, "no args"},
	} {
		_, err := jobstore.NewSpec(c.args, c.spec)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
		require.ErrorContains(t, err, c.msg, name)
	}
}

// TestSubmitArgs: a typed submit is a Submit of NewSpec's spec, keys
// included, and its payload decodes back into the args.
func TestSubmitArgs(t *testing.T) {
	s := memstore.New(nil)
	defer s.Close()
	j, created, err := jobstore.SubmitArgs(t.Context(), s, welcome{To: "ada@example.com"}, jobstore.Spec{Key: "w1"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "email.welcome", j.Kind)
	again, created, err := jobstore.SubmitArgs(t.Context(), s, welcome{To: "bob@example.com"}, jobstore.Spec{Key: "w1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, j.ID, again.ID)
	got, err := jobstore.DecodeArgs[welcome](again)
	require.NoError(t, err)
	require.Equal(t, welcome{To: "ada@example.com"}, got)

	_, _, err = jobstore.SubmitArgs(t.Context(), s, welcome{}, jobstore.Spec{Kind: "other"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
	_, _, err = jobstore.SubmitArgs(t.Context(), s, welcome{}, jobstore.Spec{Key: "\x00"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput, "the store validates the rest")
}

// TestDecodeArgs: an empty payload is the zero value; one that does not
// decode is an error that names the job and the type.
func TestDecodeArgs(t *testing.T) {
	got, err := jobstore.DecodeArgs[welcome](jobstore.Job{ID: "j1"})
	require.NoError(t, err)
	require.Equal(t, welcome{}, got)
	p, err := jobstore.DecodeArgs[*resize](jobstore.Job{Payload: json.RawMessage(`{"width":640}`)})
	require.NoError(t, err)
	require.Equal(t, &resize{Width: 640}, p)
	_, err = jobstore.DecodeArgs[welcome](jobstore.Job{ID: "j1", Payload: json.RawMessage(`{"to":42}`)})
	require.ErrorContains(t, err, "the payload of job j1 does not decode as jobstore_test.welcome: json: cannot unmarshal number")
}
