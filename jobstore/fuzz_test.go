package jobstore_test

import (
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// The fuzz tests below run their seeds (and the corpora under
// testdata/fuzz) as ordinary tests; `go test -fuzz=FuzzX` explores further.

// crockford is the alphabet of a canonical job ID.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// hostileIDs are strings a caller may pass where a job ID is expected:
// path tricks, NUL bytes, wrong lengths and Unicode look-alikes of ULID
// characters (Cyrillic О for 0, fullwidth digits, Greek Α), which print
// like an ID but are not one.
var hostileIDs = []string{
	"01ARZ3NDEKTSV4RRFFQ69G5FAV",
	"7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
	"8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
	"",
	".",
	"..",
	"../x",
	"a/b",
	"/etc/passwd",
	"../../../../../../etc/passwd",
	"01ARZ3NDEKTSV4RRFFQ69G5F/V",
	"01ARZ3NDEKTSV4RRFFQ69G5F.V",
	"01ARZ3NDEKTSV4RRFFQ69G5F\x00V",
	"01ARZ3NDEKTSV4RRFFQ69G5FA\x00",
	"01ARZ3NDEKTSV4RRFFQ69G5FA\\",
	"01arz3ndektsv4rrffq69g5fav",
	"О1ARZ3NDEKTSV4RRFFQ69G5FAV",   // Cyrillic capital O
	"０1ARZ3NDEKTSV4RRFFQ69G5FAV",   // fullwidth zero
	"01ΑRZ3NDEKTSV4RRFFQ69G5FAV",   // Greek capital alpha
	"01ARZ3NDEKTSV4RRFFQ69G5FAV\n", // trailing newline
	"01ARZ3NDEKTSV4RRFFQ69G5FIL",   // I and L are not Crockford
	"%2e%2e%2fx",
	strings.Repeat("0", 10000),
}

// FuzzIDFileName checks that an ID ValidateID accepts is exactly 26
// Crockford base32 characters that parse as the same ULID, and that the
// record path built from it stays directly inside its state directory, so
// nothing can resolve outside the store. Rejected IDs are reported as
// ErrInvalidID with a message of bounded length, whatever their size.
func FuzzIDFileName(f *testing.F) {
	for _, id := range hostileIDs {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := jobstore.ValidateID(id)
		if err != nil {
			require.ErrorIs(t, err, jobstore.ErrInvalidID)
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			require.Less(t, len(err.Error()), 512, "an error quotes a bounded part of the input")
			return
		}
		require.Len(t, id, 26)
		for i := 0; i < len(id); i++ {
			require.True(t, strings.IndexByte(crockford, id[i]) >= 0, "byte %d %q of %q", i, id[i], id)
		}
		u, perr := ulid.ParseStrict(id)
		require.NoError(t, perr)
		require.Equal(t, id, u.String(), "an accepted ID is canonical")

		store := filepath.Join("/srv", "jobs")
		for _, dir := range []string{"queued", "claimed", "done"} {
			p := filepath.Join(store, dir, id+".json")
			require.Equal(t, filepath.Join(store, dir), filepath.Dir(p))
			require.Equal(t, id+".json", filepath.Base(p))
			rel, rerr := filepath.Rel(store, p)
			require.NoError(t, rerr)
			require.False(t, rel == ".." || strings.HasPrefix(rel, "../"), "%q escapes the store", p)
		}
		p := filepath.Join(store, "locks", id+".lock")
		require.Equal(t, filepath.Join(store, "locks"), filepath.Dir(p))
	})
}

// FuzzKeyErrors checks ValidateKey on arbitrary input: it never panics, an
// accepted key has no byte that could end a line or a C string, and a
// rejected key's error wraps ErrInvalidInput with a bounded message (a
// 10,000-byte key is not echoed back).
func FuzzKeyErrors(f *testing.F) {
	for _, k := range []string{"", "order-42", "../../etc/passwd", "a\x00b", "\xff\xfe", "order-О", "ｏｒｄｅｒ", "\u202eevil", strings.Repeat("k", 10000)} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := jobstore.ValidateKey(key)
		if err != nil {
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			require.Less(t, len(err.Error()), 512)
			return
		}
		require.LessOrEqual(t, len(key), jobstore.MaxKeyLen)
		require.True(t, utf8.ValidString(key))
		require.NotContains(t, key, "\x00")
		require.NotContains(t, key, "\n")
		require.NotContains(t, key, "\r")
	})
}

