//go:build linux

package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/crashfs"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// The power-cut test: each operation of the store runs in a child process
// on a crashfs mount, a FUSE file system that loses at a power cut every
// write and every directory entry not made durable by an fsync of the file
// or of its directory (internal/crashfs). The machine is cut at every
// operation of the file system in turn; then the durable image is copied
// to the real disk, the store is opened there, and everything the child
// acknowledged before the cut must be there, the store must open clean,
// and no key may be blocked.
//
// By default a scenario with many cut points is cut at a sample of them
// (the first, the last, and evenly between); JOBDIR_POWERCUT=full cuts at
// every one.

// powercutEnv, set to "full", makes TestPowerCut cut at every operation.
const powercutEnv = "JOBDIR_POWERCUT"

// powercutSample is how many cut points a scenario gets by default.
const powercutSample = 10

// pcAck is how a child acknowledges what the store told it: name, then
// the value as JSON.
type pcAck func(name string, v any)

// pcScenario is one operation of the store run on a crashfs and cut.
type pcScenario struct {
	name string
	// openInStep: the step begins with Open, of a directory with no store
	// (create) or of the image of from; otherwise the child opens the
	// store (made by powercutBase) before pre.
	openInStep bool
	// create: the file system holds no store at the start.
	create bool
	// from names the scenario whose run leaves the store this one starts
	// from, its child dead: uncut, with everything it held made durable,
	// or with fromCut > 0 cut after that many operations of its step. Its
	// acknowledgements count as this one's.
	from    string
	fromCut int
	// syncFS opens the store with Options.SyncFS.
	syncFS bool
	// journal journals the step's submits (on crashfs, where no syncfs
	// reaches the disk, only with the seam journalAlways), with a journal
	// taken by pre.
	journal bool
	// pre runs before the step, uncut (though what it acknowledged must
	// survive the cut too).
	pre func(ctx context.Context, s *Store, ack pcAck) error
	// step is what is cut.
	step func(ctx context.Context, s *Store, ack pcAck) error
	// keys are the keys the scenario submits, each checked not blocked.
	keys []string
	// check says what must hold in the reopened store, given the acks.
	check func(c *pcCheck)
}

const pcKind = "powercut"

func pcSubmit(ctx context.Context, s *Store, ack pcAck, name string, spec jobstore.Spec) (jobstore.Job, error) {
	j, _, err := s.Submit(ctx, spec)
	if err == nil {
		pcLast = j
		ack(name, j)
	}
	return j, err
}

// pcClaim claims a job and acknowledges it once the claim is durable (a
// moment after Claim returns, see claimFlush): from then on a power cut
// counts its attempt.
func pcClaim(ctx context.Context, s *Store, ack pcAck, name string) (jobstore.Job, error) {
	j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "powercut", Kinds: []string{pcKind}})
	if err == nil {
		err = s.waitClaimsDurable(ctx)
	}
	if err == nil {
		pcLast = j
		ack(name, j)
	}
	return j, err
}

// pcBatch submits n specs, every fourth keyed.
func pcBatch(ctx context.Context, s *Store, ack pcAck, n int) error {
	var specs []jobstore.Spec
	for i := range n {
		spec := jobstore.Spec{Kind: pcKind, Payload: json.RawMessage(strconv.Itoa(i))}
		if i%4 == 0 {
			spec.Key = fmt.Sprintf("b%d", i)
		}
		specs = append(specs, spec)
	}
	out, err := s.SubmitBatch(ctx, specs)
	if err != nil {
		return err
	}
	for i, r := range out {
		ack(fmt.Sprintf("batch-%d", i), r.Job)
	}
	return nil
}

func pcBatchKeys(n int) []string {
	var keys []string
	for i := 0; i < n; i += 4 {
		keys = append(keys, fmt.Sprintf("b%d", i))
	}
	return keys
}

// checkBatch: every job the batch acknowledged is queued, under its key.
func checkBatch(n int) func(c *pcCheck) {
	return func(c *pcCheck) {
		for i := range n {
			j, ok := c.acked(fmt.Sprintf("batch-%d", i))
			if !ok {
				continue
			}
			c.has(j, "batch job", jobstore.StateQueued)
			if j.Key != "" {
				c.keyNames(j.Key, j.ID)
			}
		}
	}
}

