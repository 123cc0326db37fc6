package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// metaTests check a job's tags and metadata (Spec.Tags, Spec.Meta): kept
// as given through every change, checked at submit, filtered on by List.
var metaTests = []test{
	{"KeptThroughEveryChange", testMetaKept},
	{"InBatches", testMetaInBatches},
	{"TagsKeptOnce", testMetaTagsOnce},
	{"Invalid", testMetaInvalid},
	{"ListByTag", testMetaListByTag},
	{"Copies", testMetaCopies},
}

var (
	someTags = []string{"nightly", "team=billing", "v1.2:rc/3_x-y"}
	someMeta = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "request.id": "ré-42 ✓", "empty": ""}
)

// requireMeta checks that j has someTags and someMeta.
func requireMeta(t *testing.T, j jobstore.Job, what string) {
	t.Helper()
	require.Equal(t, someTags, j.Tags, "%s: tags", what)
	require.Equal(t, someMeta, j.Meta, "%s: meta", what)
}

func testMetaKept(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	j := submit(t, s, jobstore.Spec{Kind: "k", Tags: someTags, Meta: someMeta, MaxAttempts: 2})
	requireMeta(t, j, "Submit")
	requireMeta(t, get(t, s, j.ID), "Get")
	again, created, err := s.Submit(ctx, jobstore.Spec{Kind: "other", Tags: []string{"other"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, []string{"other"}, again.Tags)
	require.Nil(t, again.Meta, "a job without meta has none")

	c := claim(t, s, "w", "k")
	require.Equal(t, j.ID, c.ID)
	requireMeta(t, c, "Claim")
	requireMeta(t, complete(t, s, c, jobstore.Outcome{Error: "once more"}), "Complete of a failed attempt")
	c = claimWhenDue(t, s, "w", "k")
	require.Equal(t, j.ID, c.ID)
	requireMeta(t, complete(t, s, c, jobstore.Outcome{Error: "for good"}), "Complete of the last attempt")
	r, err := s.Retry(ctx, j.ID)
	require.NoError(t, err)
	requireMeta(t, r, "Retry")
	x, err := s.Cancel(ctx, j.ID)
	require.NoError(t, err)
	requireMeta(t, x, "Cancel")
	requireMeta(t, get(t, s, j.ID), "Get after every change")
	wctx, cancel := context.WithTimeout(ctx, eventually)
	defer cancel()
	w, err := s.Wait(wctx, j.ID)
	require.NoError(t, err, "Wait of a canceled job")
	requireMeta(t, w, "Wait")

	// A rerun of the job carries them.
	rerun := submit(t, s, get(t, s, j.ID).RerunSpec())
	requireMeta(t, rerun, "a rerun's Submit")
}

func testMetaInBatches(t *testing.T, s jobstore.Store) {
	res, err := s.SubmitBatch(t.Context(), []jobstore.Spec{
		{Kind: "k", Tags: someTags, Meta: someMeta},
		{Kind: "k"},
		{Kind: "k", Key: "batch-meta", Tags: someTags, Meta: someMeta},
	})
	require.NoError(t, err)
	require.Len(t, res, 3)
	requireMeta(t, res[0].Job, "SubmitBatch")
	requireMeta(t, get(t, s, res[0].Job.ID), "Get of a batch's job")
	require.Nil(t, get(t, s, res[1].Job.ID).Tags)
	require.Nil(t, get(t, s, res[1].Job.ID).Meta)
	requireMeta(t, get(t, s, res[2].Job.ID), "Get of a batch's keyed job")
	bc, ok := s.(jobstore.BatchClaimer)
	if !ok {
		return
	}
	claimed, err := bc.ClaimBatch(t.Context(), jobstore.ClaimRequest{Worker: "w"}, 3)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	for _, c := range claimed {
		if c.ID != res[1].Job.ID {
			requireMeta(t, c, "ClaimBatch")
		}
	}
}

func testMetaTagsOnce(t *testing.T, s jobstore.Store) {
	// A tag given twice is kept once, in the order of first appearance;
	// so MaxTags distinct tags pass however often each is repeated.
	j := submit(t, s, jobstore.Spec{Kind: "k", Tags: []string{"b", "a", "b", "a", "c"}})
	require.Equal(t, []string{"b", "a", "c"}, j.Tags)
	require.Equal(t, []string{"b", "a", "c"}, get(t, s, j.ID).Tags)
	var tags []string
	for i := range jobstore.MaxTags {
		tags = append(tags, fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i))
	}
	require.Len(t, get(t, s, submit(t, s, jobstore.Spec{Kind: "k", Tags: tags}).ID).Tags, jobstore.MaxTags)
	// An empty map or list is none.
	e := submit(t, s, jobstore.Spec{Kind: "k", Tags: []string{}, Meta: map[string]string{}})
	require.Nil(t, e.Tags)
	require.Nil(t, e.Meta)
	require.Nil(t, get(t, s, e.ID).Tags)
	require.Nil(t, get(t, s, e.ID).Meta)
}

func testMetaInvalid(t *testing.T, s jobstore.Store) {
	tooMany := map[string]string{}
	for i := range jobstore.MaxMetaEntries + 1 {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	var manyTags []string
	for i := range jobstore.MaxTags + 1 {
		manyTags = append(manyTags, fmt.Sprintf("t%d", i))
	}
	cases := map[string]jobstore.Spec{
		"empty tag":            {Kind: "k", Tags: []string{"a", ""}},
		"tag with space":       {Kind: "k", Tags: []string{"a b"}},
		"tag too long":         {Kind: "k", Tags: []string{strings.Repeat("t", jobstore.MaxTagLen+1)}},
		"too many tags":        {Kind: "k", Tags: manyTags},
		"empty meta key":       {Kind: "k", Meta: map[string]string{"": "v"}},
		"meta key with space":  {Kind: "k", Meta: map[string]string{"a b": "v"}},
		"meta key too long":    {Kind: "k", Meta: map[string]string{strings.Repeat("m", jobstore.MaxMetaKeyLen+1): "v"}},
		"meta value too long":  {Kind: "k", Meta: map[string]string{"m": strings.Repeat("v", jobstore.MaxMetaValueLen+1)}},
		"meta value with NUL":  {Kind: "k", Meta: map[string]string{"m": "a\x00b"}},
		"meta value newline":   {Kind: "k", Meta: map[string]string{"m": "a\nb"}},
		"meta value not UTF-8": {Kind: "k", Meta: map[string]string{"m": "\xff"}},
		"too many meta":        {Kind: "k", Meta: tooMany},
	}
	for name, spec := range cases {
		j, created, err := s.Submit(t.Context(), spec)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "%s: Submit accepted it", name)
		require.False(t, created, name)
		require.Empty(t, j.ID, name)
		_, err = s.SubmitBatch(t.Context(), []jobstore.Spec{{Kind: "k"}, spec})
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "%s: SubmitBatch accepted it", name)
	}
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	for state, n := range st.Counts {
		require.Zero(t, n, "an invalid spec left a %s job", state)
	}
	_, err = s.List(t.Context(), jobstore.ListOptions{Tag: "a b"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput, "List by a tag that cannot be")

	// The largest are accepted.
	most := map[string]string{}
	for i := range jobstore.MaxMetaEntries - 1 {
		most[fmt.Sprintf("k%d", i)] = strings.Repeat("é", jobstore.MaxMetaValueLen/2)
	}
	most[strings.Repeat("m", jobstore.MaxMetaKeyLen)] = "v"
	j := submit(t, s, jobstore.Spec{Kind: "k", Meta: most, Tags: manyTags[:jobstore.MaxTags]})
	require.Equal(t, most, get(t, s, j.ID).Meta)
	require.Equal(t, manyTags[:jobstore.MaxTags], get(t, s, j.ID).Tags)
}

func testMetaListByTag(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	var nightly, both []string
	for i := range 12 {
		tags := []string{"nightly"}
		if i%3 == 0 {
			tags = append(tags, "team=billing")
		}
		if i%4 == 0 {
			tags = nil
		}
		j := submit(t, s, jobstore.Spec{Kind: fmt.Sprintf("k%d", i%2), Tags: tags})
		if tags != nil {
			nightly = append(nightly, j.ID)
			if len(tags) == 2 {
				both = append(both, j.ID)
			}
		}
	}
	require.Equal(t, nightly, pageAll(t, s, jobstore.ListOptions{Tag: "nightly", Limit: 2, Order: jobstore.OldestFirst}))
	require.Equal(t, both, pageAll(t, s, jobstore.ListOptions{Tag: "team=billing", Limit: 5, Order: jobstore.OldestFirst}))
	require.Empty(t, pageAll(t, s, jobstore.ListOptions{Tag: "team", Limit: 5}), "a tag matches whole")

	// With other filters: the tagged jobs of one kind, and of one state.
	var k1 []string
	for _, id := range nightly {
		if get(t, s, id).Kind == "k1" {
			k1 = append(k1, id)
		}
	}
	require.Equal(t, k1, pageAll(t, s, jobstore.ListOptions{Tag: "nightly", Kind: "k1", Limit: 3, Order: jobstore.OldestFirst}))
	fin := submit(t, s, jobstore.Spec{Kind: "fin", Tags: []string{"team=billing"}})
	complete(t, s, claim(t, s, "w", "fin"), jobstore.Succeeded(nil))
	p, err := s.List(ctx, jobstore.ListOptions{Tag: "team=billing", States: []jobstore.State{jobstore.StateSucceeded}})
	require.NoError(t, err)
	require.Equal(t, []string{fin.ID}, ids(p.Jobs))
}

func testMetaCopies(t *testing.T, s jobstore.Store) {
	meta := map[string]string{"a": "1"}
	tags := []string{"x", "y"}
	j := submit(t, s, jobstore.Spec{Kind: "k", Meta: meta, Tags: tags})
	meta["a"], meta["b"] = "2", "3"
	tags[0] = "z"
	j.Meta["a"], j.Tags[1] = "4", "w"
	got := get(t, s, j.ID)
	require.Equal(t, map[string]string{"a": "1"}, got.Meta, "the store aliases a spec's or a returned job's meta")
	require.Equal(t, []string{"x", "y"}, got.Tags, "the store aliases a spec's or a returned job's tags")
	got.Meta["c"] = "5"
	require.Equal(t, map[string]string{"a": "1"}, get(t, s, j.ID).Meta)
	raw, err := json.Marshal(get(t, s, j.ID))
	require.NoError(t, err)
	require.Contains(t, string(raw), `"tags":["x","y"],"meta":{"a":"1"}`)
}
