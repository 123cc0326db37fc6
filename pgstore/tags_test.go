package pgstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// TestOpenUpgradesToTags: Open of a version-7 schema adds the tags and
// meta columns; a job inserted by the release before reads with none, and
// a tagged job keeps its tags and metadata when a process of the release
// before rewrites its doc and state, as its Complete does.
func TestOpenUpgradesToTags(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	require.NoError(t, pgstore.MigrateTo(ctx, pool, schema, 7))
	_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.jobs (id, kind, state, priority, run_at, attempt, updated_at, doc)
		VALUES ('01000000000000000000000001', 'old', 'queued', 0, now(), 0, now(),
			convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8'))`)
	require.NoError(t, err)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	old, err := s.Get(ctx, "01000000000000000000000001")
	require.NoError(t, err)
	require.Nil(t, old.Tags)
	require.Nil(t, old.Meta)

	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "new", Tags: []string{"a", "b"}, Meta: map[string]string{"m": "v"}})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET state = 'succeeded', finished_at = now(), version = version + 1,
		doc = convert_to('{"max_attempts":3,"created_at":"2026-01-01T00:00:00Z"}', 'UTF8') WHERE id = $1`, j.ID)
	require.NoError(t, err)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
	require.Equal(t, []string{"a", "b"}, got.Tags)
	require.Equal(t, map[string]string{"m": "v"}, got.Meta)
	page, err := s.List(ctx, jobstore.ListOptions{Tag: "b"})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, j.ID, page.Jobs[0].ID)
}

// TestCorruptMetaColumn: a meta column that is not an object of strings
// (written by hand) makes its job corrupt, named with the column; the
// other jobs read as ever.
func TestCorruptMetaColumn(t *testing.T) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t, 4)
	s, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: schema, RecoverInterval: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	bad, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Meta: map[string]string{"n": "1"}})
	require.NoError(t, err)
	good, _, err := s.Submit(ctx, jobstore.Spec{Kind: "k", Meta: map[string]string{"n": "2"}})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET meta = '{"n": 1}' WHERE id = $1`, bad.ID)
	require.NoError(t, err)
	_, err = s.Get(ctx, bad.ID)
	require.ErrorIs(t, err, jobstore.ErrCorrupt)
	require.ErrorContains(t, err, "meta column")
	got, err := s.Get(ctx, good.ID)
	require.NoError(t, err)
	require.Equal(t, "2", got.Meta["n"])
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET tags = '{"a": 1}' WHERE id = $1`, good.ID)
	require.Error(t, err, "the tags column holds arrays only")
}