var powercutScenarios = []pcScenario{
	{
		name:       "create",
		create:     true,
		openInStep: true,
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			_, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, Key: "k"})
			return err
		},
		keys: []string{"k"},
		check: func(c *pcCheck) {
			if _, ok := c.acked("open"); ok && c.img.Lookup("store/"+formatFile) == nil {
				c.violate("Open of a new store returned, but the store's FORMAT file is lost")
			}
			if j, ok := c.acked("submitted"); ok {
				c.has(j, "first job of a new store", jobstore.StateQueued)
				c.keyNames("k", j.ID)
			}
		},
	},
	{
		name: "submit",
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			_, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, Payload: json.RawMessage(`{"n":1}`)})
			return err
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("submitted"); ok {
				c.has(j, "submitted job", jobstore.StateQueued)
			}
		},
	},
	{
		name: "submit-key",
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			spec := jobstore.Spec{Kind: pcKind, Key: "k"}
			if _, err := pcSubmit(ctx, s, ack, "submitted", spec); err != nil {
				return err
			}
			_, err := pcSubmit(ctx, s, ack, "resubmitted", spec)
			return err
		},
		keys: []string{"k"},
		check: func(c *pcCheck) {
			if j, ok := c.acked("submitted"); ok {
				c.has(j, "job submitted with a key", jobstore.StateQueued)
				c.keyNames("k", j.ID)
			}
		},
	},
	{
		name:   "submit-syncfs",
		syncFS: true,
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			_, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, Key: "k"})
			return err
		},
		keys: []string{"k"},
		check: func(c *pcCheck) {
			if j, ok := c.acked("submitted"); ok {
				c.has(j, "job submitted with Options.SyncFS", jobstore.StateQueued)
				c.keyNames("k", j.ID)
			}
		},
	},
	{
		name:    "submit-journal",
		journal: true,
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			for i := range 3 {
				if _, err := pcSubmit(ctx, s, ack, fmt.Sprintf("journaled-%d", i), jobstore.Spec{Kind: pcKind, Payload: json.RawMessage(strconv.Itoa(i))}); err != nil {
					return err
				}
			}
			return nil
		},
		check: func(c *pcCheck) {
			for i := range 3 {
				if j, ok := c.acked(fmt.Sprintf("journaled-%d", i)); ok {
					c.has(j, "job submitted through the journal", jobstore.StateQueued)
				}
			}
		},
	},
	{
		name:    "batch-journal",
		journal: true,
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			specs := make([]jobstore.Spec, 6)
			for i := range specs {
				specs[i] = jobstore.Spec{Kind: pcKind, Payload: json.RawMessage(strconv.Itoa(i))}
			}
			out, err := s.SubmitBatch(ctx, specs)
			if err != nil {
				return err
			}
			for i, r := range out {
				ack(fmt.Sprintf("batch-%d", i), r.Job)
			}
			return nil
		},
		check: func(c *pcCheck) {
			for i := range 6 {
				if j, ok := c.acked(fmt.Sprintf("batch-%d", i)); ok {
					c.has(j, "job of a batch submitted through the journal", jobstore.StateQueued)
				}
			}
		},
	},
	{
		name:  "batch-4",
		step:  func(ctx context.Context, s *Store, ack pcAck) error { return pcBatch(ctx, s, ack, 4) },
		keys:  pcBatchKeys(4),
		check: checkBatch(4),
	},
	{
		name:  "batch-32",
		step:  func(ctx context.Context, s *Store, ack pcAck) error { return pcBatch(ctx, s, ack, syncFSBatch) },
		keys:  pcBatchKeys(syncFSBatch),
		check: checkBatch(syncFSBatch),
	},
	{
		name: "claim",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			_, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, MaxAttempts: 3})
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			_, err := pcClaim(ctx, s, ack, "claimed")
			return err
		},
		check: func(c *pcCheck) {
			j, _ := c.acked("submitted")
			if cl, ok := c.acked("claimed"); ok {
				// The worker died with the machine: its attempt counts.
				c.has(cl, "claimed job whose worker died in the cut", jobstore.StateQueued)
				return
			}
			c.has(j, "submitted job", jobstore.StateQueued)
		},
	},
	{
		name: "complete",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			if _, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, MaxAttempts: 3}); err != nil {
				return err
			}
			_, err := pcClaim(ctx, s, ack, "claimed")
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			j, err := s.Complete(ctx, pcLease(s), jobstore.Succeeded(json.RawMessage(`"ok"`)))
			if err == nil {
				ack("completed", j)
			}
			return err
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("completed"); ok {
				c.has(j, "succeeded job", jobstore.StateSucceeded)
				return
			}
			j, _ := c.acked("claimed")
			c.has(j, "claimed job whose worker died in the cut", jobstore.StateQueued, jobstore.StateSucceeded)
		},
	},
	{
		name: "complete-retry",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			if _, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, MaxAttempts: 3}); err != nil {
				return err
			}
			_, err := pcClaim(ctx, s, ack, "claimed")
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			j, err := s.Complete(ctx, pcLease(s), jobstore.Failed(errors.New("boom")))
			if err == nil {
				ack("failed", j)
			}
			return err
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("failed"); ok {
				if got := c.has(j, "failed attempt queued for a retry", jobstore.StateQueued); got != nil && got.LastError != "boom" {
					c.violate("failed attempt queued for a retry: its error %q is lost (last error %q)", "boom", got.LastError)
				}
				return
			}
			j, _ := c.acked("claimed")
			c.has(j, "claimed job whose worker died in the cut", jobstore.StateQueued)
		},
	},
	{
		name: "release",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			if _, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, MaxAttempts: 3}); err != nil {
				return err
			}
			_, err := pcClaim(ctx, s, ack, "claimed")
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			if err := s.Release(ctx, pcLease(s)); err != nil {
				return err
			}
			ack("released", pcLast)
			return nil
		},
		check: func(c *pcCheck) {
			// Released or not, the attempt was claimed and counts.
			j, _ := c.acked("claimed")
			c.has(j, "claimed job given back (or whose worker died in the cut)", jobstore.StateQueued)
		},
	},
	{
		name: "cancel-queued",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			_, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind})
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			j, err := s.Cancel(ctx, pcOnlyID(s))
			if err == nil {
				ack("canceled", j)
			}
			return err
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("canceled"); ok {
				c.has(j, "canceled job", jobstore.StateCanceled)
				return
			}
			j, _ := c.acked("submitted")
			c.has(j, "submitted job", jobstore.StateQueued, jobstore.StateCanceled)
		},
	},
	{
		name: "cancel-running",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			if _, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, MaxAttempts: 3}); err != nil {
				return err
			}
			_, err := pcClaim(ctx, s, ack, "claimed")
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			j, err := s.Cancel(ctx, pcOnlyID(s))
			if err == nil {
				ack("cancel-requested", j)
			}
			return err
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("cancel-requested"); ok {
				// Its worker died with the machine: the cancel it was asked
				// for is what recovery makes of it.
				c.has(j, "running job whose cancel was requested", jobstore.StateCanceled)
				return
			}
			j, _ := c.acked("claimed")
			c.has(j, "claimed job whose worker died in the cut", jobstore.StateQueued, jobstore.StateCanceled)
		},
	},
	{
		name: "retry",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			if _, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, MaxAttempts: 1}); err != nil {
				return err
			}
			if _, err := pcClaim(ctx, s, ack, "claimed"); err != nil {
				return err
			}
			j, err := s.Complete(ctx, pcLease(s), jobstore.Failed(errors.New("boom")))
			if err == nil {
				ack("failed", j)
			}
			return err
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			j, err := s.Retry(ctx, pcOnlyID(s))
			if err == nil {
				ack("retried", j)
			}
			return err
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("retried"); ok {
				c.has(j, "retried job", jobstore.StateQueued)
				return
			}
			j, _ := c.acked("failed")
			c.has(j, "failed job", jobstore.StateFailed, jobstore.StateQueued)
		},
	},
	{
		name: "prune",
		pre: func(ctx context.Context, s *Store, ack pcAck) error {
			for _, key := range []string{"p", ""} {
				if _, err := pcSubmit(ctx, s, ack, "submitted-"+key, jobstore.Spec{Kind: pcKind, Key: key}); err != nil {
					return err
				}
				if _, err := pcClaim(ctx, s, ack, "claimed-"+key); err != nil {
					return err
				}
				j, err := s.Complete(ctx, pcLease(s), jobstore.Succeeded(nil))
				if err != nil {
					return err
				}
				ack("succeeded-"+key, j)
			}
			return nil
		},
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			n, err := s.Prune(ctx, 0)
			if err == nil {
				ack("pruned", n)
			}
			return err
		},
		keys: []string{"p"},
		check: func(c *pcCheck) {
			_, pruned := c.acked("pruned")
			for _, key := range []string{"p", ""} {
				j, _ := c.acked("succeeded-" + key)
				if pruned {
					c.gone(j, "pruned job")
					continue
				}
				if got := c.get(j.ID); got != nil {
					c.has(j, "succeeded job", jobstore.StateSucceeded)
					if key != "" {
						c.keyNames(key, j.ID)
					}
				}
			}
		},
	},
	{
		// Open recovers the job of a worker that died in a power cut.
		name:       "recover",
		from:       "claim",
		openInStep: true,
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			p, err := s.List(ctx, jobstore.ListOptions{})
			if err != nil {
				return err
			}
			for _, j := range p.Jobs {
				ack("recovered", j)
			}
			return nil
		},
		check: func(c *pcCheck) {
			if j, ok := c.acked("recovered"); ok {
				c.has(j, "job recovered at Open", jobstore.StateQueued)
				return
			}
			j, _ := c.acked("claimed")
			c.has(j, "claimed job of a worker that died", jobstore.StateQueued)
		},
	},
	{
		// Open and Repair repair what a power cut in the middle of a
		// batch left (a key file of a job never published, temporary
		// files), and the key is submitted again.
		name:       "repair",
		from:       "batch-4",
		fromCut:    22, // after the fsync of keys/, before the renames into queued/
		openInStep: true,
		step: func(ctx context.Context, s *Store, ack pcAck) error {
			if _, err := s.Repair(ctx); err != nil {
				return err
			}
			_, err := pcSubmit(ctx, s, ack, "submitted", jobstore.Spec{Kind: pcKind, Key: "b0"})
			return err
		},
		keys: []string{"b0"},
		check: func(c *pcCheck) {
			if _, ok := c.acked("batch-0"); ok {
				c.violate("the batch the repair starts from was acknowledged: fromCut is too late")
			}
			if j, ok := c.acked("submitted"); ok {
				c.has(j, "job submitted after the repair", jobstore.StateQueued)
				c.keyNames("b0", j.ID)
			}
		},
	},
}

