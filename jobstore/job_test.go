package jobstore_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

func TestValidateID(t *testing.T) {
	valid := []string{
		"01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"00000000000000000000000000",
		"7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
		jobstore.NewID(time.Now()),
	}
	for _, id := range valid {
		require.NoError(t, jobstore.ValidateID(id), id)
	}
	invalid := map[string]string{
		"empty":         "",
		"dotdot":        "../x",
		"absolute":      "/etc/passwd",
		"nul":           "a\x00b",
		"short":         "01ARZ3NDEKTSV4RRFFQ69G5FA",
		"long":          "01ARZ3NDEKTSV4RRFFQ69G5FAVV",
		"10000 bytes":   strings.Repeat("0", 10_000),
		"lowercase":     "01arz3ndektsv4rrffq69g5fav",
		"letter I":      "01ARZ3NDEKTSV4RRFFQ69G5FAI",
		"letter L":      "01ARZ3NDEKTSV4RRFFQ69G5FAL",
		"letter O":      "01ARZ3NDEKTSV4RRFFQ69G5FAO",
		"letter U":      "01ARZ3NDEKTSV4RRFFQ69G5FAU",
		"slash":         "01ARZ3NDEKTSV4RRFFQ69G5F/V",
		"dot":           "01ARZ3NDEKTSV4RRFFQ69G5F.V",
		"nul at end":    "01ARZ3NDEKTSV4RRFFQ69G5FA\x00",
		"overflow":      "80000000000000000000000000",
		"multibyte":     "01ARZ3NDEKTSV4RRFFQ69G5FÅ",
		"dotdot padded": "../../../../../../../../x0",
	}
	for name, id := range invalid {
		err := jobstore.ValidateID(id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, name)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
	}
	// The message quotes at most a prefix of a huge ID.
	require.Less(t, len(jobstore.ValidateID(strings.Repeat("x", 10_000)).Error()), 200)
}

func TestNewID(t *testing.T) {
	now := time.Now()
	prev := ""
	for range 1000 {
		id := jobstore.NewID(now)
		require.NoError(t, jobstore.ValidateID(id))
		require.Greater(t, id, prev, "IDs from one process increase strictly")
		prev = id
	}
	require.Less(t, jobstore.NewID(now.Add(-time.Hour)), jobstore.NewID(now), "IDs sort by time")
}

func TestValidateKind(t *testing.T) {
	for _, k := range []string{"a", "email.send", "report:monthly/v2", "A_B-c", strings.Repeat("k", jobstore.MaxKindLen)} {
		require.NoError(t, jobstore.ValidateKind(k), k)
	}
	for name, k := range map[string]string{
		"empty":    "",
		"space":    "send email",
		"too long": strings.Repeat("k", jobstore.MaxKindLen+1),
		"nul":      "a\x00",
		"unicode":  "émail",
		"star":     "a*",
		"newline":  "a\n",
	} {
		require.ErrorIs(t, jobstore.ValidateKind(k), jobstore.ErrInvalidInput, name)
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"", "a", "order 42 ✓", strings.Repeat("k", jobstore.MaxKeyLen), "tab-free/../path"} {
		require.NoError(t, jobstore.ValidateKey(k), k)
	}
	for name, k := range map[string]string{
		"10000 bytes":  strings.Repeat("k", 10_000),
		"one too long": strings.Repeat("k", jobstore.MaxKeyLen+1),
		"newline":      "a\nb",
		"tab":          "a\tb",
		"nul":          "a\x00b",
		"del":          "a\x7fb",
		"C1 control":   "a\u0085b",
		"not UTF-8":    "\xff",
	} {
		require.ErrorIs(t, jobstore.ValidateKey(k), jobstore.ErrInvalidInput, name)
	}
}

// jsonString returns a JSON string value of exactly n bytes.
func jsonString(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("a", n-2) + `"`)
}

