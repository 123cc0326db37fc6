package main

import (
	"os"
	"strings"
	"testing"

	"github.com/jobdir/jobdir/internal/torture"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary serve as the command's children.
func TestMain(m *testing.M) {
	if torture.IsChild() {
		os.Exit(torture.ChildMain(torture.BackendFromEnv()))
	}
	os.Exit(m.Run())
}

func TestRunLinearizability(t *testing.T) {
	var out, errOut strings.Builder
	err := run(t.Context(), []string{"-lin", "-processes", "2", "-ops", "40", "-dir", t.TempDir()}, &out, &errOut)
	require.NoError(t, err, "stderr: %s", errOut.String())
	require.Contains(t, out.String(), "from 2 processes: Ok")
}

func TestRunShortTortureWithoutChaos(t *testing.T) {
	var out, errOut strings.Builder
	err := run(t.Context(), []string{"-duration", "2s", "-chaos", "-1s", "-workers", "1", "-submitters", "1",
		"-dir", t.TempDir()}, &out, &errOut)
	require.NoError(t, err, "stdout: %s\nstderr: %s", out.String(), errOut.String())
	require.Contains(t, out.String(), "violations:            0")
	require.Contains(t, out.String(), "fsck:                  clean")
}

func TestRunBadFlag(t *testing.T) {
	var out, errOut strings.Builder
	err := run(t.Context(), []string{"-no-such-flag"}, &out, &errOut)
	require.Error(t, err)
	require.Contains(t, errOut.String(), "-duration")
}
