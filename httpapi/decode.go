package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobdir/jobdir/jobstore"
)

// submitRequest is how the server reads a SubmitRequest, the JSON body of
// POST /v1/jobs: the same fields, read more strictly. Times and durations
// are strings so that a client writes them as people do: run_at in RFC
// 3339, timeout as a Go duration such as "30s" or "1h30m".
//
// Its strings are strictString: encoding/json would silently turn an
// escaped lone surrogate into U+FFFD, so two different keys would name one
// job. TimeoutNS is the deprecated spelling of the timeout, in
// nanoseconds, taken until a future version; nil when absent.
type submitRequest struct {
	Kind        strictString            `json:"kind"`
	Key         strictString            `json:"key"`
	Queue       strictString            `json:"queue"`
	Partition   strictString            `json:"partition"`
	Tags        []string                `json:"tags"`
	Meta        map[string]strictString `json:"meta"`
	Payload     json.RawMessage         `json:"payload"`
	MaxAttempts int                     `json:"max_attempts"`
	Priority    int                     `json:"priority"`
	RunAt       strictString            `json:"run_at"`
	Timeout     durationText            `json:"timeout"`
	TimeoutNS   *int64                  `json:"timeout_ns"`
	After       []strictString          `json:"after"`
	AfterKeys   []strictString          `json:"after_keys"`
	AfterSpecs  []int                   `json:"after_specs"`
	AfterAny    bool                    `json:"after_any"`
	Batch       strictString            `json:"batch"`
	AfterBatch  strictString            `json:"after_batch"`
}

// durationText is the timeout of a submit: a strictString that must be a
// JSON string, so that a bare number, which a client may mean as seconds
// or as nanoseconds, is refused with a message that says what to send.
type durationText strictString

// UnmarshalJSON decodes a JSON string as strictString does, refusing
// any other JSON value but null.
func (s *durationText) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] != '"' && string(data) != "null" {
		return fmt.Errorf(`%w: timeout %s is not a string: send a duration such as "30s" or "1h30m"`, jobstore.ErrInvalidInput, truncate(string(data), 64))
	}
	return (*strictString)(s).UnmarshalJSON(data)
}

// strictString is a JSON string that must decode to exactly the
// characters it spells: it refuses the escape of half a UTF-16 surrogate
// pair (such as "\ud800" alone), which encoding/json replaces by U+FFFD.
// Raw invalid UTF-8 is refused before decoding, by utf8Reader.
type strictString string

// UnmarshalJSON decodes a JSON string, refusing lone surrogate escapes.
// Any other JSON value but null is a *json.UnmarshalTypeError, to which
// the decoder adds the field's name, so that fieldTypeError can say what
// the field takes.
func (s *strictString) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] != '"' && string(data) != "null" {
		return &json.UnmarshalTypeError{Value: jsonValueKind(data), Type: reflect.TypeFor[string]()}
	}
	if err := checkSurrogates(data); err != nil {
		return err
	}
	var v string
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*s = strictString(v)
	return nil
}

