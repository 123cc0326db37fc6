package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// FuzzDecodeSubmit checks that decoding never panics, that every refusal
// wraps jobstore.ErrInvalidInput, and that an accepted request describes
// the same spec after a round trip through its JSON form as a
// SubmitRequest (FromSpec). The seed corpus
// is in testdata/fuzz/FuzzDecodeSubmit; go test runs it as ordinary tests.
func FuzzDecodeSubmit(f *testing.F) {
	f.Add([]byte(`{"kind":"email.send","key":"k1","payload":{"a":[1,2]},"max_attempts":3,"priority":-5,"run_at":"2026-01-02T15:04:05.123Z","timeout":"1m30s"}`))
	f.Add([]byte(`{"kind":"x","payload":null}`))
	f.Add([]byte(`{"kind":"x","timeout_ns":90000000000}`))
	f.Add([]byte(`{"kind":"x","timeout":"1m30s","timeout_ns":90000000000}`))
	f.Add([]byte(`{"kind":"x","timeout":"1m30s","timeout_ns":1}`))
	f.Add([]byte(`{"kind":"x","run_at":"2026-01-02T15:04:05+02:00"}`))
	f.Add([]byte(`{"kind":"x"}{"kind":"y"}`))
	f.Add([]byte(`{"kind":1}`))
	f.Add([]byte(``))
	f.Add([]byte("{\"kind\":\"x\",\"key\":\"a\xffb\"}"))
	f.Add([]byte(`{"kind":"x","key":"a\ud800b"}`))
	f.Add([]byte(`{"kind":"x","key":"a\ud83d\ude00b\ufffd"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		spec, err := decodeSubmit(bytes.NewReader(body))
		if err != nil {
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			return
		}
		// Nothing was silently replaced: a U+FFFD in the key was in the
		// body, as such or escaped.
		if strings.ContainsRune(spec.Key, utf8.RuneError) {
			require.True(t, bytes.Contains(body, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)),
				"key %q holds U+FFFD that the body %q does not", spec.Key, body)
		}
		require.True(t, utf8.ValidString(spec.Key), "key %q", spec.Key)
		if !spec.RunAt.IsZero() {
			require.Equal(t, time.UTC, spec.RunAt.Location())
		}
		// The exported request type encodes what the server reads.
		req := FromSpec(spec)
		again, err := json.Marshal(req)
		require.NoError(t, err)
		spec2, err := decodeSubmit(bytes.NewReader(again))
		require.NoError(t, err, "re-encoded request %s", again)
		require.Equal(t, spec.Kind, spec2.Kind)
		require.Equal(t, spec.Key, spec2.Key)
		require.Equal(t, spec.MaxAttempts, spec2.MaxAttempts)
		require.Equal(t, spec.Priority, spec2.Priority)
		require.True(t, spec.RunAt.Equal(spec2.RunAt))
		require.Equal(t, spec.Timeout, spec2.Timeout)
		if len(spec.Payload) == 0 {
			require.Empty(t, spec2.Payload)
		} else {
			var c1, c2 bytes.Buffer
			require.NoError(t, json.Compact(&c1, spec.Payload))
			require.NoError(t, json.Compact(&c2, spec2.Payload))
			require.Equal(t, c1.String(), c2.String())
		}
	})
}

// TestSubmitRequestIsWhatTheServerReads: the exported SubmitRequest and
// the server's stricter reading of it, submitRequest, have the same JSON
// fields, the deprecated timeout_ns apart, which only the server reads.
func TestSubmitRequestIsWhatTheServerReads(t *testing.T) {
	tags := func(typ reflect.Type) []string {
		var names []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			names = append(names, name)
		}
		slices.Sort(names)
		return names
	}
	want := append(tags(reflect.TypeFor[SubmitRequest]()), "timeout_ns")
	slices.Sort(want)
	require.Equal(t, want, tags(reflect.TypeFor[submitRequest]()))
}

func TestDecodeSubmitKeepsMaxBytesError(t *testing.T) {
	body := http.MaxBytesReader(httptest.NewRecorder(), bodyOf(`{"kind":"k","payload":"`+strings.Repeat("x", 100)+`"}`), 32)
	_, err := decodeSubmit(body)
	var maxErr *http.MaxBytesError
	require.ErrorAs(t, err, &maxErr)
	require.Equal(t, http.StatusRequestEntityTooLarge, toError(err, 400, CodeInvalidInput).Status)
}

func bodyOf(s string) *readCloser { return &readCloser{strings.NewReader(s)} }

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

func TestParseWaitTimeout(t *testing.T) {
	for q, want := range map[string]time.Duration{
		"":             DefaultWait,
		"timeout=5s":   5 * time.Second,
		"timeout=0":    0,
		"timeout=10m":  DefaultMaxWait,
		"timeout=59s":  59 * time.Second,
		"timeout=1.5s": 1500 * time.Millisecond,
	} {
		v, err := url.ParseQuery(q)
		require.NoError(t, err)
		got, err := parseWaitTimeout(v, DefaultWait, DefaultMaxWait)
		require.NoError(t, err, q)
		require.Equal(t, want, got, q)
	}
}

func TestToErrorMapsByType(t *testing.T) {
	te := &jobstore.TransitionError{ID: "X", From: jobstore.StateRunning, To: jobstore.StateQueued}
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{jobstore.ErrNotFound, http.StatusNotFound, CodeNotFound},
		{te, http.StatusConflict, CodeInvalidTransition},
		{jobstore.ErrPayloadTooLarge, http.StatusRequestEntityTooLarge, CodePayloadTooLarge},
		{jobstore.ErrInvalidID, http.StatusBadRequest, CodeInvalidInput},
		{jobstore.ErrInvalidInput, http.StatusUnprocessableEntity, CodeInvalidSpec},
		{jobstore.ErrClosed, http.StatusServiceUnavailable, CodeClosed},
		{jobstore.ErrCorrupt, http.StatusInternalServerError, CodeCorrupt},
		{errors.New("disk on fire"), http.StatusInternalServerError, CodeInternal},
	} {
		e := toError(wrap(tc.err), http.StatusUnprocessableEntity, CodeInvalidSpec)
		require.Equal(t, tc.status, e.Status, "%v", tc.err)
		require.Equal(t, tc.code, e.Code, "%v", tc.err)
	}
	e := toError(wrap(te), 400, CodeInvalidInput)
	require.Equal(t, "X", e.ID)
	require.Equal(t, jobstore.StateRunning, e.From)
	require.Equal(t, jobstore.StateQueued, e.To)
}

func wrap(err error) error { return errors.Join(errors.New("context"), err) }

// FuzzDecodeBatch checks that decoding a batch never panics, that every
// refusal wraps jobstore.ErrInvalidInput (or is the 422 of too many specs),
// that an error about one element names its index, and that each accepted
// element decodes to the spec decodeSubmit makes of it alone.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"jobs":[]}`))
	f.Add([]byte(`{"jobs":[{"kind":"a","key":"k","payload":{"x":[1]},"priority":-5,"run_at":"2026-01-02T15:04:05+02:00","timeout":"1m"},{"kind":"b","payload":null}]}`))
	f.Add([]byte(`{"jobs":[{"kind":"a"},{"kind":"a","kinds":"x"}]}`))
	f.Add([]byte(`{"jobs":[{"kind":"a"},{"kind":"a","timeout":"30"}]}`))
	f.Add([]byte(`{"jobs":[null,1,"x",[]]}`))
	f.Add([]byte(`{"jobs":null}`))
	f.Add([]byte(`{"jobs":[]}{"jobs":[]}`))
	f.Add([]byte(`{"job":[]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		specs, err := decodeBatch(bytes.NewReader(body))
		if err != nil {
			var apiErr *Error
			if errors.As(err, &apiErr) {
				require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status)
				return
			}
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			return
		}
		var req struct{ Jobs []json.RawMessage }
		require.NoError(t, json.Unmarshal(body, &req))
		require.Len(t, specs, len(req.Jobs))
		for i, raw := range req.Jobs {
			want, err := decodeSubmit(bytes.NewReader(raw))
			require.NoError(t, err, "jobs[%d] %s", i, raw)
			require.Equal(t, want, specs[i], "jobs[%d] %s", i, raw)
		}
	})
}

func TestDecodeBatchNamesTheIndex(t *testing.T) {
	for body, index := range map[string]string{
		`{"jobs":[{"kind":"a"},{"kind":"a","kinds":"x"}]}`:             "jobs[1]: ",
		`{"jobs":[{"kind":"a"},{"kind":"a"},{"kind":1}]}`:              "jobs[2]: ",
		`{"jobs":[{"kind":"a","run_at":"soon"}]}`:                      "jobs[0]: ",
		`{"jobs":[{"kind":"a"},{"kind":"a"},{"kind":"a"},"a string"]}`: "jobs[3]: ",
	} {
		_, err := decodeBatch(strings.NewReader(body))
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, body)
		require.True(t, strings.HasPrefix(err.Error(), index), "%s: %v", body, err)
	}
}

func TestDecodeBatchKeepsMaxBytesError(t *testing.T) {
	body := http.MaxBytesReader(httptest.NewRecorder(), bodyOf(`{"jobs":[{"kind":"k","payload":"`+strings.Repeat("x", 100)+`"}]}`), 32)
	_, err := decodeBatch(body)
	var maxErr *http.MaxBytesError
	require.ErrorAs(t, err, &maxErr)
	require.Equal(t, http.StatusRequestEntityTooLarge, toError(err, 400, CodeInvalidInput).Status)
}

func TestDefaultBatchBody(t *testing.T) {
	for _, tc := range []struct{ single, want int64 }{
		{4096, 4096 * jobstore.MaxBatch},
		{jobstore.DefaultMaxPayload + BodyOverhead, DefaultMaxBatchBodyBytes},
		{DefaultMaxBatchBodyBytes / jobstore.MaxBatch, DefaultMaxBatchBodyBytes},
		{200 << 20, 200 << 20},
		{1<<63 - 1, 1<<63 - 1},
	} {
		require.Equal(t, tc.want, defaultBatchBody(tc.single), "single limit %d", tc.single)
	}
}

func TestScrubPaths(t *testing.T) {
	for in, want := range map[string]string{
		"open /srv/jobs/done/X.json: permission denied":               "open .../X.json: permission denied",
		"filestore: /srv/jobs/queued/X.json: corrupt job record: bad": "filestore: .../X.json: corrupt job record: bad",
		"/abs/at/start: gone":                                                     ".../start: gone",
		`path "/a/b/c" (quoted), (/x/y), [/p/q]`:                                  `path ".../c" (quoted), (.../y), [.../q]`,
		"only letters, digits and ._:/- are allowed":                              "only letters, digits and ._:/- are allowed",
		`kind "report/daily": not allowed`:                                        `kind "report/daily": not allowed`,
		"the root / itself":                                                       "the root / itself",
		"rename /a/tmp/x /a/done/x: no space left on device":                      "rename .../x .../x: no space left on device",
		"no slash here":                                                           "no slash here",
		"lstat /srv/jobs/locks/rec-1.lock, then /srv/jobs/locks/rec-2.lock; done": "lstat .../rec-1.lock, then .../rec-2.lock; done",
	} {
		require.Equal(t, want, scrubPaths(in), in)
	}
}

func TestPlainMessage(t *testing.T) {
	for in, want := range map[string]string{
		"filestore: get: job X: job not found":           "job X: job not found",
		"pgstore: claim batch: no job available":         "no job available",
		"memstore: get 01ARZ: job not found":             "get 01ARZ: job not found",
		"filestore: .../X.json: corrupt job record: bad": ".../X.json: corrupt job record: bad",
		"job X is succeeded":                             "job X is succeeded",
	} {
		require.Equal(t, want, plainMessage(in), in)
	}
}

// TestFieldFormsCoverEverySubmitField requires fieldForms to say what each
// field of a submit request takes, but payload (any JSON value), so that a
// field added later also gets a plain message for a value of the wrong type.
func TestFieldFormsCoverEverySubmitField(t *testing.T) {
	typ := reflect.TypeFor[submitRequest]()
	var fields []string
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "payload" {
			fields = append(fields, name)
		}
	}
	fields = append(fields, "meta.*", "tags.*", "after.*", "after_keys.*", "after_specs.*") // their elements
	slices.Sort(fields)
	require.Equal(t, fields, slices.Sorted(maps.Keys(fieldForms)))
}
