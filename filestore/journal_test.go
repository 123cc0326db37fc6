package filestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// journalFromNow makes the Store's next Submit journaled, as its second
// is: a Store's first submit is not (submitOnce).
func journalFromNow(s *Store) { s.submits.Add(1) }

// requireJournaling skips a test where the store does not journal its
// submits (a syncfs does not reach the disk of the test's directory).
func requireJournaling(t *testing.T, s *Store) {
	t.Helper()
	if !s.journaling() {
		t.Skip("no submission journal here: a syncfs is not known to reach the disk of " + s.Dir())
	}
}

// TestJournalEntries: a scan finds the entries written, in order, and
// stops at the first that is cut short, damaged, or of another epoch; it
// passes over a voided entry.
func TestJournalEntries(t *testing.T) {
	payloads := [][]byte{[]byte(`{"a":1}`), bytes.Repeat([]byte("x"), 1000), []byte(`{"c":3}`)}
	var data []byte
	for _, p := range payloads {
		data = appendEntry(data, 7, p)
	}
	data = append(data, make([]byte, 64)...) // zeros after the last
	got := scanJournal(data, 7)
	require.Len(t, got, 3)
	for i, e := range got {
		require.Equal(t, payloads[i], e.payload)
	}
	require.Equal(t, int64(journalHeaderSize), got[0].off)
	require.Equal(t, int64(journalHeaderSize)+entrySize(len(payloads[0])), got[1].off)
	require.Empty(t, scanJournal(data, 8), "entries of another epoch")

	second := entrySize(len(payloads[0]))
	for name, cut := range map[string]func([]byte) []byte{
		"torn":         func(d []byte) []byte { return d[:second+20] },
		"bit flipped":  func(d []byte) []byte { d[second+30] ^= 1; return d },
		"length grown": func(d []byte) []byte { d[second]++; return d },
		"old epoch":    func(d []byte) []byte { copy(d[second:], appendEntry(nil, 6, payloads[1])); return d },
	} {
		d := cut(bytes.Clone(data))
		require.Len(t, scanJournal(d, 7), 1, name)
	}

	// A voided entry is passed over, and the scan goes on.
	voided := bytes.Clone(data)
	binary.LittleEndian.PutUint64(voided[second+8:], voidEpoch(7))
	got = scanJournal(voided, 7)
	require.Len(t, got, 2)
	require.Equal(t, payloads[0], got[0].payload)
	require.Equal(t, payloads[2], got[1].payload)

	for _, r := range []journalRef{{}, {Slot: 255, Epoch: 1<<64 - 1, Off: 1<<48 - 1}, {Slot: 3, Epoch: 9, Off: 4096}} {
		back, ok := parseJournalRef(r.String())
		require.True(t, ok)
		require.Equal(t, r, back)
		require.Len(t, r.String(), len(journalRef{}.String()), "the reference's width varies")
	}
	_, ok := parseJournalRef("0001:xyz")
	require.False(t, ok)
}

// TestJournalSubmit: a Submit and a SubmitBatch of jobs without keys
// append their records to the Store's journal, each record naming its
// entry, and the journal's cover makes them durable; a keyed submit
// does not use it.
func TestJournalSubmit(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	requireJournaling(t, s)
	ctx := t.Context()
	first, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	env, err := s.readRecord(s.recordPath(dirQueued, first.ID), first.ID)
	require.NoError(t, err)
	require.Empty(t, env.Logged, "a Store's first submit was journaled")
	require.Nil(t, s.jr, "a Store's first submit took a journal")
	one, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	specs := make([]jobstore.Spec, 10)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k"}
	}
	batch, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	keyed, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Key: "k1"})
	require.NoError(t, err)

	ids := []string{one.ID}
	for _, r := range batch {
		ids = append(ids, r.Job.ID)
	}
	entries := journalEntries(t, s)
	require.Len(t, entries, len(ids))
	for i, id := range ids {
		data, err := os.ReadFile(s.recordPath(dirQueued, id))
		require.NoError(t, err)
		require.Equal(t, data, entries[i].payload, "entry %d is not the record", i)
		env, err := s.readRecord(s.recordPath(dirQueued, id), id)
		require.NoError(t, err)
		ref, ok := parseJournalRef(env.Logged)
		require.True(t, ok)
		require.Equal(t, entries[i].off, ref.Off)
		covered, err := s.journalCovered(env.Logged)
		require.NoError(t, err)
		require.False(t, covered)
	}
	env, err = s.readRecord(s.recordPath(dirQueued, keyed.ID), keyed.ID)
	require.NoError(t, err)
	require.Empty(t, env.Logged, "a keyed submit was journaled")

	require.NoError(t, s.jr.coverNow(false))
	env, err = s.readRecord(s.recordPath(dirQueued, one.ID), one.ID)
	require.NoError(t, err)
	covered, err := s.journalCovered(env.Logged)
	require.NoError(t, err)
	require.True(t, covered)
	j, err := s.Get(ctx, one.ID)
	require.NoError(t, err)
	require.Equal(t, one, j)
}

