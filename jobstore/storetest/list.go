package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

var listTests = []test{
	{"Empty", testListEmpty},
	{"Filters", testListFilters},
	{"PaginationNewestFirst", func(t *testing.T, s jobstore.Store) { testListPagination(t, s, jobstore.NewestFirst) }},
	{"PaginationOldestFirst", func(t *testing.T, s jobstore.Store) { testListPagination(t, s, jobstore.OldestFirst) }},
	{"PaginationWithFilter", testListPaginationFilter},
	{"Limits", testListLimits},
	{"ByteBudget", testListByteBudget},
}

func testListEmpty(t *testing.T, s jobstore.Store) {
	p, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Jobs)
	require.Empty(t, p.Next)
}

func ids(jobs []jobstore.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func testListFilters(t *testing.T, s jobstore.Store) {
	ctx := t.Context()
	byState := jobsInEveryState(t, s, func(jobstore.State) string { return "" })
	extra := submitKind(t, s, "state.succeeded") // queued, but of the succeeded job's kind

	list := func(opts jobstore.ListOptions) []string {
		t.Helper()
		p, err := s.List(ctx, opts)
		require.NoError(t, err)
		require.Empty(t, p.Next)
		for _, j := range p.Jobs {
			require.True(t, j.MatchesList(opts), "List returned %s job of kind %s for %+v", j.State, j.Kind, opts)
		}
		return ids(p.Jobs)
	}

	all := list(jobstore.ListOptions{})
	require.Len(t, all, len(jobstore.States())+1)
	require.Equal(t, extra.ID, all[0], "newest first by default")

	for _, st := range jobstore.States() {
		want := []string{byState[st].ID}
		if st == jobstore.StateQueued {
			want = []string{extra.ID, byState[st].ID}
		}
		require.Equal(t, want, list(jobstore.ListOptions{States: []jobstore.State{st}}), "state %s", st)
	}
	require.ElementsMatch(t,
		[]string{byState[jobstore.StateFailed].ID, byState[jobstore.StateCanceled].ID},
		list(jobstore.ListOptions{States: []jobstore.State{jobstore.StateFailed, jobstore.StateCanceled}}))

	require.Equal(t, []string{extra.ID, byState[jobstore.StateSucceeded].ID},
		list(jobstore.ListOptions{Kind: "state.succeeded"}))
	require.Equal(t, []string{byState[jobstore.StateSucceeded].ID},
		list(jobstore.ListOptions{Kind: "state.succeeded", States: []jobstore.State{jobstore.StateSucceeded}}))
	require.Empty(t, list(jobstore.ListOptions{Kind: "no.such.kind"}))
}

// pageAll lists every page of opts with the given page size and returns the
// IDs in the order received, checking each page on the way.
func pageAll(t *testing.T, s jobstore.Store, opts jobstore.ListOptions) []string {
	t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "List pagination does not end")
		p, err := s.List(t.Context(), opts)
		require.NoError(t, err)
		require.LessOrEqual(t, len(p.Jobs), opts.Limit, "page larger than the limit")
		got = append(got, ids(p.Jobs)...)
		if p.Next == "" {
			return got
		}
		require.Len(t, p.Jobs, opts.Limit, "a page before the last one is short")
		require.NotEqual(t, opts.Cursor, p.Next, "cursor did not advance")
		opts.Cursor = p.Next
	}
}

func testListPagination(t *testing.T, s jobstore.Store, order jobstore.Order) {
	var want []string
	for i := range 23 {
		want = append(want, submit(t, s, jobstore.Spec{Kind: fmt.Sprintf("k%d", i%3)}).ID)
	}
	if order == jobstore.NewestFirst {
		slices.Reverse(want)
	}
	for _, size := range []int{1, 5, 7, 22, 23, 24} {
		got := pageAll(t, s, jobstore.ListOptions{Limit: size, Order: order})
		require.Equal(t, want, got, "pages of %d: duplicates, gaps or wrong order", size)
	}
}

