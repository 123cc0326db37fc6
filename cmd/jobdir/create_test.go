package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// openStoreChild is the child function "open-store": it prints "ready",
// and once a line comes on stdin opens the store in args[0] with
// filestore.Open, as a program using the library would, submits a job and
// prints "submitted <id>". The job is due in an hour, so that a work
// --exit-when-idle beside it does not wait for it.
func openStoreChild(args []string) int {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "stdin:", err)
		return 1
	}
	ctx := context.Background()
	st, err := filestore.Open(ctx, args[0], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer st.Close()
	j, _, err := st.Submit(ctx, jobstore.Spec{Kind: "created", RunAt: time.Now().Add(time.Hour)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "submit:", err)
		return 1
	}
	fmt.Println("submitted", j.ID)
	return 0
}

// gated returns cmd changed to wait for a line on its stdin before it
// runs, and the writer that lets it go: exec.Cmd.Start returns only once
// the child has started its program, so processes started one after the
// other begin a millisecond or more apart, and a gate opened for all of
// them at once makes them begin within microseconds.
func gated(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	g := exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$0" "$@"`}, cmd.Args...)...)
	g.Dir, g.Env = cmd.Dir, cmd.Env
	w, err := g.StdinPipe()
	require.NoError(t, err)
	return g, w
}

// TestE2EProcessesCreateOneStore: processes of every kind (submit, work,
// serve, list, and programs calling filestore.Open) that start at once on
// a directory with no store all succeed, whether the directory is missing
// or exists empty (a volume's mount point), and leave one sound store;
// list, which never creates a store, either lists it or says there is none
// yet. A directory of other files is still refused by every command, and
// left as it was.
//
// Each round starts six processes on a new directory, released at random
// moments within JOBDIR_CREATE_STAGGER (3ms) of each other, so that some
// start while another is creating the store; the default run makes three
// rounds, JOBDIR_LONG=1 forty (JOBDIR_CREATE_ROUNDS=n: n), and the test
// logs how many processes failed of how many. Where the check of the
// directory raced with another process's creation, one to three
// processes of 240 failed ("holds other files (FORMAT)").
func TestE2EProcessesCreateOneStore(t *testing.T) {
	rounds := 3
	if os.Getenv("JOBDIR_LONG") != "" {
		rounds = 40
	}
	if n, err := strconv.Atoi(os.Getenv("JOBDIR_CREATE_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	const token = "e2e-token-0123456789"
	stagger := 3 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("JOBDIR_CREATE_STAGGER")); err == nil {
		stagger = d
	}
	wd := t.TempDir()
	var failed []string
	procs, noStore := 0, 0
	for round := range rounds {
		dir := filepath.Join(t.TempDir(), "volume")
		if round%2 == 1 {
			// A volume's mount point: it exists, empty or with the
			// lost+found of a new file system.
			require.NoError(t, os.Mkdir(dir, 0o755))
			if round%4 == 1 {
				require.NoError(t, os.Mkdir(filepath.Join(dir, "lost+found"), 0o700))
			}
		}
		// The test binary starts slower than jobdir: its child waits at
		// the gate too, ready before the others start.
		child := testproc.Start(t, "open-store", &testproc.Options{Args: []string{dir}})
		require.Equal(t, "ready", child.Next(t))
		gates := []io.WriteCloser{child.Stdin()}
		startGated := func(cmd *exec.Cmd) *proc {
			g, w := gated(t, cmd)
			gates = append(gates, w)
			return start(t, g)
		}
		serve := jobdirCmd(dir, wd, "serve", "--addr", "127.0.0.1:0", "-q")
		serve.Env = append(os.Environ(), "JOBDIR_TOKEN="+token)
		ps := map[string]*proc{
			"submit 1": startGated(jobdirCmd(dir, wd, "submit", "--", "true")),
			"work":     startGated(jobdirCmd(dir, wd, "work", "--exit-when-idle", "-q")),
			"serve":    startGated(serve),
			"list":     startGated(jobdirCmd(dir, wd, "list")),
			"submit 2": startGated(jobdirCmd(dir, wd, "submit", "--", "true")),
		}
		// The first to start creates the store while the others start
		// within its first milliseconds, when the half-made store is
		// there to be seen.
		rand.Shuffle(len(gates), func(i, j int) { gates[i], gates[j] = gates[j], gates[i] })
		for _, w := range gates {
			_, err := io.WriteString(w, "\n")
			require.NoError(t, err)
			time.Sleep(time.Duration(rand.Int64N(int64(stagger))))
		}
		for _, w := range gates {
			_ = w.Close() // already closed if its process has exited
		}
		procs += len(ps) + 1
		fail := func(what, why string) {
			failed = append(failed, fmt.Sprintf("round %d, %s: %s", round, what, why))
		}
		// serve runs until it listens (or fails), then stops.
		deadline := time.Now().Add(liveness)
		p := ps["serve"]
		for !strings.Contains(p.out.String(), "listening on ") && !p.exited() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !p.exited() {
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) // sh has become jobdir
		}
		for what, p := range ps {
			code := p.wait(t)
			switch {
			case code == 0:
			case what == "list" && code == exitError && strings.HasPrefix(p.errb.String(), "jobdir: no store in "+dir+": the directory "):
				noStore++ // it looked before any other process began
			default:
				fail(what, fmt.Sprintf("exit %d: %s", code, p.errb.String()))
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), liveness)
		if err := child.Wait(ctx); err != nil {
			fail("filestore.Open", fmt.Sprintf("%v: %s", err, child.Output()))
		}
		cancel()
		if len(failed) == 0 {
			r := jdOK(t, dir, "fsck")
			require.Contains(t, r.stdout, ": 0 problems", "round %d", round)
		}
	}
	t.Logf("%d of %d processes failed in %d rounds (list found no store yet %d times)", len(failed), procs, rounds, noStore)
	require.Empty(t, failed)

	// The root of a new volume, which holds lost+found, becomes a store,
	// and each command then accepts it.
	volume := filepath.Join(t.TempDir(), "volume")
	require.NoError(t, os.MkdirAll(filepath.Join(volume, "lost+found"), 0o700))
	r := jd(t, volume, "list")
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, "no store in "+volume+": the directory is empty")
	submit(t, volume, "--", "true")
	jdOK(t, volume, "list")

	// A directory of other files is refused by each, all at once.
	other := filepath.Join(t.TempDir(), "other")
	require.NoError(t, os.Mkdir(other, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(other, "README"), []byte("mine\n"), 0o600))
	var ps []*proc
	for _, args := range [][]string{{"submit", "true"}, {"work", "--exit-when-idle"}, {"serve", "--addr", "127.0.0.1:0"}, {"list"}} {
		cmd := jobdirCmd(other, wd, args...)
		cmd.Env = append(os.Environ(), "JOBDIR_TOKEN="+token)
		ps = append(ps, start(t, cmd))
	}
	for _, p := range ps {
		require.Equal(t, exitError, p.wait(t), "%s", p.cmd)
		require.Contains(t, p.errb.String(), other+" is not a jobdir store: it holds other files (README) and no FORMAT file")
	}
	ents, err := os.ReadDir(other)
	require.NoError(t, err)
	require.Len(t, ents, 1, "the directory was left as it was")
}