// jsonValueKind names the JSON value data as encoding/json does in a
// *json.UnmarshalTypeError: "object", "array", "bool", or "number" with
// the number ("number 1700000000", cut to 64 bytes).
func jsonValueKind(data []byte) string {
	switch data[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number " + truncate(string(data), 64)
}

// fieldForms says, for each field of a submit request that can have the
// wrong JSON type, the type it takes and what to send.
var fieldForms = map[string]struct{ want, send string }{
	"kind":          {"a string", `a kind such as "email.send"`},
	"key":           {"a string", `a key such as "invoice-1001"`},
	"queue":         {"a string", `a queue name such as "emails"`},
	"partition":     {"a string", `a partition such as "customer-42"`},
	"tags":          {"a list of strings", `a list such as ["nightly", "team=billing"]`},
	"meta":          {"an object of strings", `an object such as {"request": "r-42"}`},
	"meta.*":        {"a string", `each value of meta as a string, such as {"attempt": "3"}`},
	"tags.*":        {"a string", `each tag as a string, such as "nightly"`},
	"run_at":        {"a string", `an RFC 3339 time such as "2026-01-02T15:04:05Z"`},
	"timeout":       {"a string", `a duration such as "30s" or "1h30m"`},
	"max_attempts":  {"an integer", "a whole number such as 3, without quotes"},
	"priority":      {"an integer", "a whole number such as 10, without quotes"},
	"timeout_ns":    {"an integer", `timeout, a duration such as "30s" (timeout_ns, a whole number of nanoseconds without quotes, is deprecated)`},
	"after":         {"a list of strings", `a list of job IDs such as ["01JCXZ8ZQ4V6Y2W0M8R5T3N7PB"]`},
	"after.*":       {"a string", `each job ID as a string, such as "01JCXZ8ZQ4V6Y2W0M8R5T3N7PB"`},
	"after_keys":    {"a list of strings", `a list of keys such as ["build-42"]`},
	"after_keys.*":  {"a string", `each key as a string, such as "build-42"`},
	"after_specs":   {"a list of integers", "a list of indexes of earlier jobs of the batch, such as [0, 2]"},
	"after_specs.*": {"an integer", "each index as a whole number without quotes, such as 0"},
	"after_any":     {"a boolean", "true or false, without quotes"},
	"batch":         {"a string", `a batch name such as "nightly-export"`},
	"after_batch":   {"a string", `a batch name such as "nightly-export"`},
}

// fieldElements names, for the fields of a submit request that are lists
// or objects, one of their elements.
var fieldElements = map[string]string{
	"meta": "a value of meta", "tags": "a tag", "after": "an ID of after",
	"after_keys": "a key of after_keys", "after_specs": "an index of after_specs",
}

// fieldTypeError turns a *json.UnmarshalTypeError found in err (a JSON
// value of the wrong type for a field of a submit request, or a request
// that is not an object, which the message calls whole) into an error
// wrapping jobstore.ErrInvalidInput that names the field and says what to
// send. It returns nil if err holds none.
func fieldTypeError(err error, whole string) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return nil
	}
	got := "a " + te.Value
	switch {
	case strings.HasPrefix(te.Value, "number "):
		got = "the " + te.Value
	case te.Value == "array" || te.Value == "object":
		got = "an " + te.Value
	case te.Value == "bool":
		got = "a boolean"
	}
	if te.Field == "" {
		return fmt.Errorf(`%w: %s is %s; want a JSON object such as {"kind": "email.send"}`, jobstore.ErrInvalidInput, whole, got)
	}
	field, name := te.Field, te.Field
	if elem, ok := fieldElements[field]; ok && te.Type != nil && te.Type.Kind() != reflect.Slice && te.Type.Kind() != reflect.Map {
		// An element of the map or list, not the field itself.
		field, name = field+".*", elem
	}
	form, ok := fieldForms[field]
	if !ok {
		return fmt.Errorf("%w: %s is %s, which is not what it takes", jobstore.ErrInvalidInput, name, got)
	}
	want := form.want
	if want == "an integer" && strings.HasPrefix(te.Value, "number ") {
		want = "an integer within range"
	}
	return fmt.Errorf("%w: %s is %s, not %s: send %s", jobstore.ErrInvalidInput, name, got, want, form.send)
}

// checkSurrogates returns an error if the JSON string data holds a \u
// escape of a surrogate that is not half of a high-low pair.
func checkSurrogates(data []byte) error {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		if i+1 < len(data) && data[i+1] != 'u' {
			i++ // a two-byte escape such as \\ or \"
			continue
		}
		r, ok := hex4(data, i+2)
		if !ok {
			return nil // json.Unmarshal reports the malformed escape
		}
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return fmt.Errorf("%w: the string %s holds \\u%04x, the second half of a UTF-16 surrogate pair without its first: not a character", jobstore.ErrInvalidInput, truncate(string(data), 64), r)
		case r >= 0xd800 && r <= 0xdbff:
			if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
				if low, ok := hex4(data, i+8); ok && low >= 0xdc00 && low <= 0xdfff {
					i += 11
					continue
				}
			}
			return fmt.Errorf("%w: the string %s holds \\u%04x, the first half of a UTF-16 surrogate pair without its second: not a character", jobstore.ErrInvalidInput, truncate(string(data), 64), r)
		}
		i += 5
	}
	return nil
}

