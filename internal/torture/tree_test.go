package torture

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jobdir/jobdir/jobstore"
)

// TestTreeSurvivorIsViolation shows that the tree checks bite: a process
// of attempt 1 that still holds its lock when attempt 2 starts, or after
// every worker stopped, is reported.
func TestTreeSurvivorIsViolation(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, makeRecordDirs(dir))
	j := jobstore.NewJob(jobstore.Spec{Kind: kindTree}, time.Now())
	j.Attempt = 2
	j.Payload, _ = json.Marshal(task{Class: classTree})

	// A survivor of attempt 1: a process holding the lock it inherited.
	lock, err := os.OpenFile(treeLock(dir, j.ID, 1), os.O_RDONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_SH))
	survivor := exec.Command("sleep", "60")
	survivor.ExtraFiles = []*os.File{lock}
	require.NoError(t, survivor.Start())
	lock.Close()
	t.Cleanup(func() { _ = survivor.Process.Kill(); _ = survivor.Wait() })

	rec := &recorder{dir: dir, name: "worker-test"}
	// The attempt runs no program here (no Exe): only its check matters.
	_, _ = handleTree(t.Context(), rec, childSpec{Exe: "/nonexistent"}, j)
	v := readViolations(t, dir)
	require.Len(t, v, 1)
	require.Contains(t, v[0], "attempt 2 started while a process of attempt 1 still ran")

	var r Report
	require.NoError(t, checkTrees(&r, dir, 0))
	require.Equal(t, 1, r.NViolations, "%v", r.Violations)
	require.Contains(t, r.Violations[0], "still runs after every worker stopped")

	// Once it is gone, both checks pass.
	require.NoError(t, survivor.Process.Kill())
	_ = survivor.Wait()
	r = Report{}
	require.NoError(t, checkTrees(&r, dir, 0))
	require.Zero(t, r.NViolations)
	require.Equal(t, 1, r.TreeAttempts)
}

func readViolations(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, violationDir))
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, violationDir, e.Name()))
		require.NoError(t, err)
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out
}