func TestValidatePayload(t *testing.T) {
	tests := []struct {
		name    string
		payload json.RawMessage
		limit   int
		want    error
	}{
		{"empty", nil, 0, nil},
		{"object", json.RawMessage(`{"a":[1,2]}`), 0, nil},
		{"scalar", json.RawMessage(`42`), 0, nil},
		{"exactly the default limit", jsonString(jobstore.DefaultMaxPayload), 0, nil},
		{"default limit + 1", jsonString(jobstore.DefaultMaxPayload + 1), 0, jobstore.ErrPayloadTooLarge},
		{"exactly a custom limit", jsonString(10), 10, nil},
		{"custom limit + 1", jsonString(11), 10, jobstore.ErrPayloadTooLarge},
		{"negative limit means default", jsonString(jobstore.DefaultMaxPayload), -1, nil},
		{"truncated", json.RawMessage(`{"a":`), 0, jobstore.ErrInvalidInput},
		{"two values", json.RawMessage(`1 2`), 0, jobstore.ErrInvalidInput},
		{"bare word", json.RawMessage(`hello`), 0, jobstore.ErrInvalidInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := jobstore.ValidatePayload(tc.payload, tc.limit)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
		})
	}
}

func TestValidateWorker(t *testing.T) {
	for _, w := range []string{"w", "host-1:1234", strings.Repeat("w", 256)} {
		require.NoError(t, jobstore.ValidateWorker(w), w)
	}
	for name, w := range map[string]string{
		"empty":    "",
		"too long": strings.Repeat("w", 257),
		"space":    "a b",
		"newline":  "a\n",
		"unicode":  "wörker",
	} {
		require.ErrorIs(t, jobstore.ValidateWorker(w), jobstore.ErrInvalidInput, name)
	}
}

func TestValidateLease(t *testing.T) {
	id := jobstore.NewID(time.Now())
	require.NoError(t, jobstore.Lease{ID: id, Worker: "w", Attempt: 1}.Validate())
	for name, l := range map[string]jobstore.Lease{
		"zero":             {},
		"no worker":        {ID: id, Attempt: 1},
		"attempt 0":        {ID: id, Worker: "w"},
		"negative attempt": {ID: id, Worker: "w", Attempt: -1},
		"bad worker":       {ID: id, Worker: "a b", Attempt: 1},
		"bad ID":           {ID: "x", Worker: "w", Attempt: 1},
	} {
		require.ErrorIs(t, l.Validate(), jobstore.ErrInvalidInput, name)
	}
}

func TestValidateClaimRequest(t *testing.T) {
	for name, req := range map[string]jobstore.ClaimRequest{
		"any kind": {Worker: "w"},
		"kinds":    {Worker: "w", Kinds: []string{"a", "b.c"}},
	} {
		require.NoError(t, req.Validate(), name)
	}
	for name, req := range map[string]jobstore.ClaimRequest{
		"zero":          {},
		"no worker":     {Kinds: []string{"a"}},
		"bad worker":    {Worker: "a b"},
		"empty kind":    {Worker: "w", Kinds: []string{"a", ""}},
		"kind with NUL": {Worker: "w", Kinds: []string{"a\x00b"}},
	} {
		require.ErrorIs(t, req.Validate(), jobstore.ErrInvalidInput, name)
	}
}

func TestValidateSpec(t *testing.T) {
	tests := []struct {
		name string
		spec jobstore.Spec
		want error
	}{
		{"minimal", jobstore.Spec{Kind: "k"}, nil},
		{"full", jobstore.Spec{Kind: "k", Key: "x", Payload: json.RawMessage(`{}`), MaxAttempts: 1000, Priority: -1000, Timeout: time.Second}, nil},
		{"no kind", jobstore.Spec{}, jobstore.ErrInvalidInput},
		{"bad key", jobstore.Spec{Kind: "k", Key: "a\x00"}, jobstore.ErrInvalidInput},
		{"bad payload", jobstore.Spec{Kind: "k", Payload: json.RawMessage(`{`)}, jobstore.ErrInvalidInput},
		{"big payload", jobstore.Spec{Kind: "k", Payload: jsonString(jobstore.DefaultMaxPayload + 1)}, jobstore.ErrPayloadTooLarge},
		{"negative attempts", jobstore.Spec{Kind: "k", MaxAttempts: -1}, jobstore.ErrInvalidInput},
		{"too many attempts", jobstore.Spec{Kind: "k", MaxAttempts: 1001}, jobstore.ErrInvalidInput},
		{"priority high", jobstore.Spec{Kind: "k", Priority: 1001}, jobstore.ErrInvalidInput},
		{"priority low", jobstore.Spec{Kind: "k", Priority: -1001}, jobstore.ErrInvalidInput},
		{"negative timeout", jobstore.Spec{Kind: "k", Timeout: -1}, jobstore.ErrInvalidInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate(0)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
		})
	}
	require.ErrorIs(t, jobstore.Spec{Kind: "k", Payload: jsonString(11)}.Validate(10), jobstore.ErrPayloadTooLarge)
}

