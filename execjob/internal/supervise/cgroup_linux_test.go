package supervise

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSweepCgroups: the empty cgroups of workers that are gone are
// removed; those of live workers, and foreign ones, are left alone.
func TestSweepCgroups(t *testing.T) {
	dir, err := CgroupDir()
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	dead := filepath.Join(dir, "jobdir-01ARZ3NDEKTSV4RRFFQ69G5FAV-1-2147483646-0badf00d")
	live := filepath.Join(dir, "jobdir-01ARZ3NDEKTSV4RRFFQ69G5FAV-2-"+itoa(os.Getpid())+"-0badf00d")
	for _, d := range []string{dead, live} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	t.Cleanup(func() {
		_ = os.Remove(dead)
		_ = os.Remove(live)
	})
	sweepCgroups(dir)
	require.NoDirExists(t, dead)
	require.DirExists(t, live)
}

func itoa(n int) string { return strconv.Itoa(n) }