// FuzzSpecValidate checks Spec.Validate on arbitrary specs: it never
// panics; every error wraps ErrInvalidInput; a payload over the limit is
// always refused, with ErrPayloadTooLarge once kind and key are valid; and
// what it accepts obeys every documented rule, so NewJob makes a job that
// survives a JSON round trip.
func FuzzSpecValidate(f *testing.F) {
	f.Add("email.send", "", []byte(`{"to":"a@example.com"}`), 0, 0, int64(0), 0)
	f.Add("k", "order-1", []byte(`"x"`), 3, -1000, int64(time.Second), 3)
	f.Add("k", "", []byte(`"xx"`), 0, 0, int64(0), 3)
	f.Add("k", "", []byte(`"xxx"`), 0, 0, int64(0), 3)
	f.Add("", "", []byte(nil), 0, 0, int64(0), 0)
	f.Add("bad kind", strings.Repeat("k", 10000), []byte("{"), -1, 1001, int64(-1), -5)
	f.Add("a/../b", "key\x00", []byte(`{"a":1}{"b":2}`), 1001, 0, int64(math.MaxInt64), 1)
	f.Add("k", "ключ", []byte(" [1, 2, 3] "), 1000, 1000, int64(0), 11)
	f.Fuzz(func(t *testing.T, kind, key string, payload []byte, maxAttempts, priority int, timeout int64, maxPayload int) {
		spec := jobstore.Spec{
			Kind: kind, Key: key, Payload: json.RawMessage(payload),
			MaxAttempts: maxAttempts, Priority: priority, Timeout: time.Duration(timeout),
		}
		limit := maxPayload
		if limit <= 0 {
			limit = jobstore.DefaultMaxPayload
		}
		err := spec.Validate(maxPayload)
		over := len(payload) > limit
		if over {
			require.Error(t, err, "a payload of %d bytes passed the limit %d", len(payload), limit)
			perr := jobstore.ValidatePayload(spec.Payload, maxPayload)
			require.ErrorIs(t, perr, jobstore.ErrPayloadTooLarge)
			if jobstore.ValidateKind(kind) == nil && (key == "" || jobstore.ValidateKey(key) == nil) {
				require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
			}
		}
		if err != nil {
			require.ErrorIs(t, err, jobstore.ErrInvalidInput)
			if errors.Is(err, jobstore.ErrPayloadTooLarge) {
				require.True(t, over, "ErrPayloadTooLarge for %d bytes under the limit %d", len(payload), limit)
			}
			return
		}
		require.NoError(t, jobstore.ValidateKind(kind))
		if key != "" {
			require.NoError(t, jobstore.ValidateKey(key))
		}
		require.LessOrEqual(t, len(payload), limit)
		require.True(t, len(payload) == 0 || json.Valid(payload))
		require.GreaterOrEqual(t, maxAttempts, 0)
		require.LessOrEqual(t, maxAttempts, 1000)
		require.GreaterOrEqual(t, priority, -1000)
		require.LessOrEqual(t, priority, 1000)
		require.GreaterOrEqual(t, timeout, int64(0))

		now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		j := jobstore.NewJob(spec, now)
		require.NoError(t, jobstore.ValidateID(j.ID))
		require.Equal(t, jobstore.StateQueued, j.State)
		require.GreaterOrEqual(t, j.MaxAttempts, 1)
		data, err := json.Marshal(j)
		require.NoError(t, err)
		var back jobstore.Job
		require.NoError(t, json.Unmarshal(data, &back))
		require.Equal(t, j.ID, back.ID)
		require.Equal(t, j.Key, back.Key)
		require.Equal(t, j.Kind, back.Kind)
		require.Equal(t, j.Timeout, back.Timeout)
		if len(payload) > 0 {
			require.JSONEq(t, string(payload), string(back.Payload))
		}
	})
}