func TestNewJob(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.FixedZone("X", 3600))
	payload := json.RawMessage(`{"a":1}`)
	j := jobstore.NewJob(jobstore.Spec{Kind: "k", Key: "key", Payload: payload, Priority: 3, Timeout: time.Minute}, now)
	require.NoError(t, jobstore.ValidateID(j.ID))
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, jobstore.DefaultMaxAttempts, j.MaxAttempts)
	require.Equal(t, time.UTC, j.CreatedAt.Location())
	require.True(t, j.CreatedAt.Equal(now))
	require.True(t, j.RunAt.Equal(now), "zero RunAt means now")
	require.Equal(t, "key", j.Key)
	require.Equal(t, 3, j.Priority)
	require.Equal(t, time.Minute, j.Timeout)
	payload[2] = 'b'
	require.JSONEq(t, `{"a":1}`, string(j.Payload), "NewJob copies the payload")

	past := jobstore.NewJob(jobstore.Spec{Kind: "k", RunAt: now.Add(-time.Hour)}, now)
	require.True(t, past.RunAt.Equal(now), "a RunAt in the past means now")
	future := jobstore.NewJob(jobstore.Spec{Kind: "k", RunAt: now.Add(time.Hour), MaxAttempts: 9}, now)
	require.True(t, future.RunAt.Equal(now.Add(time.Hour)))
	require.Equal(t, 9, future.MaxAttempts)
	require.Nil(t, jobstore.NewJob(jobstore.Spec{Kind: "k"}, now).Payload)
}

func TestJobJSONFieldNames(t *testing.T) {
	// The JSON names are the on-disk format (and the CLI's --json);
	// changing one breaks existing stores and scripts.
	j := jobstore.Job{
		ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Key: "k", Kind: "kind", Queue: "q", Payload: json.RawMessage(`1`),
		State: jobstore.StateRunning, Attempt: 1, MaxAttempts: 3, Priority: 2,
		RunAt: time.Unix(1, 0).UTC(), Timeout: time.Second, CreatedAt: time.Unix(2, 0).UTC(),
		UpdatedAt: time.Unix(3, 0).UTC(), StartedAt: time.Unix(4, 0).UTC(), FinishedAt: time.Unix(5, 0).UTC(),
		Result: json.RawMessage(`2`), LastError: "e", CancelRequested: true, Worker: "w",
		History: []jobstore.AttemptRecord{{Attempt: 1, Worker: "v", StartedAt: time.Unix(6, 0).UTC(),
			FinishedAt: time.Unix(7, 0).UTC(), End: jobstore.EndInterrupted, Error: "stop"}},
	}
	b, err := json.Marshal(j)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{
		"id", "key", "kind", "queue", "payload", "state", "attempt", "max_attempts", "priority", "run_at",
		"timeout_ns", "created_at", "updated_at", "started_at", "finished_at", "result", "last_error",
		"cancel_requested", "worker", "history",
	}, keys)
	require.Contains(t, string(b), `"history":[{"attempt":1,"worker":"v","started_at":"1970-01-01T00:00:06Z","finished_at":"1970-01-01T00:00:07Z","end":"interrupted","error":"stop"}]`)
	var back jobstore.Job
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, j, back)

	// Unset optional fields are omitted.
	b, err = json.Marshal(jobstore.Job{ID: j.ID, Kind: "k", State: jobstore.StateQueued})
	require.NoError(t, err)
	for _, k := range []string{"key", "payload", "started_at", "finished_at", "result", "last_error", "cancel_requested", "worker", "timeout_ns", "history"} {
		require.NotContains(t, string(b), `"`+k+`"`)
	}
}

