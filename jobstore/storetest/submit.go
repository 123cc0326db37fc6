package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var submitTests = []test{
	{"Defaults", testSubmitDefaults},
	{"Fields", testSubmitFields},
	{"WithoutKeyAlwaysCreates", testSubmitWithoutKey},
	{"KeyReturnsExistingInEveryState", testSubmitKeyEveryState},
	{"KeyFreeAfterPrune", testSubmitKeyFreeAfterPrune},
}

func testSubmitDefaults(t *testing.T, s jobstore.Store) {
	before := time.Now()
	j := submit(t, s, jobstore.Spec{Kind: "email.send", Payload: json.RawMessage(`{"to":"a@example.com"}`)})
	after := time.Now()

	require.NoError(t, jobstore.ValidateID(j.ID))
	require.Equal(t, "email.send", j.Kind)
	require.Empty(t, j.Key)
	require.JSONEq(t, `{"to":"a@example.com"}`, string(j.Payload))
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Zero(t, j.Attempt)
	require.Equal(t, jobstore.DefaultMaxAttempts, j.MaxAttempts)
	require.Zero(t, j.Priority)
	require.WithinRange(t, j.CreatedAt, before.Add(-time.Millisecond), after.Add(time.Millisecond))
	require.WithinRange(t, j.RunAt, before.Add(-time.Millisecond), after.Add(time.Millisecond))
	require.False(t, j.UpdatedAt.Before(j.CreatedAt))
	require.True(t, j.StartedAt.IsZero())
	require.True(t, j.FinishedAt.IsZero())
	require.Empty(t, j.Result)
	require.Empty(t, j.LastError)
	require.False(t, j.CancelRequested)
	require.Empty(t, j.Worker)

	requireSameJob(t, j, get(t, s, j.ID))
}

func testSubmitFields(t *testing.T, s jobstore.Store) {
	runAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	spec := jobstore.Spec{
		Kind:        "report:monthly/v2",
		Key:         "report 2026-11 ✓",
		Partition:   "customer 42 ✓",
		Payload:     json.RawMessage(`[1,2,3]`),
		MaxAttempts: 7,
		Priority:    -5,
		RunAt:       runAt,
		Timeout:     90 * time.Second,
	}
	j := submit(t, s, spec)
	require.Equal(t, spec.Kind, j.Kind)
	require.Equal(t, spec.Key, j.Key)
	require.Equal(t, spec.Partition, j.Partition)
	require.JSONEq(t, `[1,2,3]`, string(j.Payload))
	require.Equal(t, 7, j.MaxAttempts)
	require.Equal(t, -5, j.Priority)
	require.True(t, j.RunAt.Equal(runAt), "RunAt %s, want %s", j.RunAt, runAt)
	require.Equal(t, 90*time.Second, j.Timeout)
	requireSameJob(t, j, get(t, s, j.ID))

	// A RunAt in the past means now.
	before := time.Now()
	past := submit(t, s, jobstore.Spec{Kind: "k", RunAt: before.Add(-time.Hour)})
	require.False(t, past.RunAt.Before(before.Add(-time.Millisecond)), "RunAt in the past kept as %s", past.RunAt)
}

func testSubmitWithoutKey(t *testing.T, s jobstore.Store) {
	seen := map[string]bool{}
	var last string
	for range 5 {
		j := submit(t, s, jobstore.Spec{Kind: "k"})
		require.False(t, seen[j.ID], "duplicate ID %s", j.ID)
		seen[j.ID] = true
		require.Greater(t, j.ID, last, "IDs of successive submits must increase")
		last = j.ID
	}
	a := submit(t, s, jobstore.Spec{Kind: "k", Key: "a"})
	b := submit(t, s, jobstore.Spec{Kind: "k", Key: "b"})
	require.NotEqual(t, a.ID, b.ID)
}

