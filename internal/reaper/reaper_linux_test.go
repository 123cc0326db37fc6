package reaper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// zombies returns this process's children that are zombies, and how many
// children it has.
func zombies(t *testing.T) (z []int, children int) {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	require.NoError(t, err)
	if len(tasks) == 0 {
		t.Skip("this kernel has no /proc/<pid>/task/<tid>/children")
	}
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			children++
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if s := string(st); err == nil && strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z") {
				z = append(z, pid)
			}
		}
	}
	return z, children
}

// TestReapLeavesOwnChildrenTheirStatus: with this process a child
// subreaper, which the kernel hands orphans to as it does to PID 1, Reap
// reaps every orphan, while each child that StartChild started, and that
// exits at once, is still waited for by its own cmd.Wait, with its exit
// status. A reaper that waited for any child would take some of those.
func TestReapLeavesOwnChildrenTheirStatus(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	stop := Reap()
	defer stop()

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			// Exits at once, leaving an orphan that exits a moment later.
			cmd := exec.Command("sh", "-c", fmt.Sprintf("sleep 0.05 & exit %d", i%7))
			if err := StartChild(cmd); err != nil {
				errs <- err
				return
			}
			err := cmd.Wait()
			ChildDone(cmd.Process.Pid)
			var ee *exec.ExitError
			switch {
			case err == nil && i%7 == 0:
			case errors.As(err, &ee) && ee.ExitCode() == i%7:
			default:
				errs <- fmt.Errorf("child %d: want exit status %d, got %v", i, i%7, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		z, children := zombies(t)
		if children == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "zombies left unreaped: %v", z)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReapStops: after stop, children are left alone.
func TestReapStops(t *testing.T) {
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	stop := Reap()
	stop()
	stop() // a second call does nothing

	cmd := exec.Command("sh", "-c", "exit 0")
	require.NoError(t, StartChild(cmd))
	require.NoError(t, cmd.Wait())
	ChildDone(cmd.Process.Pid)
	orphan := exec.Command("true")
	require.NoError(t, orphan.Start())
	// Not reaped by anyone but the test: the reaper is gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		z, _ := zombies(t)
		if slices.Contains(z, orphan.Process.Pid) {
			break
		}
		require.True(t, time.Now().Before(deadline), "zombies: %v", z)
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, orphan.Wait())
}