func TestTruncateError(t *testing.T) {
	require.Equal(t, "short", jobstore.TruncateError("short"))
	long := strings.Repeat("é", jobstore.MaxErrorLen) // 2 bytes each
	got := jobstore.TruncateError(long)
	require.LessOrEqual(t, len(got), jobstore.MaxErrorLen+len("…"))
	require.True(t, strings.HasSuffix(got, "…"))
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(got, "…")))
	require.True(t, json.Valid([]byte(`"`+got+`"`)), "truncation keeps valid UTF-8")
}

func TestErrors(t *testing.T) {
	require.ErrorIs(t, jobstore.ErrInvalidID, jobstore.ErrInvalidInput)
	require.ErrorIs(t, jobstore.ErrPayloadTooLarge, jobstore.ErrInvalidInput)
	for _, err := range []error{jobstore.ErrNotFound, jobstore.ErrInvalidTransition, jobstore.ErrNoJob, jobstore.ErrNotHeld, jobstore.ErrClosed, jobstore.ErrCorrupt} {
		require.False(t, errors.Is(err, jobstore.ErrInvalidInput), err)
	}

	var nj error = &jobstore.NoJobError{}
	require.ErrorIs(t, nj, jobstore.ErrNoJob)
	require.Equal(t, "no job available", nj.Error())
	at := time.Date(2026, 11, 29, 18, 0, 0, 5, time.UTC)
	require.Equal(t, "no job available (next due at 2026-11-29T18:00:00.000000005Z)", (&jobstore.NoJobError{NextRunAt: at}).Error())
}

func TestOutcomeHelpers(t *testing.T) {
	require.Equal(t, jobstore.Outcome{Result: json.RawMessage(`1`)}, jobstore.Succeeded(json.RawMessage(`1`)))
	require.Equal(t, jobstore.Outcome{Error: "boom"}, jobstore.Failed(errors.New("boom")))
	require.Equal(t, jobstore.Outcome{Error: "failed"}, jobstore.Failed(nil), "a failure always has a message")
	require.Equal(t, jobstore.Outcome{Error: "failed"}, jobstore.Failed(errors.New("")))
	require.Equal(t, jobstore.Outcome{Error: "stop", Interrupted: true}, jobstore.Interrupted(errors.New("stop")))
}

func TestClaimRequestAccepts(t *testing.T) {
	require.True(t, jobstore.ClaimRequest{}.Accepts("q", "anything"))
	req := jobstore.ClaimRequest{Kinds: []string{"a", "b"}}
	require.True(t, req.Accepts("q", "a"))
	require.True(t, req.Accepts("", "b"))
	require.False(t, req.Accepts("q", "c"))
	require.False(t, req.Accepts("q", ""))
	req = jobstore.ClaimRequest{Kinds: []string{"a"}, Queues: []string{"q", jobstore.DefaultQueue}}
	require.True(t, req.Accepts("q", "a"))
	require.True(t, req.Accepts("", "a"), "an empty queue is the default queue")
	require.False(t, req.Accepts("r", "a"))
	require.False(t, req.Accepts("q", "b"))
	require.True(t, req.AcceptsQueue("q"))
	require.False(t, req.AcceptsQueue("r"))
}