// journalEntries returns the entries of s's journal beyond its cover.
func journalEntries(t *testing.T, s *Store) []journalEntry {
	t.Helper()
	require.NotNil(t, s.jr, "no journal")
	data, err := os.ReadFile(s.jr.path)
	require.NoError(t, err)
	h, ok := decodeJournalHeader(data, int64(len(data)))
	require.True(t, ok)
	var out []journalEntry
	for _, e := range scanJournal(data[journalHeaderSize:], h.epoch) {
		if e.off >= h.cover {
			out = append(out, e)
		}
	}
	return out
}

// TestJournalReplayAfterKill: a process submits jobs through its journal
// and is SIGKILLed before it covers them. A power cut then takes some of
// their records, and cuts others to nothing (the name kept, not the
// data), which is all it may do to records whose submits were
// acknowledged through the journal. The next Open writes them back from
// the journal: every acknowledged job is there, queued, as submitted;
// the journal is covered; and a second Open replays nothing.
func TestJournalReplayAfterKill(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{})
	requireJournaling(t, s)
	require.NoError(t, s.Close())
	c := startChild(t, dir, "journal-submit", childNoCover+"=1")
	var ids []string
	for {
		line := c.Next(t)
		if line == "ready" {
			break
		}
		id, ok := strings.CutPrefix(line, "submitted ")
		require.True(t, ok, line)
		ids = append(ids, id)
	}
	require.Len(t, ids, 70)
	require.NoError(t, c.Signal(syscall.SIGKILL))
	_ = c.Wait(t.Context())

	want := map[string][]byte{}
	for i, id := range ids {
		p := filepath.Join(dir, dirQueued, id+".json")
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		want[id] = data
		switch i % 3 {
		case 0:
			require.NoError(t, os.Remove(p))
		case 1:
			require.NoError(t, os.Truncate(p, 0))
		}
	}

	s = openAt(t, dir, &Options{})
	for _, id := range ids {
		data, err := os.ReadFile(s.recordPath(dirQueued, id))
		require.NoError(t, err, "job %s was not written back", id)
		require.Equal(t, want[id], data)
	}
	r, err := s.Fsck(t.Context(), false)
	require.NoError(t, err)
	require.True(t, r.OK(), "%v", r.Problems)
	page, err := s.List(t.Context(), jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 70)

	// Covered now: nothing to replay, and the jobs may be deleted.
	data, err := os.ReadFile(s.journalPath(0))
	require.NoError(t, err)
	h, ok := decodeJournalHeader(data, int64(len(data)))
	require.True(t, ok)
	require.Empty(t, scanJournal(data[h.cover:], h.epoch), "entries left beyond the cover")
	env, err := s.readRecord(s.recordPath(dirQueued, ids[0]), ids[0])
	require.NoError(t, err)
	covered, err := s.journalCovered(env.Logged)
	require.NoError(t, err)
	require.True(t, covered)
}

// TestJournalPruneWaitsForCover: a finished job whose submit's journal
// entry another Store has not covered yet is not pruned (a replay would
// bring it back); once covered it is. Delete waits for the cover. A Store
// prunes the jobs it submitted itself at once: it covers its own journal
// first.
func TestJournalPruneWaitsForCover(t *testing.T) {
	dir := t.TempDir()
	a := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	requireJournaling(t, a)
	b := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	journalFromNow(a)
	journalFromNow(b)
	ctx := t.Context()
	var ids []string
	for range 2 {
		j, _, err := a.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		_, err = a.Cancel(ctx, j.ID)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	n, err := b.Prune(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n, "pruned before its journal entry was covered")
	deleted := make(chan error, 1)
	go func() { deleted <- b.Delete(ctx, ids[0]) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-deleted:
		t.Fatalf("Delete returned before the cover: %v", err)
	default:
	}
	require.NoError(t, a.jr.coverNow(false))
	require.NoError(t, <-deleted)
	_, err = b.Get(ctx, ids[0])
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	n, err = b.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	own, _, err := b.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	_, err = b.Cancel(ctx, own.ID)
	require.NoError(t, err)
	n, err = b.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a Store's own job was not pruned at once")
}

// TestJournalWrap: a journal that fills up is covered and begins a new
// epoch from the top; every job stays, and a replay after that finds
// nothing to do.
func TestJournalWrap(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{journalCoverEvery: time.Hour, journalSize: 64 << 10})
	requireJournaling(t, s)
	ctx := t.Context()
	var ids []string
	for range 300 { // about 100 KiB of entries
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	require.Greater(t, s.jr.epoch, uint64(1), "the journal did not wrap")
	require.NoError(t, s.Close())
	s = openAt(t, dir, &Options{})
	page, err := s.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateQueued}, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, page.Jobs, len(ids))
}

