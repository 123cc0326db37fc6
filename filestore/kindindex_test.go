package filestore

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestListKindFilterReadsNoPayloads: a List filtered by a kind that no job
// has answers from the head of each record, so it never reads the
// payloads: records whose payload half is destroyed are not even noticed.
// A second List answers from the index, without opening the records.
func TestListKindFilterReadsNoPayloads(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, t.TempDir(), &Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	big := json.RawMessage(`"` + strings.Repeat("x", 64<<10) + `"`)
	var specs []jobstore.Spec
	for i := range 40 {
		// Keys that json.Marshal escapes to six bytes each make the
		// longest heads.
		specs = append(specs, jobstore.Spec{Kind: "other", Key: strings.Repeat("<", 256) + strconv.Itoa(i), Payload: big})
	}
	subs, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	want, _, err := s.Submit(ctx, jobstore.Spec{Kind: "wanted"})
	require.NoError(t, err)

	// Cut every other-kind record after its head: a full read would report
	// each as corrupt.
	for _, sub := range subs {
		p := s.recordPath(dirQueued, sub.Job.ID)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, data[:recordHead+100], 0o600))
	}
	for _, opts := range []jobstore.ListOptions{
		{Kind: "nomatch", Limit: 1},
		{Kind: "wanted", Limit: 1, Order: jobstore.OldestFirst},
		{Kind: "wanted"},
	} {
		page, err := s.List(ctx, opts)
		require.NoError(t, err)
		require.Empty(t, page.Errors, "%+v read a payload it did not need", opts)
		if opts.Kind == "wanted" {
			require.Len(t, page.Jobs, 1)
			require.Equal(t, want.ID, page.Jobs[0].ID)
		} else {
			require.Empty(t, page.Jobs)
		}
	}

	// Now the index knows every kind: with not even a head left to read,
	// the answer is the same.
	for _, sub := range subs {
		require.NoError(t, os.WriteFile(s.recordPath(dirQueued, sub.Job.ID), []byte("garbage"), 0o600))
	}
	page, err := s.List(ctx, jobstore.ListOptions{Kind: "nomatch"})
	require.NoError(t, err)
	require.Empty(t, page.Errors, "the index was not used")
	page, err = s.List(ctx, jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Errors, len(subs), "an unfiltered List reads the records and reports them")
	for _, sub := range subs {
		require.NoError(t, os.Remove(s.recordPath(dirQueued, sub.Job.ID)))
	}
	page, err = s.List(ctx, jobstore.ListOptions{Kind: "other"})
	require.NoError(t, err)
	require.Empty(t, page.Jobs, "a job gone from the directories is not listed from the index")
}

// TestKindIndexBounded: the index starts over when full rather than grow
// without bound, and still answers right.
func TestKindIndexBounded(t *testing.T) {
	var x kindIndex
	for i := range maxKindIndex + 10 {
		x.put(fmt.Sprintf("%026d", i), "k")
	}
	require.LessOrEqual(t, len(x.kinds), maxKindIndex)
	x.put("id", "kind")
	kind, ok := x.get("id")
	require.True(t, ok)
	require.Equal(t, "kind", kind)
}

// FuzzHeadKind: any head, damaged or hostile, never crashes headKind; the
// head of a real record gives its kind unless the key or a larger head is
// needed, and never another job's.
func FuzzHeadKind(f *testing.F) {
	for _, seed := range recordSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		kind, ok := headKind(data, fuzzID)
		if !ok {
			return
		}
		// Whatever it found was a string value named kind, after the ID.
		require.NoError(t, jobstore.ValidateKind(kind), "a head kind that is not a kind: %q", kind)
	})
}

// TestHeadKindOfRealRecords: the heads of records as the store writes
// them, with the longest keys, give their kind.
func TestHeadKindOfRealRecords(t *testing.T) {
	now := time.Now()
	for _, key := range []string{"", "k", strings.Repeat("<", jobstore.MaxKeyLen), strings.Repeat(`"`, jobstore.MaxKeyLen), strings.Repeat("é", jobstore.MaxKeyLen/2)} {
		j := jobstore.NewJob(jobstore.Spec{Kind: strings.Repeat("k", jobstore.MaxKindLen), Key: key, Payload: json.RawMessage(`{"a":1}`)}, now)
		data, err := encodeRecord(envelope{Format: FormatVersion, Rev: 7, Job: j})
		require.NoError(t, err)
		kind, ok := headKind(data[:min(len(data), recordHead)], j.ID)
		require.True(t, ok, "key %q", key)
		require.Equal(t, j.Kind, kind)
		_, ok = headKind(data[:min(len(data), recordHead)], fuzzID)
		require.False(t, ok, "the head of another job's record")
	}
}