func testSubmitKeyEveryState(t *testing.T, s jobstore.Store) {
	byState := jobsInEveryState(t, s, func(st jobstore.State) string { return "key-" + string(st) })
	for _, st := range jobstore.States() {
		orig := byState[st]
		j, created, err := s.Submit(t.Context(), jobstore.Spec{
			Kind:     "other.kind",
			Key:      orig.Key,
			Payload:  json.RawMessage(`{"different":true}`),
			Priority: 9,
		})
		require.NoError(t, err, st)
		require.False(t, created, "second Submit with the key of a %s job created a new job", st)
		require.Equal(t, orig.ID, j.ID, "second Submit with the key of a %s job returned another job", st)
		require.Equal(t, st, j.State)
		require.Equal(t, orig.Kind, j.Kind, "second Submit changed the existing job")
		require.Equal(t, orig.Priority, j.Priority, "second Submit changed the existing job")
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	total := 0
	for _, n := range st.Counts {
		total += n
	}
	require.Equal(t, len(jobstore.States()), total, "resubmitting keys created jobs")
}

func testSubmitKeyFreeAfterPrune(t *testing.T, s jobstore.Store) {
	j := submit(t, s, jobstore.Spec{Kind: "k", Key: "once"})
	c := claimID(t, s, "w", j.ID)
	complete(t, s, c, jobstore.Succeeded(nil))

	again, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "once"})
	require.NoError(t, err)
	require.False(t, created, "key reused before prune")
	require.Equal(t, j.ID, again.ID)

	time.Sleep(2 * time.Millisecond)
	n, err := s.Prune(t.Context(), time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	fresh, created, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "once"})
	require.NoError(t, err)
	require.True(t, created, "key still taken after its job was pruned")
	require.NotEqual(t, j.ID, fresh.ID)
	require.Equal(t, jobstore.StateQueued, fresh.State)
}

// invalidIDs are strings that are not job IDs, several of them dangerous as
// file names.
func invalidIDs() map[string]string {
	return map[string]string{
		"empty":          "",
		"dotdot":         "../x",
		"dotdot-len26":   "../../../../../../../../x0",
		"absolute":       "/etc/passwd",
		"nul":            "a\x00b",
		"nul-len26":      "01ARZ3NDEKTSV4RRFFQ69G5FA\x00",
		"slash-len26":    "01ARZ3NDEKTSV4RRFFQ69G5F/V",
		"lowercase":      "01arz3ndektsv4rrffq69g5fav",
		"too-long":       strings.Repeat("0", 10_000),
		"overflow":       "81ARZ3NDEKTSV4RRFFQ69G5FAV",
		"space":          "01ARZ3NDEKTSV4RRFFQ69G5FA ",
		"excluded-char":  "01ARZ3NDEKTSV4RRFFQ69G5FAU",
		"unicode":        "01ARZ3NDEKTSV4RRFFQ69G5FÅ",
		"backslash-path": `..\..\windows`,
	}
}

var validationTests = []test{
	{"InvalidSpec", testValidationSpec},
	{"PayloadLimit", testValidationPayloadLimit},
	{"InvalidID", testValidationID},
	{"InvalidWorkerAndKinds", testValidationClaim},
	{"InvalidListOptions", testValidationList},
}

