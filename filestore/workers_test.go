package filestore

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

func workerIDsOf(t *testing.T, s *Store) []string {
	t.Helper()
	ws, err := s.Workers(t.Context())
	require.NoError(t, err)
	ids := []string{}
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}

// TestWorkersOfOtherProcesses: the workers other processes registered are
// listed while they live, a stopped one included; a killed one is gone at
// the next Workers, its file removed, and its name is free again.
func TestWorkersOfOtherProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	doomed := startChild(t, dir, "register-worker", childKey+"=doomed")
	stopped := startChild(t, dir, "register-worker", childKey+"=stopped")
	require.Equal(t, "registered doomed", doomed.Next(t))
	require.Equal(t, "registered stopped", stopped.Next(t))
	require.Equal(t, []string{"doomed", "stopped"}, workerIDsOf(t, s))

	require.NoError(t, stopped.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = stopped.Signal(syscall.SIGCONT) })
	killed := time.Now()
	require.NoError(t, doomed.Signal(syscall.SIGKILL))
	_ = doomed.Wait(t.Context())
	require.Equal(t, []string{"stopped"}, workerIDsOf(t, s), "a killed worker is listed, or a stopped one is not")
	_, err := os.Lstat(filepath.Join(dir, dirWorkers, keyName("doomed")+recordExt))
	require.ErrorIs(t, err, os.ErrNotExist, "the dead worker's file is still there")
	// The killed worker is remembered as ended, from when it was found
	// dead; the stopped one has not ended.
	ended, err := s.EndedWorkers(t.Context(), killed)
	require.NoError(t, err)
	require.Len(t, ended, 1)
	require.Equal(t, "doomed", ended[0].ID)
	require.False(t, ended[0].EndedAt.Before(killed.Truncate(time.Microsecond)))
	recent, err := jobstore.RecentWorkers(t.Context(), s, time.Now())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"doomed", "stopped"}, []string{recent[0].ID, recent[1].ID})

	_, err = s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "stopped", Concurrency: 1})
	require.ErrorIs(t, err, jobstore.ErrWorkerExists, "a stopped process's worker name was taken over")
	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "doomed", Concurrency: 1})
	require.NoError(t, err, "a dead worker's name is not free")
	require.Equal(t, []string{"doomed", "stopped"}, workerIDsOf(t, s))
	require.NoError(t, u())
}

// TestEndedWorkersForgotten: an ended worker's record older than
// jobstore.RecentWorkerWindow is not listed and is removed; what else is
// in workers/ended/ is skipped.
func TestEndedWorkersForgotten(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "old", Concurrency: 1})
	require.NoError(t, err)
	require.NoError(t, u())
	p := filepath.Join(dir, dirWorkers, dirEnded, keyName("old")+recordExt)
	var info jobstore.WorkerInfo
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &info))
	info.EndedAt = time.Now().Add(-jobstore.RecentWorkerWindow - time.Minute)
	data, err = json.Marshal(info)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, data, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, dirWorkers, dirEnded, "garbage.json"), []byte("{"), 0o600))
	ended, err := s.EndedWorkers(t.Context(), time.Time{})
	require.NoError(t, err)
	require.Empty(t, ended)
	_, err = os.Lstat(p)
	require.ErrorIs(t, err, os.ErrNotExist, "a forgotten end's record is left")
	require.FileExists(t, filepath.Join(dir, dirWorkers, dirEnded, "garbage.json"), "a foreign file is left alone")
}

// TestWorkersRegisterOverDeadFile: a worker file that no process holds,
// left by a process that died, does not block its name, and Workers
// removes it.
func TestWorkersRegisterOverDeadFile(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Concurrency: 1})
	require.NoError(t, err)
	p := filepath.Join(dir, dirWorkers, keyName("w")+recordExt)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, u())
	_, err = os.Lstat(p)
	require.ErrorIs(t, err, os.ErrNotExist, "unregister left the file")

	// As a killed process leaves it: the file, unlocked.
	require.NoError(t, os.WriteFile(p, data, 0o644))
	require.Empty(t, workerIDsOf(t, s))
	_, err = os.Lstat(p)
	require.ErrorIs(t, err, os.ErrNotExist, "Workers left a dead worker's file")

	require.NoError(t, os.WriteFile(p, data, 0o644))
	u, err = s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Host: "again", Concurrency: 1})
	require.NoError(t, err)
	defer u()
	ws, err := s.Workers(t.Context())
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, "again", ws[0].Host)
}