// pcLast is, in a child, the job it last submitted or claimed.
var pcLast jobstore.Job

// pcLease returns the lease of the job the child last claimed.
func pcLease(*Store) jobstore.Lease { return pcLast.Lease() }

// pcOnlyID returns the ID of the job the child last submitted or claimed.
func pcOnlyID(*Store) string { return pcLast.ID }

func powercutScenario(name string) (pcScenario, bool) {
	for _, sc := range powercutScenarios {
		if sc.name == name {
			return sc, true
		}
	}
	return pcScenario{}, false
}

// powercutChild plays role powercut-<scenario> (or powercut-init, which
// makes a store and closes it) in the store directory childDir names: it
// opens the store and runs the scenario's pre (unless the step opens it),
// says "ready", waits for a line on stdin, runs the step, says "done" and
// exits. It prints each acknowledgement as "ack <name> <json>", and an
// error of the step, which the cut makes, as "error <message>". It never
// closes the store: the machine is cut under it.
func powercutChild(role string) int {
	ctx := context.Background()
	dir := os.Getenv(childDir)
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", role, what, err)
		return 1
	}
	ack := func(name string, v any) {
		b, _ := json.Marshal(v)
		fmt.Printf("ack %s %s\n", name, b)
	}
	name := strings.TrimPrefix(role, "powercut-")
	sc, ok := powercutScenario(name)
	opts := &Options{AllowUnsafeFilesystem: true, SyncFS: sc.syncFS, RecoverInterval: time.Hour, PollInterval: time.Hour,
		journalAlways: sc.journal, journalSize: 64 << 10, journalCoverEvery: time.Hour}
	if name == "init" {
		s, err := Open(ctx, dir, opts)
		if err != nil {
			return fail("open", err)
		}
		_ = s.Close()
		fmt.Println("done")
		return 0
	}
	if !ok {
		return fail("scenario", errors.New("no such scenario"))
	}
	var s *Store
	var err error
	if !sc.openInStep {
		if s, err = Open(ctx, dir, opts); err != nil {
			return fail("open", err)
		}
		if sc.pre != nil {
			if err := sc.pre(ctx, s, ack); err != nil {
				return fail("pre", err)
			}
		}
		if sc.journal {
			journalFromNow(s)
			if s.journalFor(ctx) == nil {
				return fail("pre", errors.New("no journal"))
			}
		}
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return fail("wait for go", err)
	}
	if sc.openInStep {
		if s, err = Open(ctx, dir, opts); err != nil {
			fmt.Printf("error %v\n", err)
			return 1
		}
		ack("open", nil)
	}
	if err := sc.step(ctx, s, ack); err != nil {
		// Expected after a cut: said on stdout, which the test reads,
		// rather than logged.
		fmt.Printf("error %v\n", err)
		return 1
	}
	fmt.Println("done")
	return 0
}