func testValidationSpec(t *testing.T, s jobstore.Store) {
	cases := map[string]jobstore.Spec{
		"no kind":              {},
		"kind with space":      {Kind: "send email"},
		"kind with NUL":        {Kind: "a\x00b"},
		"kind too long":        {Kind: strings.Repeat("k", jobstore.MaxKindLen+1)},
		"key 10000 bytes":      {Kind: "k", Key: strings.Repeat("k", 10_000)},
		"key with newline":     {Kind: "k", Key: "a\nb"},
		"key with NUL":         {Kind: "k", Key: "a\x00b"},
		"key not UTF-8":        {Kind: "k", Key: "\xff\xfe"},
		"partition too long":   {Kind: "k", Partition: strings.Repeat("p", jobstore.MaxPartitionLen+1)},
		"partition with tab":   {Kind: "k", Partition: "a\tb"},
		"payload not JSON":     {Kind: "k", Payload: json.RawMessage(`{"a":`)},
		"payload two values":   {Kind: "k", Payload: json.RawMessage(`1 2`)},
		"negative attempts":    {Kind: "k", MaxAttempts: -1},
		"too many attempts":    {Kind: "k", MaxAttempts: 1001},
		"priority too high":    {Kind: "k", Priority: 1001},
		"priority too low":     {Kind: "k", Priority: -1001},
		"negative timeout":     {Kind: "k", Timeout: -time.Second},
		"payload over 1 MiB+1": {Kind: "k", Payload: jsonString(jobstore.DefaultMaxPayload + 1)},
	}
	for name, spec := range cases {
		j, created, err := s.Submit(t.Context(), spec)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "%s: Submit accepted it", name)
		require.False(t, created, name)
		require.Empty(t, j.ID, name)
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	for state, n := range st.Counts {
		require.Zero(t, n, "an invalid spec left a %s job", state)
	}
	// The longest key and kind are accepted.
	submit(t, s, jobstore.Spec{Kind: strings.Repeat("k", jobstore.MaxKindLen), Key: strings.Repeat("é", jobstore.MaxKeyLen/2)})
}

// jsonString returns a JSON string value of exactly n bytes.
func jsonString(n int) json.RawMessage {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	b[0], b[n-1] = '"', '"'
	return b
}

func testValidationPayloadLimit(t *testing.T, s jobstore.Store) {
	exact := jsonString(jobstore.DefaultMaxPayload)
	j := submit(t, s, jobstore.Spec{Kind: "big", Payload: exact})
	require.Len(t, get(t, s, j.ID).Payload, jobstore.DefaultMaxPayload)

	_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "big", Payload: jsonString(jobstore.DefaultMaxPayload + 1)})
	require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)

	// The same limit applies to a result.
	c := claimID(t, s, "w", j.ID)
	_, err = s.Complete(t.Context(), c.Lease(), jobstore.Succeeded(jsonString(jobstore.DefaultMaxPayload+1)))
	require.ErrorIs(t, err, jobstore.ErrPayloadTooLarge)
	require.Equal(t, jobstore.StateRunning, get(t, s, j.ID).State, "a refused result changed the job")
	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`"small"`)))
	require.Equal(t, jobstore.StateSucceeded, done.State)
}

func testValidationID(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	submitKind(t, s, "k") // so that a store cannot pass by being empty
	for name, id := range invalidIDs() {
		_, err := s.Get(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "Get %s", name)
		_, err = s.Cancel(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "Cancel %s", name)
		_, err = s.Retry(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "Retry %s", name)
		_, err = s.Wait(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "Wait %s", name)
		lease := jobstore.Lease{ID: id, Worker: "w", Attempt: 1}
		_, err = s.Complete(ctx, lease, jobstore.Succeeded(nil))
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "Complete %s", name)
		err = s.WatchCancel(ctx, lease)
		require.ErrorIs(t, err, jobstore.ErrInvalidID, "WatchCancel %s", name)
		_, err = s.List(ctx, jobstore.ListOptions{Cursor: id})
		if id != "" { // an empty cursor means the first page
			require.ErrorIs(t, err, jobstore.ErrInvalidID, "List cursor %s", name)
		}
	}
}

func testValidationClaim(t *testing.T, s jobstore.Store) {
	submitKind(t, s, "k")
	for name, req := range map[string]jobstore.ClaimRequest{
		"no worker":        {},
		"worker space":     {Worker: "a b"},
		"worker newline":   {Worker: "a\nb"},
		"worker too long":  {Worker: strings.Repeat("w", 257)},
		"kind with space":  {Worker: "w", Kinds: []string{"k", "a b"}},
		"empty kind entry": {Worker: "w", Kinds: []string{""}},
	} {
		_, err := s.Claim(t.Context(), req)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
	}
	require.Equal(t, jobstore.StateQueued, onlyJob(t, s).State, "an invalid claim claimed the job")
}

