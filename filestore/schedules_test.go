package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// TestSchedulesFileDamaged: a SCHEDULES that does not decode, or holds an
// invalid schedule, or is a link planted for it, is reported as corrupt,
// naming the file; no change overwrites it, a link is never followed, and
// the schedules read again once it is mended.
func TestSchedulesFileDamaged(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, path string){
		"not JSON": func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte("{"), 0o600)) },
		"invalid schedule": func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, []byte(`{"schedules":{"x":{"name":"x","spec":"61 * * * *"}}}`), 0o600))
		},
		"a link": func(t *testing.T, p string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			require.NoError(t, os.WriteFile(target, []byte(`{"schedules":{}}`), 0o600))
			require.NoError(t, os.Symlink(target, p))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openAt(t, dir, &Options{NoSync: true})
			p := filepath.Join(dir, schedulesFile)
			plant(t, p)
			before, err := os.Lstat(p)
			require.NoError(t, err)

			_, err = s.Schedules(t.Context())
			require.ErrorIs(t, err, jobstore.ErrCorrupt)
			require.ErrorContains(t, err, p)
			_, err = s.AddSchedule(t.Context(), jobstore.Schedule{Name: "n", Spec: "@daily", Job: jobstore.Spec{Kind: "k"}}, false)
			require.ErrorIs(t, err, jobstore.ErrCorrupt, "a change over a damaged file")
			require.ErrorIs(t, s.SetRetention(t.Context(), jobstore.Retention{Succeeded: jobstore.MinRetention}), jobstore.ErrCorrupt)
			after, err := os.Lstat(p)
			require.NoError(t, err)
			require.True(t, os.SameFile(before, after), "the damaged file was replaced")

			require.NoError(t, os.Remove(p)) // mended: removed
			_, err = s.AddSchedule(t.Context(), jobstore.Schedule{Name: "n", Spec: "@daily", Job: jobstore.Spec{Kind: "k"}}, false)
			require.NoError(t, err)
			all, err := s.Schedules(t.Context())
			require.NoError(t, err)
			require.Len(t, all, 1)
		})
	}
}