// hex4 decodes the four hex digits at data[i:i+4].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// utf8Reader passes a request body through, failing with an error that
// wraps jobstore.ErrInvalidInput at the first byte that is not valid
// UTF-8: JSON text is UTF-8 (RFC 8259), and encoding/json would silently
// replace invalid bytes in strings by U+FFFD.
type utf8Reader struct {
	r       io.Reader
	pending []byte // the start of a character split across reads
	off     int64  // offset of the byte after pending
}

func (u *utf8Reader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if verr := u.check(p[:n], err == io.EOF); verr != nil {
		return 0, verr
	}
	return n, err
}

// check validates b, which follows what was read so far; eof says no more
// comes.
func (u *utf8Reader) check(b []byte, eof bool) error {
	start := u.off - int64(len(u.pending))
	buf := b
	if len(u.pending) > 0 {
		buf = append(u.pending, b...)
		u.pending = nil
	}
	u.off += int64(len(b))
	for i := 0; i < len(buf); {
		if buf[i] < utf8.RuneSelf {
			i++
			continue
		}
		if !utf8.FullRune(buf[i:]) && !eof {
			u.pending = append([]byte(nil), buf[i:]...)
			return nil
		}
		r, size := utf8.DecodeRune(buf[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("%w: request body is not valid UTF-8 (byte %d); JSON text must be UTF-8", jobstore.ErrInvalidInput, start+int64(i))
		}
		i += size
	}
	return nil
}

// decodeSubmit reads one submit request from r and returns the spec it
// describes. It rejects what is malformed (not one JSON object, unknown
// fields, wrong types, a run_at or timeout that does not parse) with an
// error wrapping jobstore.ErrInvalidInput, or the *http.MaxBytesError of a
// body over the limit. It leaves the rules on the values themselves (kind
// syntax, ranges, payload size) to jobstore.Spec.Validate.
func decodeSubmit(r io.Reader) (jobstore.Spec, error) {
	var req submitRequest
	if err := decodeBody(&utf8Reader{r: r}, &req); err != nil {
		return jobstore.Spec{}, err
	}
	return req.spec()
}

// decodeBatch reads a batch submit request, {"jobs": [...]}, from r and
// returns the specs it describes, in order. Each element of "jobs" is
// decoded by the rules of decodeSubmit, and an error about one names its
// index ("jobs[3]: ..."). Errors wrap jobstore.ErrInvalidInput, or are the
// *http.MaxBytesError of a body over the limit; more than jobstore.MaxBatch
// elements get the *Error of an invalid spec (422), since the JSON itself
// is well-formed.
//
// It decodes one element at a time, so that it holds the specs but never
// the whole body as well: a batch of 60 MiB costs 60 MiB of specs, not
// three copies.
func decodeBatch(r io.Reader) ([]jobstore.Spec, error) {
	dec := json.NewDecoder(&utf8Reader{r: r})
	dec.DisallowUnknownFields()
	noJobs := fmt.Errorf(`%w: request body has no "jobs" array; want {"jobs": [{"kind": ...}, ...]}`, jobstore.ErrInvalidInput)
	if err := expectDelim(dec, '{'); err != nil {
		if errors.Is(err, errNotDelim) {
			return nil, noJobs
		}
		return nil, err
	}
	var specs []jobstore.Spec
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, decodeError(err)
		}
		// Keys match as encoding/json matches field names.
		if key, _ := tok.(string); !strings.EqualFold(key, "jobs") {
			return nil, fmt.Errorf("%w: request body: unknown field %q", jobstore.ErrInvalidInput, truncate(key, 64))
		}
		if seen {
			return nil, fmt.Errorf(`%w: request body: "jobs" given twice`, jobstore.ErrInvalidInput)
		}
		seen = true
		if specs, err = decodeJobs(dec); err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if specs == nil {
		return nil, noJobs
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, decodeError(err)
		}
		return nil, fmt.Errorf("%w: request body holds more than one JSON value", jobstore.ErrInvalidInput)
	}
	return specs, nil
}