// pcRun is one run of a scenario: its acks, how many operations its step
// made, the operation the cut stopped, and the durable image.
type pcRun struct {
	acks  map[string]json.RawMessage
	ops   int
	log   []string // the step's operations
	cutOp string
	img   *crashfs.Image
	// current is what the file system held at the end, all durable.
	current *crashfs.Image
	output  string
}

// powercutBase returns the image of a file system that holds a new store
// in /store, closed cleanly and all of it durable.
func powercutBase(t *testing.T) *crashfs.Image {
	fsys := crashfs.New(nil)
	mnt := pcMount(t, fsys)
	_, err := testproc.Run(t.Context(), t, "powercut-init", &testproc.Options{Env: pcEnv(mnt)})
	require.NoError(t, err)
	img := fsys.Current()
	require.NoError(t, mnt.Unmount())
	return img
}

// pcEnv is the environment of a child on mnt: the store's directory, and
// no second of sleep at exit under the race detector (its default), which
// would make the test ten times slower.
func pcEnv(mnt *crashfs.Mount) []string {
	return []string{childDir + "=" + filepath.Join(mnt.Dir, "store"), "GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"}
}

func pcMount(t *testing.T, fsys *crashfs.FS) *crashfs.Mount {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(dir, 0o755))
	m, err := fsys.Mount(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unmount() })
	return m
}

