package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIsStore(t *testing.T) {
	base := t.TempDir()
	is := func(dir string) bool {
		t.Helper()
		ok, err := IsStore(dir)
		require.NoError(t, err)
		return ok
	}
	require.False(t, is(filepath.Join(base, "missing")), "a missing directory")
	require.False(t, is(base), "an empty directory")

	other := filepath.Join(base, "other")
	require.NoError(t, os.MkdirAll(other, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(other, "README"), []byte("hi\n"), 0o600))
	require.False(t, is(other), "a directory of other files")
	names, err := OtherFiles(other, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"README"}, names)
	creating := filepath.Join(base, "creating")
	require.NoError(t, os.MkdirAll(creating, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(creating, ".FORMAT.123.1.5"), nil, 0o600))
	require.False(t, is(creating))
	names, err = OtherFiles(creating, 3)
	require.NoError(t, err)
	require.Empty(t, names, "the temporary file of a FORMAT another process is writing")
	creating = filepath.Join(base, "begun")
	require.NoError(t, os.MkdirAll(filepath.Join(creating, dirTmp), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(creating, createLockFile), nil, 0o600))
	require.True(t, is(creating), "a store whose creation has begun")
	names, err = OtherFiles(creating, 3)
	require.NoError(t, err)
	require.Empty(t, names, "the layout of a store being created")
	volume := filepath.Join(base, "volume")
	require.NoError(t, os.MkdirAll(filepath.Join(volume, "lost+found"), 0o700))
	require.False(t, is(volume))
	names, err = OtherFiles(volume, 3)
	require.NoError(t, err)
	require.Empty(t, names, "the root of a new volume")
	names, err = OtherFiles(filepath.Join(base, "missing"), 3)
	require.NoError(t, err)
	require.Empty(t, names)

	store := filepath.Join(base, "store")
	s, err := Open(t.Context(), store, &Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.True(t, is(store))

	require.True(t, is(filepath.Join(legacyFixtures, "basic")), "the old store's records")

	file := filepath.Join(other, "README")
	_, err = IsStore(file)
	require.Error(t, err, "a file is not a directory to probe")
}