// TestWorkersSkipForeignFiles: what else is in workers/ (a link, a FIFO,
// a directory, garbage) is skipped and left alone, and the store's Fsck
// finds nothing wrong with workers/.
func TestWorkersSkipForeignFiles(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	u, err := s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Concurrency: 1})
	require.NoError(t, err)
	defer u()
	wd := filepath.Join(dir, dirWorkers)
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(wd, "link.json")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(wd, "fifo.json"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(wd, "dir.json"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(wd, "notes.txt"), []byte("hello"), 0o644))

	done := make(chan []string)
	go func() { done <- workerIDsOf(t, s) }()
	select {
	case ids := <-done:
		require.Equal(t, []string{"w"}, ids)
	case <-time.After(10 * time.Second):
		t.Fatal("Workers blocked on a file in workers/")
	}
	for _, name := range []string{"link.json", "fifo.json", "dir.json", "notes.txt"} {
		_, err := os.Lstat(filepath.Join(wd, name))
		require.NoError(t, err, "%s was removed", name)
	}
	r, err := s.Fsck(t.Context(), false)
	require.NoError(t, err)
	for _, p := range r.Problems {
		require.False(t, strings.Contains(p.Path, dirWorkers), "fsck reports %v", p)
	}
}

// TestWorkersPlantedLink: a link planted for workers/ is neither read
// nor followed to remove what it points at; RegisterWorker refuses it.
func TestWorkersPlantedLink(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	elsewhere := t.TempDir()
	victim := filepath.Join(elsewhere, "settings.json")
	require.NoError(t, os.WriteFile(victim, []byte(`{"id":"x","concurrency":1}`), 0o644))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(dir, dirWorkers)))

	_, err := s.Workers(t.Context())
	require.Error(t, err)
	require.Contains(t, err.Error(), "is not a directory")
	_, err = s.RegisterWorker(t.Context(), jobstore.WorkerInfo{ID: "w", Concurrency: 1})
	require.Error(t, err, "a worker was registered through a planted link")
	require.FileExists(t, victim)
	ents, err := os.ReadDir(elsewhere)
	require.NoError(t, err)
	require.Len(t, ents, 1, "a file was written through the link")
}

// TestWorkersOfPods: workers that are each PID 1 of a PID namespace of
// their own, as in pods sharing a volume, are listed apart (each says PID
// 1), and a killed one goes while the other stays.
func TestWorkersOfPods(t *testing.T) {
	testproc.RequirePIDNamespaces(t)
	dir := t.TempDir()
	s := openAt(t, dir, &Options{NoSync: true})
	o := func(id string) *testproc.Options {
		return &testproc.Options{PIDNamespace: true, Env: []string{childDir + "=" + dir, childKey + "=" + id}}
	}
	a := testproc.Start(t, "register-worker", o("pod-a-1"))
	b := testproc.Start(t, "register-worker", o("pod-b-1"))
	require.Equal(t, "registered pod-a-1", a.Next(t))
	require.Equal(t, "registered pod-b-1", b.Next(t))
	ws, err := s.Workers(t.Context())
	require.NoError(t, err)
	require.Len(t, ws, 2)
	for _, w := range ws {
		require.Equal(t, 1, w.PID, "%s is not PID 1 of its namespace", w.ID)
	}
	require.NoError(t, a.Signal(syscall.SIGKILL))
	_ = a.Wait(t.Context())
	require.Eventually(t, func() bool {
		ids := workerIDsOf(t, s)
		return len(ids) == 1 && ids[0] == "pod-b-1"
	}, 2*time.Second, 10*time.Millisecond, "the killed pod's worker is still listed")
}