// TestJournalFails: a journal whose write or fdatasync fails is not used
// any more; the submit that met the failure makes its record durable as a
// submit without a journal does, and succeeds, and so do later ones.
func TestJournalFails(t *testing.T) {
	for _, op := range []fsfault.Op{fsfault.JournalWrite, fsfault.JournalSync} {
		t.Run(string(op), func(t *testing.T) {
			ctx := t.Context()
			var failing atomic.Bool
			faults := func(o, path string) error {
				if failing.Load() && o == string(op) && strings.HasSuffix(path, ".log") {
					return syscall.EIO
				}
				return nil
			}
			s := openTest(t, &Options{Faults: faults, journalCoverEvery: time.Hour})
			requireJournaling(t, s)
			journalFromNow(s)
			first, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			require.NotNil(t, s.jr)
			failing.Store(true)
			for range 3 {
				j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
				require.NoError(t, err)
				got, err := s.Get(ctx, j.ID)
				require.NoError(t, err)
				require.Equal(t, j, got)
			}
			specs := []jobstore.Spec{{Kind: "k"}, {Kind: "k"}}
			_, err = s.SubmitBatch(ctx, specs)
			require.NoError(t, err)
			require.True(t, s.jr.isBroken())
			require.Nil(t, s.journalFor(ctx), "a broken journal is used")
			// The kernel reports a write error once: an fdatasync after a
			// failed one must not say that the journal is durable.
			failing.Store(false)
			require.Error(t, s.jr.fdatasync(), "an fdatasync after a failed one succeeded")
			got, err := s.Get(ctx, first.ID)
			require.NoError(t, err)
			require.Equal(t, first, got)
		})
	}
}

// TestJournalTakenOncePerStore: two Stores of one process take two
// journals, and a Store that closes covers its own and lets the next
// Store take it without a replay.
func TestJournalTakenOncePerStore(t *testing.T) {
	dir := t.TempDir()
	a := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	requireJournaling(t, a)
	b := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	ctx := t.Context()
	for _, s := range []*Store{a, b} {
		journalFromNow(s)
		_, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
	}
	require.Equal(t, 0, a.jr.slot)
	require.Equal(t, 1, b.jr.slot)
	require.NoError(t, a.Close())
	data, err := os.ReadFile(a.journalPath(0))
	require.NoError(t, err)
	h, ok := decodeJournalHeader(data, int64(len(data)))
	require.True(t, ok)
	require.Equal(t, int64(journalHeaderSize), h.cover, "Close did not cover its journal")
	c := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
	journalFromNow(c)
	_, _, err = c.Submit(ctx, jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	require.Equal(t, 0, c.jr.slot)
}

// TestJournalLinkRefused: a journal directory planted as a link out of
// the store is never written through; submits go on without a journal.
func TestJournalLinkRefused(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, journalDirName)))
	s, err := Open(t.Context(), dir, &Options{})
	if err != nil {
		require.Contains(t, err.Error(), journalDirName)
		return
	}
	defer s.Close()
	journalFromNow(s)
	_, _, err = s.Submit(context.Background(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, ents, "a journal was made through the link")
}