// runPowercut runs sc on a crashfs holding img, cut after cut operations of
// the step (cut < 0: after the whole step).
func runPowercut(t *testing.T, sc pcScenario, img *crashfs.Image, cut int) pcRun {
	t.Helper()
	fsys := crashfs.New(img)
	mnt := pcMount(t, fsys)
	p := testproc.Start(t, "powercut-"+sc.name, &testproc.Options{Env: pcEnv(mnt)})
	for p.Next(t) != "ready" {
	}
	start := fsys.Ops()
	if cut >= 0 {
		fsys.CutAfter(cut)
	}
	_, err := io.WriteString(p.Stdin(), "go\n")
	require.NoError(t, err)
	exited := make(chan struct{})
	go func() {
		_ = p.Wait(context.Background())
		close(exited)
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	limit := time.After(30 * time.Second)
wait:
	for !slices.Contains(strings.Split(p.Output(), "\n"), "done") {
		select {
		case <-exited:
			break wait
		case <-limit:
			t.Logf("%s: child neither done nor dead 30s after the cut; killing it", sc.name)
			break wait
		case <-tick.C:
		}
	}
	fsys.Cut()
	r := pcRun{ops: fsys.Ops() - start, log: fsys.Log()[start:]}
	_, r.cutOp = fsys.IsCut()
	_ = p.Stdin().Close()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = p.Signal(syscall.SIGKILL)
		<-exited
	}
	require.NoError(t, mnt.Unmount())
	r.img, r.current = fsys.Durable(), fsys.Current()
	r.output = p.Output()
	r.acks = make(map[string]json.RawMessage)
	for _, l := range strings.Split(r.output, "\n") {
		if f := strings.SplitN(l, " ", 3); len(f) == 3 && f[0] == "ack" {
			r.acks[f[1]] = json.RawMessage(f[2])
		}
	}
	return r
}

// pcCheck checks one run: the store reopened on the real disk from the
// durable image, and the violations found.
type pcCheck struct {
	t          *testing.T
	run        pcRun
	img        *crashfs.Image
	s          *Store
	violations []string
}