// decodeJobs decodes the value of "jobs": an array of submit requests, or
// null (nil specs, as if absent).
func decodeJobs(dec *json.Decoder) ([]jobstore.Spec, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, decodeError(err)
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf(`%w: request body: "jobs" is not an array; want {"jobs": [{"kind": ...}, ...]}`, jobstore.ErrInvalidInput)
	}
	specs := []jobstore.Spec{}
	for i := 0; dec.More(); i++ {
		if i == jobstore.MaxBatch {
			return nil, newError(http.StatusUnprocessableEntity, CodeInvalidSpec,
				"batch of more than %d jobs is over the limit: split it into several requests", jobstore.MaxBatch)
		}
		var sr submitRequest
		if err := dec.Decode(&sr); err != nil {
			var maxErr *http.MaxBytesError
			switch {
			case errors.As(err, &maxErr):
				return nil, err
			case errors.Is(err, jobstore.ErrInvalidInput):
				return nil, fmt.Errorf("jobs[%d]: %w", i, err)
			}
			if ferr := fieldTypeError(err, "the job"); ferr != nil {
				return nil, fmt.Errorf("jobs[%d]: %w", i, ferr)
			}
			return nil, fmt.Errorf("jobs[%d]: %w: %s", i, jobstore.ErrInvalidInput, err.Error())
		}
		spec, err := sr.spec()
		if err != nil {
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		specs = append(specs, spec)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, err
	}
	return specs, nil
}

// errNotDelim is expectDelim's error for a token other than the one
// expected.
var errNotDelim = fmt.Errorf("%w: request body: unexpected JSON", jobstore.ErrInvalidInput)

// expectDelim reads the next token, which must be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return decodeError(err)
	}
	if tok != d {
		return errNotDelim
	}
	return nil
}

// decodeBody decodes the one JSON value r holds into v, refusing unknown
// fields and anything after the value. Errors are decodeError's.
func decodeBody(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return decodeError(err)
		}
		return fmt.Errorf("%w: request body holds more than one JSON value", jobstore.ErrInvalidInput)
	}
	return nil
}

// spec returns the spec req describes, or an error wrapping
// jobstore.ErrInvalidInput if its run_at or timeout does not parse, or if
// timeout and timeout_ns are both given and disagree.
func (req submitRequest) spec() (jobstore.Spec, error) {
	spec := jobstore.Spec{
		Kind:        string(req.Kind),
		Key:         string(req.Key),
		Queue:       string(req.Queue),
		Partition:   string(req.Partition),
		Tags:        req.Tags,
		MaxAttempts: req.MaxAttempts,
		Priority:    req.Priority,
		AfterSpecs:  req.AfterSpecs,
		AfterAny:    req.AfterAny,
		Batch:       string(req.Batch),
		AfterBatch:  string(req.AfterBatch),
	}
	spec.After = plainStrings(req.After)
	spec.AfterKeys = plainStrings(req.AfterKeys)
	if len(req.Meta) > 0 {
		spec.Meta = make(map[string]string, len(req.Meta))
		for k, v := range req.Meta {
			spec.Meta[k] = string(v)
		}
	}
	if p := bytes.TrimSpace(req.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		spec.Payload = req.Payload
	}
	if req.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, string(req.RunAt))
		if err != nil {
			return jobstore.Spec{}, fmt.Errorf("%w: run_at %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", jobstore.ErrInvalidInput, truncate(string(req.RunAt), 64))
		}
		// A time that JSON cannot encode once in UTC could be neither
		// stored nor returned.
		if y := t.UTC().Year(); y < 1 || y > 9999 {
			return jobstore.Spec{}, fmt.Errorf("%w: run_at %q is outside the years 1 to 9999", jobstore.ErrInvalidInput, truncate(string(req.RunAt), 64))
		}
		spec.RunAt = t.UTC()
	}
	var d time.Duration
	if req.Timeout != "" {
		var err error
		if d, err = time.ParseDuration(string(req.Timeout)); err != nil {
			return jobstore.Spec{}, fmt.Errorf("%w: timeout %q is not a duration such as 30s or 1h30m", jobstore.ErrInvalidInput, truncate(string(req.Timeout), 64))
		}
	}
	var ns int64
	if req.TimeoutNS != nil {
		ns = *req.TimeoutNS
	}
	timeout, err := pickTimeout(string(req.Timeout), d, req.Timeout != "", ns, req.TimeoutNS != nil)
	if err != nil {
		return jobstore.Spec{}, err
	}
	spec.Timeout = timeout
	return spec, nil
}

