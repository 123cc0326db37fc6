package storeurl_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
	"github.com/jobdir/jobdir/storeurl"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     storeurl.Location
		err      string
	}{
		{"relative path", "jobs", storeurl.Location{Kind: storeurl.File, Dir: "jobs"}, ""},
		{"file URL", "file:///var/lib/jobs", storeurl.Location{Kind: storeurl.File, Dir: "/var/lib/jobs"}, ""},
		{"file URL on localhost", "file://localhost/var/lib/jobs", storeurl.Location{Kind: storeurl.File, Dir: "/var/lib/jobs"}, ""},
		{"file URL on another host", "file://db/var/lib/jobs", storeurl.Location{}, "three slashes"},
		{"file URL with a query", "file:///x?a=1", storeurl.Location{}, "want file:///path/to/dir"},
		{"postgres", "postgres://app@db:5433/app?sslmode=disable",
			storeurl.Location{Kind: storeurl.Postgres, DSN: "postgres://app@db:5433/app?sslmode=disable"}, ""},
		{"postgresql with schema", "postgresql://app:secret@db/app?schema=jobs&sslmode=require",
			storeurl.Location{Kind: storeurl.Postgres, DSN: "postgresql://app:secret@db/app?sslmode=require", Schema: "jobs"}, ""},
		{"schema twice", "postgres://db/app?schema=a&schema=b", storeurl.Location{}, "give the schema once"},
		{"bad URL, password not shown", "postgres://app:se%zzcret@db/app", storeurl.Location{}, "cannot be read"},
		{"unknown scheme, password not shown", "mysql://root:se%zzcret@db/app", storeurl.Location{}, `store "mysql://...": unknown kind of store "mysql"`},
		{"empty", "", storeurl.Location{}, "the store is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := storeurl.Parse(tt.in)
			if tt.err != "" {
				require.ErrorIs(t, err, jobstore.ErrInvalidInput)
				require.ErrorContains(t, err, tt.err)
				require.NotContains(t, err.Error(), "se%zzcret", "never shows a password")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestLocationString(t *testing.T) {
	l, err := storeurl.Parse("postgres://app:secret@db/app?schema=jobs&sslmode=require")
	require.NoError(t, err)
	require.Equal(t, "postgres://app:xxxxx@db/app?sslmode=require (schema jobs)", l.String())
	l, err = storeurl.Parse("postgres://app@db/app")
	require.NoError(t, err)
	require.Equal(t, "postgres://app@db/app (schema "+pgstore.DefaultSchema+")", l.String())
	require.Equal(t, "/var/lib/jobs", storeurl.Location{Kind: storeurl.File, Dir: "/var/lib/jobs"}.String())
}

// TestOpenFile: a path and a file:// URL open a file store there, with
// the file store's options.
func TestOpenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	for _, s := range []string{dir, "file://" + dir} {
		st, err := storeurl.Open(t.Context(), s, &storeurl.Options{File: &filestore.Options{NoSync: true}})
		require.NoError(t, err, s)
		fs, ok := st.(*filestore.Store)
		require.True(t, ok, "%T", st)
		require.Equal(t, dir, fs.Dir())
		require.Contains(t, fs.Durability(), "NoSync", "the options reach the store")
		require.NoError(t, st.Close())
	}
	_, err := storeurl.Open(t.Context(), "sqlite://x", nil)
	require.ErrorIs(t, err, jobstore.ErrInvalidInput)
}

// TestOpenPostgres: a postgres:// URL opens the store in the schema its
// schema parameter names, over Options.Postgres.Schema, and the store's
// Close closes the pool Open made.
func TestOpenPostgres(t *testing.T) {
	schema := pgtest.Schema(t)
	url := pgtest.StoreURL(t, schema)
	st, err := storeurl.Open(t.Context(), url, &storeurl.Options{Postgres: &pgstore.Options{Schema: "not_this_one"}})
	require.NoError(t, err)
	ps, ok := st.(*pgstore.Store)
	require.True(t, ok, "%T", st)
	require.Equal(t, schema, ps.Schema())
	j, _, err := st.Submit(t.Context(), jobstore.Spec{Kind: "k", Key: "one"})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	// pgstore.OpenDSN takes the same URL.
	again, err := pgstore.OpenDSN(t.Context(), url, nil)
	require.NoError(t, err)
	defer again.Close()
	got, err := again.GetByKey(t.Context(), "one")
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
	_, err = pgstore.OpenDSN(t.Context(), url, &pgstore.Options{Schema: "other"})
	require.ErrorIs(t, err, jobstore.ErrInvalidInput, "the URL and the options name different schemas")
}