func (c *pcCheck) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// acked returns the job acknowledged under name.
func (c *pcCheck) acked(name string) (jobstore.Job, bool) {
	raw, ok := c.run.acks[name]
	if !ok {
		return jobstore.Job{}, false
	}
	var j jobstore.Job
	_ = json.Unmarshal(raw, &j)
	return j, true
}

// get returns job id in the reopened store, or nil if it is not there (a
// violation unless not found).
func (c *pcCheck) get(id string) *jobstore.Job {
	j, err := c.s.Get(context.Background(), id)
	if errors.Is(err, jobstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		c.violate("job cannot be read: %v", err)
		return nil
	}
	return &j
}

// has requires that the acknowledged job want is in the reopened store in
// one of states, with at least its attempts, and returns it.
func (c *pcCheck) has(want jobstore.Job, what string, states ...jobstore.State) *jobstore.Job {
	got := c.get(want.ID)
	if got == nil {
		c.violate("%s (%s, attempt %d, acknowledged) is lost", what, want.State, want.Attempt)
		return nil
	}
	if !slices.Contains(states, got.State) {
		c.violate("%s (%s, attempt %d, acknowledged) is %s after the cut, want %v", what, want.State, want.Attempt, got.State, states)
	}
	if got.Kind != want.Kind || got.Key != want.Key || !bytes.Equal(got.Payload, want.Payload) || got.MaxAttempts != want.MaxAttempts {
		c.violate("%s (acknowledged) comes back with another kind, key, payload or attempt limit", what)
	}
	if got.State == want.State && want.State.Terminal() && (!bytes.Equal(got.Result, want.Result) || got.LastError != want.LastError) {
		c.violate("%s (%s, acknowledged) comes back with another result or error", what, want.State)
	}
	if got.Attempt < want.Attempt {
		c.violate("%s (%s, attempt %d, acknowledged) shows attempt %d after the cut: an attempt is not counted", what, want.State, want.Attempt, got.Attempt)
	}
	return got
}

// gone requires that job j was removed.
func (c *pcCheck) gone(j jobstore.Job, what string) {
	if got := c.get(j.ID); got != nil {
		c.violate("%s (acknowledged) is back after the cut, %s", what, got.State)
	}
}

// keyNames requires that a submit with key returns the job id.
func (c *pcCheck) keyNames(key, id string) {
	j, created, err := c.s.Submit(context.Background(), jobstore.Spec{Kind: pcKind, Key: key})
	switch {
	case err != nil:
		c.violate("key %q of an acknowledged job is blocked: %v", key, err)
	case created || j.ID != id:
		c.violate("key %q of an acknowledged job names another job after the cut (created %v)", key, created)
	}
}

// checkPowercut reopens the store from r's image on the real disk and
// returns what does not hold.
func checkPowercut(t *testing.T, sc pcScenario, r pcRun) []string {
	out := t.TempDir()
	require.NoError(t, r.img.Materialize(out))
	c := &pcCheck{t: t, run: r, img: r.img}
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(out, "store"), nil)
	if err != nil {
		return []string{fmt.Sprintf("the store does not open: %v", err)}
	}
	defer s.Close()
	c.s = s
	// What was acknowledged reads back before any repair: Open makes
	// none but the recovery of dead workers' jobs.
	sc.check(c)
	// No key is blocked, whatever the cut left.
	for _, key := range sc.keys {
		if _, _, err := s.Submit(ctx, jobstore.Spec{Kind: pcKind, Key: key}); err != nil {
			c.violate("key %q is blocked: %v", key, err)
		}
	}
	// Repair (which a Store makes in the background after Open) leaves
	// nothing for Fsck.
	if _, err := s.Repair(ctx); err != nil {
		c.violate("repair after open: %v", err)
	}
	rep, err := s.Fsck(ctx, false)
	if err != nil {
		c.violate("fsck after repair: %v", err)
	}
	for _, p := range rep.Problems {
		c.violate("the store is not clean after Repair: fsck finds %s: %s", p.Kind, p.Detail)
	}
	return c.violations
}

// pcCutPoints returns the cut points of a step of n operations: each of
// 0..n (n: after the whole step), or with !full a sample of them.
func pcCutPoints(n int, full bool) []int {
	if full || n+1 <= powercutSample {
		pts := make([]int, n+1)
		for i := range pts {
			pts[i] = i
		}
		return pts
	}
	var pts []int
	for i := range powercutSample {
		k := i * n / (powercutSample - 1)
		if len(pts) == 0 || pts[len(pts)-1] != k {
			pts = append(pts, k)
		}
	}
	return pts
}