func TestValidateQueue(t *testing.T) {
	for _, q := range []string{"default", "a", "emails.eu-1", "team/a:b_c"} {
		require.NoError(t, jobstore.ValidateQueue(q), q)
	}
	for _, q := range []string{"", "a b", "é", "a;b", strings.Repeat("q", jobstore.MaxQueueLen+1)} {
		require.ErrorIs(t, jobstore.ValidateQueue(q), jobstore.ErrInvalidInput, q)
	}
	require.Equal(t, jobstore.DefaultQueue, jobstore.QueueOf(""))
	require.Equal(t, "q", jobstore.QueueOf("q"))
	require.Equal(t, jobstore.DefaultQueue, jobstore.NewJob(jobstore.Spec{Kind: "k"}, time.Now()).Queue)
	require.Equal(t, "q", jobstore.NewJob(jobstore.Spec{Kind: "k", Queue: "q"}, time.Now()).Queue)
	require.ErrorIs(t, jobstore.Spec{Kind: "k", Queue: "a b"}.Validate(0), jobstore.ErrInvalidInput)
}

// FuzzValidateID checks that whatever ValidateID accepts is safe as a file
// name and sorts like the time it encodes.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "../x", "/etc/passwd", "a\x00b", "", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if jobstore.ValidateID(id) != nil {
			return
		}
		require.Len(t, id, 26)
		require.NotContains(t, id, "/")
		require.NotContains(t, id, ".")
		require.NotContains(t, id, "\x00")
		require.NotContains(t, id, "\\")
		require.Equal(t, strings.ToUpper(id), id)
	})
}

// FuzzValidateKey checks that an accepted key is printable UTF-8 within the
// length limit.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "order-42", "a\nb", "\xff", "é✓"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if jobstore.ValidateKey(key) != nil {
			return
		}
		require.LessOrEqual(t, len(key), jobstore.MaxKeyLen)
		require.True(t, utf8.ValidString(key))
		for _, r := range key {
			require.False(t, unicode.IsControl(r), "control character %U accepted", r)
		}
	})
}

func TestJobSizeCountsTheVariableFields(t *testing.T) {
	base := jobstore.Job{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Kind: "k"}.Size()
	j := jobstore.Job{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Kind: "k", Payload: json.RawMessage(`"abc"`),
		Result: json.RawMessage(`[1]`), LastError: "boom", Key: "key", Worker: "w1"}
	require.Equal(t, base+5+3+4+3+2, j.Size())
	// The bound holds for the JSON form, whatever the fields hold.
	data, err := json.Marshal(j)
	require.NoError(t, err)
	require.LessOrEqual(t, len(data), j.Size())
}

// TestJobClone: a clone shares no memory with its job. Every field of Job
// that refers to memory (a slice, a map, a pointer) is checked, so a field
// added later that Clone does not copy fails here.
func TestJobClone(t *testing.T) {
	j := jobstore.Job{
		ID:      "01ARZ3NDEKTSV4RRFFQ69G5FAV",
		Payload: json.RawMessage(`{"n":1}`),
		Result:  json.RawMessage(`[1]`),
		Tags:    []string{"a"},
		Meta:    map[string]string{"k": "v"},
		After:   []string{"01ARZ3NDEKTSV4RRFFQ69G5FAW"},
		History: []jobstore.AttemptRecord{{Attempt: 1, Worker: "w"}},
	}
	c := j.Clone()
	require.Equal(t, j, c)
	jv, cv := reflect.ValueOf(j), reflect.ValueOf(c)
	for i := range jv.NumField() {
		f := jv.Type().Field(i)
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer:
			require.False(t, jv.Field(i).IsNil(), "set %s in this test", f.Name)
			require.NotEqual(t, jv.Field(i).Pointer(), cv.Field(i).Pointer(), "%s is shared", f.Name)
		case reflect.Interface, reflect.Chan, reflect.Func:
			t.Fatalf("%s: Clone does not know how to copy a %s", f.Name, f.Type.Kind())
		}
	}
	c.Payload[len(c.Payload)-2] = '9'
	c.History[0].Worker = "x"
	c.Meta["k"] = "x"
	require.JSONEq(t, `{"n":1}`, string(j.Payload))
	require.Equal(t, "w", j.History[0].Worker)
	require.Equal(t, "v", j.Meta["k"])
	require.Equal(t, jobstore.Job{}, jobstore.Job{}.Clone())
}