// plainStrings returns ss as plain strings; nil for none.
func plainStrings(ss []strictString) []string {
	if len(ss) == 0 {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// decodeError turns a JSON decoding error into one wrapping
// jobstore.ErrInvalidInput, keeping an *http.MaxBytesError as it is.
func decodeError(err error) error {
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return err
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: request body is empty; want a JSON object", jobstore.ErrInvalidInput)
	}
	if errors.Is(err, jobstore.ErrInvalidInput) {
		return err // from utf8Reader or strictString, which say what is wrong
	}
	if ferr := fieldTypeError(err, "request body"); ferr != nil {
		return ferr
	}
	return fmt.Errorf("%w: request body: %s", jobstore.ErrInvalidInput, err.Error())
}

// listQueryKeys are the query parameters GET /v1/jobs accepts.
var listQueryKeys = map[string]bool{"state": true, "kind": true, "queue": true, "tag": true, "limit": true, "cursor": true, "order": true}

// parseListQuery turns the query of GET /v1/jobs into list options. state
// may repeat and may hold a comma-separated list; order is "newest" (the
// default) or "oldest". Unknown parameters are rejected, so that a typo
// does not silently list everything.
func parseListQuery(q url.Values) (jobstore.ListOptions, error) {
	var opts jobstore.ListOptions
	for k, vs := range q {
		if !listQueryKeys[k] {
			return opts, fmt.Errorf("%w: unknown query parameter %q (want state, kind, queue, tag, limit, cursor or order)", jobstore.ErrInvalidInput, truncate(k, 64))
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return opts, fmt.Errorf("%w: query parameter %s is not valid UTF-8", jobstore.ErrInvalidInput, k)
			}
		}
	}
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			st, err := jobstore.ParseState(s)
			if err != nil {
				return opts, err
			}
			opts.States = append(opts.States, st)
		}
	}
	var err error
	if opts.Kind, err = single(q, "kind"); err != nil {
		return opts, err
	}
	if opts.Queue, err = single(q, "queue"); err != nil {
		return opts, err
	}
	if opts.Tag, err = single(q, "tag"); err != nil {
		return opts, err
	}
	if opts.Cursor, err = single(q, "cursor"); err != nil {
		return opts, err
	}
	limit, err := single(q, "limit")
	if err != nil {
		return opts, err
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 {
			return opts, fmt.Errorf("%w: limit %q is not a positive integer", jobstore.ErrInvalidInput, truncate(limit, 64))
		}
		opts.Limit = n
	}
	order, err := single(q, "order")
	if err != nil {
		return opts, err
	}
	switch order {
	case "", "newest":
		opts.Order = jobstore.NewestFirst
	case "oldest":
		opts.Order = jobstore.OldestFirst
	default:
		return opts, fmt.Errorf("%w: order %q: want newest or oldest", jobstore.ErrInvalidInput, truncate(order, 64))
	}
	return opts.Normalize()
}

// single returns the only value of query parameter key, or "" if absent.
func single(q url.Values, key string) (string, error) {
	vs := q[key]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", fmt.Errorf("%w: query parameter %q given %d times", jobstore.ErrInvalidInput, key, len(vs))
}

// parseWaitTimeout reads the timeout query parameter of the wait route: a
// Go duration, at most max (longer values are capped), def when absent.
func parseWaitTimeout(q url.Values, def, max time.Duration) (time.Duration, error) {
	for k := range q {
		if k != "timeout" {
			return 0, fmt.Errorf("%w: unknown query parameter %q (want timeout)", jobstore.ErrInvalidInput, truncate(k, 64))
		}
	}
	v, err := single(q, "timeout")
	if err != nil {
		return 0, err
	}
	d := def
	if v != "" {
		if d, err = time.ParseDuration(v); err != nil || d < 0 {
			return 0, fmt.Errorf("%w: timeout %q is not a non-negative duration such as 30s", jobstore.ErrInvalidInput, truncate(v, 64))
		}
	}
	return min(d, max), nil
}

// truncate shortens s, quoted back in an error message, to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
