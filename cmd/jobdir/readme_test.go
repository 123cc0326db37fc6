package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestREADMEQuickStartRunsVerbatim runs the README's quick start, as a
// newcomer pastes it, in an empty directory with the jobdir binary of this
// tree on PATH: every command must work as written (a placeholder ID, or a
// script that does not exist, would fail here).
func TestREADMEQuickStartRunsVerbatim(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker and waits for a job of 3 s")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash")
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## Quick start with the command\n\n```sh\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, m, "the README has a quick start")
	script := string(m[1])
	// The build line makes the binary this test already has.
	lines := strings.Split(script, "\n")
	require.True(t, strings.HasPrefix(lines[0], "go build"), lines[0])
	script = "set -e\n" + strings.Join(lines[1:], "\n")

	wd := t.TempDir()
	bin := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.Symlink(jobdirBin, filepath.Join(bin, "jobdir")))
	cmd := exec.CommandContext(t.Context(), bash, "-c", script)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "JOBDIR_DIR=", "JOBDIR_STORE=", "JOBDIR_TOKEN=")
	cmd.Stdin = strings.NewReader("")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "finished")
	require.FileExists(t, filepath.Join(wd, ".jobdir", "FORMAT"))
}
