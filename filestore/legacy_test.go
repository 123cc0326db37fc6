package filestore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/stretchr/testify/require"
)

const legacyFixtures = "../testdata/legacy"

func TestScanLegacyBasic(t *testing.T) {
	scan, err := scanLegacy(filepath.Join(legacyFixtures, "basic"), 0)
	require.NoError(t, err)
	require.Len(t, scan.Jobs, 6)
	require.Len(t, scan.Temps, 1)

	byID := map[string]jobstore.Job{}
	for _, j := range scan.Jobs {
		byID[j.ID] = j
	}
	pending := byID["01JDQ8Z0A1B2C3D4E5F6G7H8J9"]
	require.Equal(t, jobstore.StateQueued, pending.State)
	require.Equal(t, "invoice-1001", pending.Key, "the older of two jobs sharing a key keeps it")
	require.Equal(t, "email.send", pending.Kind)
	require.JSONEq(t, `{"to":"a@example.com","template":"invoice"}`, string(pending.Payload))
	require.Equal(t, 5, pending.MaxAttempts)

	running := byID["01JDQ8Z1K2M3N4P5Q6R7S8T9V0"]
	require.Equal(t, jobstore.StateRunning, running.State)
	require.Equal(t, 1, running.Attempt)
	require.Equal(t, legacyWorker, running.Worker)
	require.Equal(t, jobstore.DefaultMaxAttempts, running.MaxAttempts)

	done := byID["01JDQ8Z2W3X4Y5Z6A7B8C9D0E1"]
	require.Equal(t, jobstore.StateSucceeded, done.State)
	require.Equal(t, "invoice-1000", done.Key)
	require.JSONEq(t, `{"message_id":"m-77"}`, string(done.Result))
	require.False(t, done.FinishedAt.IsZero())

	failed := byID["01JDQ8Z3F2G3H4J5K6M7N8P9Q0"]
	require.Equal(t, jobstore.StateFailed, failed.State)
	require.Equal(t, "decode: unexpected EOF", failed.LastError)

	require.Equal(t, jobstore.StateCanceled, byID["01JDQ8Z4R2S3T4V5W6X7Y8Z9A0"].State)

	dup := byID["01JDQ8ZBD2E3F4G5H6J7K8M9N0"]
	require.Empty(t, dup.Key, "the younger duplicate loses the key")
	require.Len(t, scan.Problems, 1)
	require.True(t, scan.Problems[0].Kept)
	require.Contains(t, scan.Problems[0].Err.Error(), "invoice-1001")
}

func TestScanLegacyDamaged(t *testing.T) {
	scan, err := scanLegacy(filepath.Join(legacyFixtures, "damaged"), 0)
	require.NoError(t, err)
	require.Len(t, scan.Jobs, 1, "only the valid record migrates")
	require.Equal(t, "01JDQ8Z0A1B2C3D4E5F6G7H8J9", scan.Jobs[0].ID)

	problems := map[string]error{}
	for _, p := range scan.Problems {
		require.False(t, p.Kept)
		problems[filepath.Base(p.Path)] = p.Err
	}
	require.Len(t, problems, 5)
	for name, want := range map[string]error{
		"01JDQ8Z6M2N3P4Q5R6S7T8V9W0.json": jobstore.ErrCorrupt,   // truncated
		"01JDQ8Z7X2Y3Z4A5B6C7D8E9F0.json": jobstore.ErrCorrupt,   // not JSON
		"01JDQ8Z8G2H3J4K5M6N7P8Q9R0.json": jobstore.ErrCorrupt,   // id disagrees with file name
		"job-42.json":                     jobstore.ErrInvalidID, // not a ULID
		"01JDQ8ZAC2D3E4F5G6H7J8K9M0.json": jobstore.ErrCorrupt,   // unknown status
	} {
		require.Truef(t, errors.Is(problems[name], want), "%s: got %v, want %v", name, problems[name], want)
		require.Contains(t, problems[name].Error(), name, "the error names the file")
	}
}

func TestScanLegacyNotRegular(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "01JDQ8Z0A1B2C3D4E5F6G7H8J9.json"), 0o700))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "01JDQ8Z1K2M3N4P5Q6R7S8T9V0.json")))
	has, err := hasLegacyFiles(dir)
	require.NoError(t, err)
	require.False(t, has, "a directory or a symlink is not a legacy record")
	scan, err := scanLegacy(dir, 0)
	require.NoError(t, err)
	require.Empty(t, scan.Jobs)
	require.Len(t, scan.Problems, 2, "a directory and a symlink named like records are reported, never followed")
}
