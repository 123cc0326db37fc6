package jobstore_test

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

func TestStates(t *testing.T) {
	require.Equal(t, []jobstore.State{"waiting", "queued", "running", "succeeded", "failed", "canceled"}, jobstore.States())
	for _, s := range jobstore.States() {
		require.True(t, s.Valid(), s)
	}
	for _, s := range []jobstore.State{"", "Queued", "done", "pending", "queued "} {
		require.False(t, s.Valid(), "%q", s)
	}
}

func TestTerminal(t *testing.T) {
	tests := map[jobstore.State]bool{
		jobstore.StateQueued:    false,
		jobstore.StateRunning:   false,
		jobstore.StateSucceeded: true,
		jobstore.StateFailed:    true,
		jobstore.StateCanceled:  true,
		"bogus":                 false,
	}
	for s, want := range tests {
		require.Equal(t, want, s.Terminal(), s)
	}
}

func TestParseState(t *testing.T) {
	for _, s := range jobstore.States() {
		got, err := jobstore.ParseState(string(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	for _, in := range []string{"", "QUEUED", "done", "running\n", "cancelled"} {
		_, err := jobstore.ParseState(in)
		require.ErrorIs(t, err, jobstore.ErrInvalidInput, "%q", in)
	}
}

// legal is the state machine written out by hand, independently of the
// package's table.
var legal = map[[2]jobstore.State]bool{
	{jobstore.StateWaiting, jobstore.StateQueued}:    true,
	{jobstore.StateWaiting, jobstore.StateCanceled}:  true,
	{jobstore.StateFailed, jobstore.StateWaiting}:    true,
	{jobstore.StateCanceled, jobstore.StateWaiting}:  true,
	{jobstore.StateQueued, jobstore.StateRunning}:    true,
	{jobstore.StateQueued, jobstore.StateCanceled}:   true,
	{jobstore.StateRunning, jobstore.StateSucceeded}: true,
	{jobstore.StateRunning, jobstore.StateQueued}:    true,
	{jobstore.StateRunning, jobstore.StateFailed}:    true,
	{jobstore.StateRunning, jobstore.StateCanceled}:  true,
	{jobstore.StateFailed, jobstore.StateQueued}:     true,
	{jobstore.StateCanceled, jobstore.StateQueued}:   true,
}

func TestCanTransition(t *testing.T) {
	all := append(jobstore.States(), "bogus")
	for _, from := range all {
		for _, to := range all {
			require.Equal(t, legal[[2]jobstore.State{from, to}], jobstore.CanTransition(from, to), "%s -> %s", from, to)
		}
	}
	// Terminal states lead nowhere except back to queued (or waiting) by
	// Retry.
	for _, from := range jobstore.States() {
		if !from.Terminal() {
			continue
		}
		for _, to := range jobstore.States() {
			if jobstore.CanTransition(from, to) {
				require.Contains(t, []jobstore.State{jobstore.StateQueued, jobstore.StateWaiting}, to, "%s -> %s", from, to)
				require.NotEqual(t, jobstore.StateSucceeded, from, "a succeeded job is final")
			}
		}
	}
}

func TestTransitions(t *testing.T) {
	got := jobstore.Transitions()
	require.Len(t, got, len(legal))
	seen := map[[2]jobstore.State]bool{}
	for _, tr := range got {
		pair := [2]jobstore.State{tr.From, tr.To}
		require.True(t, legal[pair], "%s -> %s", tr.From, tr.To)
		require.False(t, seen[pair], "%s -> %s listed twice", tr.From, tr.To)
		seen[pair] = true
		require.NotEmpty(t, tr.By)
	}
	// The result is a copy.
	got[0].From = "bogus"
	require.Equal(t, jobstore.StateWaiting, jobstore.Transitions()[0].From)
}

func TestCheckTransition(t *testing.T) {
	require.NoError(t, jobstore.CheckTransition("id", jobstore.StateQueued, jobstore.StateRunning))

	err := jobstore.CheckTransition("01ARZ3NDEKTSV4RRFFQ69G5FAV", jobstore.StateSucceeded, jobstore.StateQueued)
	require.ErrorIs(t, err, jobstore.ErrInvalidTransition)
	var te *jobstore.TransitionError
	require.True(t, errors.As(err, &te))
	require.Equal(t, jobstore.TransitionError{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", From: jobstore.StateSucceeded, To: jobstore.StateQueued}, *te)
	require.Equal(t, "job 01ARZ3NDEKTSV4RRFFQ69G5FAV: cannot move from succeeded to queued", err.Error())
}

// TestTransitionsMatchDocs keeps docs/state-machine.md's transition table
// and Transitions() in step.
func TestTransitionsMatchDocs(t *testing.T) {
	f, err := os.Open("../docs/state-machine.md")
	require.NoError(t, err)
	defer f.Close()

	var rows []jobstore.Transition
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "<!-- transitions:begin -->":
			in = true
			continue
		case line == "<!-- transitions:end -->":
			in = false
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 3, "table row %q", line)
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		if cells[0] == "From" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, jobstore.Transition{From: jobstore.State(cells[0]), To: jobstore.State(cells[1]), By: cells[2]})
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, rows, "no transition table between the markers in docs/state-machine.md")
	require.ElementsMatch(t, jobstore.Transitions(), rows, "docs/state-machine.md's table differs from jobstore.Transitions()")
}