// TestJournalPowerCut: submits acknowledged through the journal, then a
// power cut before their process covered it, which takes back every
// rename no fsync or syncfs covered (the records go back to tmp/, as if
// never published) and every write into the journal that no fdatasync
// covered. The next Open writes every acknowledged record back from the
// journal, as it was submitted, and the jobs run.
func TestJournalPowerCut(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	fsys := &powerCutFS{fileOps: &syncLog{fileOps: osFS{}, info: &ext4Disk}}
	opts := &Options{RecoverInterval: time.Hour, journalCoverEvery: time.Hour}
	s, err := open(ctx, dir, opts, fsys)
	require.NoError(t, err)
	requireJournaling(t, s)
	journalFromNow(s)
	fsys.reset()
	want := map[string][]byte{}
	for range 10 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		want[j.ID] = nil
	}
	specs := make([]jobstore.Spec, 20)
	for i := range specs {
		specs[i] = jobstore.Spec{Kind: "k", Priority: i}
	}
	out, err := s.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	for _, r := range out {
		want[r.Job.ID] = nil
	}
	for id := range want {
		data, err := os.ReadFile(s.recordPath(dirQueued, id))
		require.NoError(t, err)
		want[id] = data
	}
	// The process is cut off: its journal is let go uncovered.
	s.jmu.Lock()
	unlockFile(s.jr.f)
	s.jr = nil
	s.jmu.Unlock()
	fsys.cut(t)
	require.NoError(t, s.Close())
	for id := range want {
		_, err := os.Stat(s.recordPath(dirQueued, id))
		require.ErrorIs(t, err, os.ErrNotExist, "the power cut left %s", id)
	}

	s, err = open(ctx, dir, opts, fsys)
	require.NoError(t, err)
	defer s.Close()
	for id, data := range want {
		got, err := os.ReadFile(s.recordPath(dirQueued, id))
		require.NoError(t, err, "job %s was lost", id)
		require.Equal(t, data, got)
	}
	r, err := s.Fsck(ctx, true)
	require.NoError(t, err)
	for _, p := range r.Problems {
		require.Equal(t, ProblemTempFile, p.Kind, "%v", r.Problems) // the records' unpublished copies
	}
	for range want {
		j, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
		require.NoError(t, err)
		_, err = s.Complete(ctx, j.Lease(), jobstore.Succeeded(nil))
		require.NoError(t, err)
	}
	_, err = s.Claim(ctx, jobstore.ClaimRequest{Worker: "w"})
	require.ErrorIs(t, err, jobstore.ErrNoJob)
}

// TestJournalCoverByFsyncs: where a syncfs failed before (so that none is
// trusted any more), a cover makes the records of its entries durable
// with an fsync of each, and of their directories, and the jobs become
// prunable.
func TestJournalCoverByFsyncs(t *testing.T) {
	l := &syncLog{fileOps: osFS{}, info: &ext4Disk}
	s := openAtFS(t, t.TempDir(), &Options{journalCoverEvery: time.Hour, RecoverInterval: time.Hour}, l)
	requireJournaling(t, s)
	journalFromNow(s)
	ctx := t.Context()
	var ids []string
	for range 3 {
		j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	s.durable.cost.failed()
	l.take()
	require.NoError(t, s.jr.coverNow(false))
	ops := l.take()
	require.Equal(t, 3, strings.Count(strings.Join(ops, ","), "fsync file"), "%v", ops)
	require.Contains(t, ops, "fsync queued/")
	require.NotContains(t, ops, "syncfs")
	for _, id := range ids {
		env, err := s.readRecord(s.recordPath(dirQueued, id), id)
		require.NoError(t, err)
		covered, err := s.journalCovered(env.Logged)
		require.NoError(t, err)
		require.True(t, covered)
	}
}

// TestJournalSkipsBadSlot: a journal that cannot be taken (a directory, or
// a file far larger than any journal, planted in its place) is passed
// over for the next; Open does not fail on it.
func TestJournalSkipsBadSlot(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, p string){
		"directory": func(t *testing.T, p string) { require.NoError(t, os.Mkdir(p, 0o700)) },
		"huge file": func(t *testing.T, p string) {
			f, err := os.Create(p)
			require.NoError(t, err)
			_, err = f.Write(journalHeader{epoch: 1, cover: journalHeaderSize}.encode())
			require.NoError(t, err)
			require.NoError(t, f.Truncate(2*journalMaxSize))
			require.NoError(t, f.Close())
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(dir, journalDirName), 0o700))
			plant(t, filepath.Join(dir, journalDirName, "0.log"))
			s := openAt(t, dir, &Options{journalCoverEvery: time.Hour})
			requireJournaling(t, s)
			journalFromNow(s)
			_, _, err := s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
			require.NotNil(t, s.jr)
			require.Equal(t, 1, s.jr.slot)
		})
	}
}