// TestPowerCut cuts the power at every file system operation of each of
// the store's operations in turn (store creation, Submit, Submit with a
// key and with Options.SyncFS, SubmitBatch below and at the syncfs
// threshold, Claim, Complete with success and with a failure to retry,
// Cancel of a queued and of a running job, Retry, Prune), each run in a
// child process on a crashfs mount, and checks that every acknowledged
// change survives (read before any repair: Open makes none but the
// recovery of dead workers' jobs), that no key is blocked, and that Fsck
// finds nothing once Repair has run (docs/guarantees.md, "Crashes and
// damage").
func TestPowerCut(t *testing.T) {
	if err := crashfs.Available(); err != nil {
		t.Skip(err)
	}
	full := os.Getenv(powercutEnv) == "full"
	base := powercutBase(t)
	for _, sc := range powercutScenarios {
		t.Run(sc.name, func(t *testing.T) {
			img := base
			var setup map[string]json.RawMessage
			switch {
			case sc.create:
				img = nil
			case sc.from != "":
				from, ok := powercutScenario(sc.from)
				require.True(t, ok, sc.from)
				if sc.fromCut > 0 {
					r := runPowercut(t, from, base, sc.fromCut)
					img, setup = r.img, r.acks
				} else {
					r := runPowercut(t, from, base, -1)
					img, setup = r.current, r.acks
				}
			}
			run := func(cut int) pcRun {
				r := runPowercut(t, sc, img, cut)
				for name, v := range setup {
					r.acks[name] = v
				}
				return r
			}
			whole := run(-1)
			require.Contains(t, strings.Split(whole.output, "\n"), "done", "the step runs to its end uncut:\n%s", whole.output)
			n := whole.ops
			found := map[string][]string{} // violation -> cut points
			var order []string
			points := pcCutPoints(n, full)
			for _, k := range points {
				r := whole
				if k < n {
					r = run(k)
				}
				at := fmt.Sprintf("%d (after the step)", k)
				if k < n {
					at = fmt.Sprintf("%d (before %s)", k, pcSummarize([]string{r.cutOp})[0])
				}
				for _, v := range pcSummarize(checkPowercut(t, sc, r)) {
					if _, ok := found[v]; !ok {
						order = append(order, v)
						if paths := r.img.Paths(); len(paths) <= 40 {
							t.Logf("the durable image where %q is first seen, at cut point %s:\n\t%s", v, at, strings.Join(paths, "\n\t"))
						}
					}
					found[v] = append(found[v], at)
				}
			}
			t.Logf("%s: %d operations, %d cut points tried; the step's operations:\n\t%s", sc.name, n, len(points), strings.Join(pcSummarize(whole.log), "\n\t"))
			for _, v := range order {
				t.Logf("violation: %s\n\tat cut points %s", v, strings.Join(found[v], ", "))
			}
			if len(order) > 0 {
				t.Errorf("%d kinds of violation in %s (listed above)", len(order), sc.name)
			}
		})
	}
}

var (
	pcIDPattern   = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	pcHashPattern = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	pcTempPattern = regexp.MustCompile(`/tmp/\S*?/store/`)
	pcNamePattern = regexp.MustCompile(`\.(new|[^ /]+\.json)\.\d+\.\d+\.\d+`)
	pcKeyPattern  = regexp.MustCompile(`key "[^"]*"`)
)

// pcSummarize makes the violations of one run comparable across runs (job
// IDs, key hashes, temporary names and directories replaced by what they
// are) and counts each.
func pcSummarize(vs []string) []string {
	count := map[string]int{}
	var order []string
	for _, v := range vs {
		v = pcTempPattern.ReplaceAllString(v, "<store>/")
		v = pcNamePattern.ReplaceAllString(v, ".<temp>")
		v = pcIDPattern.ReplaceAllString(v, "<id>")
		v = pcHashPattern.ReplaceAllString(v, "<hash>")
		v = pcKeyPattern.ReplaceAllString(v, "key <key>")
		if count[v] == 0 {
			order = append(order, v)
		}
		count[v]++
	}
	for i, v := range order {
		if n := count[v]; n > 1 {
			order[i] = fmt.Sprintf("%s (%d times)", v, n)
		}
	}
	return order
}