func testValidationList(t *testing.T, s jobstore.Store) {
	for name, opts := range map[string]jobstore.ListOptions{
		"negative limit": {Limit: -1},
		"unknown state":  {States: []jobstore.State{"done"}},
		"bad kind":       {Kind: "a b"},
		"unknown order":  {Order: jobstore.Order(7)},
	} {
		_, err := s.List(t.Context(), opts)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, name)
	}
}

// onlyJob returns the single job in s.
func onlyJob(t *testing.T, s jobstore.Store) jobstore.Job {
	t.Helper()
	p, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
	return p.Jobs[0]
}

var getTests = []test{
	{"NotFound", testGetNotFound},
	{"ReturnsCurrentState", testGetCurrent},
	{"ByKey", testGetByKey},
	{"ByKeyNotFound", testGetByKeyNotFound},
	{"ByKeyInvalid", testGetByKeyInvalid},
}

// testGetByKey: GetByKey returns the job of the key as Get returns it, in
// its current state, and another key's job for another key.
func testGetByKey(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	a := submit(t, s, jobstore.Spec{Kind: "k", Key: "order-1", Payload: json.RawMessage(`{"n":1}`)})
	b := submit(t, s, jobstore.Spec{Kind: "k", Key: "order 2 ✓"})
	submitKind(t, s, "k")
	got, err := s.GetByKey(ctx, "order-1")
	require.NoError(t, err)
	requireSameJob(t, get(t, s, a.ID), got)
	got, err = s.GetByKey(ctx, "order 2 ✓")
	require.NoError(t, err)
	require.Equal(t, b.ID, got.ID)

	c := claimID(t, s, "w1", a.ID)
	got, err = s.GetByKey(ctx, "order-1")
	require.NoError(t, err)
	requireSameJob(t, c, got)
	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`"ok"`)))
	got, err = s.GetByKey(ctx, "order-1")
	require.NoError(t, err)
	requireSameJob(t, done, got)
}

// testGetByKeyNotFound: a key no job has, one only a pruned job had, and a
// key that differs only in case name no job.
func testGetByKeyNotFound(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	_, err := s.GetByKey(ctx, "nobody")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.False(t, errors.Is(err, jobstore.ErrInvalidInput))

	j := submit(t, s, jobstore.Spec{Kind: "k", Key: "Gone"})
	_, err = s.GetByKey(ctx, "gone")
	require.ErrorIs(t, err, jobstore.ErrNotFound, "keys are compared exactly")
	_, err = s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	n, err := s.Prune(ctx, 10*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = s.GetByKey(ctx, "Gone")
	require.ErrorIs(t, err, jobstore.ErrNotFound, "the key of a pruned job names no job")
}

// testGetByKeyInvalid: an empty or invalid key is invalid input.
func testGetByKeyInvalid(t *testing.T, s jobstore.Store) {
	for _, key := range []string{"", "a\x00b", strings.Repeat("k", jobstore.MaxKeyLen+1)} {
		_, err := s.GetByKey(t.Context(), key)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "%q", key)
	}
}

func testGetNotFound(t *testing.T, s jobstore.Store) {
	submitKind(t, s, "k")
	_, err := s.Get(t.Context(), jobstore.NewID(time.Now()))
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.False(t, errors.Is(err, jobstore.ErrInvalidInput), "a well-formed unknown ID is not invalid input")
}

func testGetCurrent(t *testing.T, s jobstore.Store) {
	j := submitKind(t, s, "k")
	c := claimID(t, s, "w1", j.ID)
	requireSameJob(t, c, get(t, s, j.ID))
	done := complete(t, s, c, jobstore.Succeeded(json.RawMessage(`"ok"`)))
	requireSameJob(t, done, get(t, s, j.ID))
}