func testListPaginationFilter(t *testing.T, s jobstore.Store) {
	var want []string
	for i := range 20 {
		j := submit(t, s, jobstore.Spec{Kind: fmt.Sprintf("k%d", i%2)})
		if i%2 == 1 {
			want = append(want, j.ID)
		}
	}
	got := pageAll(t, s, jobstore.ListOptions{Kind: "k1", Limit: 3, Order: jobstore.OldestFirst})
	require.Equal(t, want, got)

	// Jobs submitted after a page was read appear on the following pages of
	// an oldest-first listing, never on earlier ones.
	p, err := s.List(t.Context(), jobstore.ListOptions{Limit: 4, Order: jobstore.OldestFirst})
	require.NoError(t, err)
	late := submitKind(t, s, "k0")
	rest := pageAll(t, s, jobstore.ListOptions{Limit: 4, Order: jobstore.OldestFirst, Cursor: p.Next})
	require.Equal(t, late.ID, rest[len(rest)-1])
}

func testListLimits(t *testing.T, s jobstore.Store) {
	n := jobstore.DefaultListLimit + 5
	for range n {
		submitKind(t, s, "k")
	}
	p, err := s.List(t.Context(), jobstore.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, jobstore.DefaultListLimit, "a zero Limit means DefaultListLimit")
	require.NotEmpty(t, p.Next)

	p, err = s.List(t.Context(), jobstore.ListOptions{Limit: jobstore.MaxListLimit * 10})
	require.NoError(t, err, "a Limit over MaxListLimit is capped, not refused")
	require.Len(t, p.Jobs, n)
	require.Empty(t, p.Next, "the last page has no cursor")

	p, err = s.List(t.Context(), jobstore.ListOptions{Limit: n})
	require.NoError(t, err)
	require.Len(t, p.Jobs, n)
	require.Empty(t, p.Next, "a page that ends exactly at the last job has no cursor")
}

// testListByteBudget: MaxBytes cuts a page before the job that would bring
// it over the budget, says so, and the cursor continues without gaps; a
// job larger than the budget still comes alone on its page.
func testListByteBudget(t *testing.T, s jobstore.Store) {
	payload := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("p", n-2) + `"`) }
	var want []string
	for i := range 7 {
		spec := jobstore.Spec{Kind: fmt.Sprintf("b%d", i%2), Payload: payload(10_000)}
		if i == 3 {
			spec.Payload = payload(60_000) // over the budget on its own
		}
		want = append(want, submit(t, s, spec).ID)
	}
	opts := jobstore.ListOptions{Limit: 100, MaxBytes: 25_000, Order: jobstore.OldestFirst}
	var got []string
	var pages [][]string
	for {
		require.Less(t, len(pages), 20, "List pagination does not end")
		p, err := s.List(t.Context(), opts)
		require.NoError(t, err)
		require.NotEmpty(t, p.Jobs, "a page is never empty while jobs remain")
		size := 0
		for _, j := range p.Jobs {
			size += j.Size()
		}
		if len(p.Jobs) > 1 {
			require.LessOrEqual(t, size, opts.MaxBytes, "a page of several jobs over the budget")
		}
		pages = append(pages, ids(p.Jobs))
		got = append(got, ids(p.Jobs)...)
		if p.Next == "" {
			require.False(t, p.ByteLimited, "the last page is not cut")
			break
		}
		require.True(t, p.ByteLimited, "a page of fewer than Limit jobs with a cursor must say the budget cut it")
		require.Equal(t, p.Jobs[len(p.Jobs)-1].ID, p.Next)
		opts.Cursor = p.Next
	}
	require.Equal(t, want, got, "pages cut by bytes: duplicates, gaps or wrong order")
	require.Equal(t, [][]string{want[0:2], want[2:3], want[3:4], want[4:6], want[6:7]}, pages)

	// With a filter, the budget counts only the jobs on the page.
	p, err := s.List(t.Context(), jobstore.ListOptions{Kind: "b0", MaxBytes: 25_000, Order: jobstore.OldestFirst})
	require.NoError(t, err)
	require.Equal(t, []string{want[0], want[2]}, ids(p.Jobs))
	require.True(t, p.ByteLimited)

	// Without MaxBytes, only Limit cuts.
	p, err = s.List(t.Context(), jobstore.ListOptions{Order: jobstore.OldestFirst})
	require.NoError(t, err)
	require.Equal(t, want, ids(p.Jobs))
	require.False(t, p.ByteLimited)
}
