package pgstore

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
	"github.com/jobdir/jobdir/jobstore"
)

// columnFields are the JSON names of the jobstore.Job fields that have a
// column of their own (see cols and scanRow).
var columnFields = []string{"id", "key", "kind", "queue", "payload", "state", "attempt", "priority", "run_at",
	"updated_at", "started_at", "finished_at", "result", "cancel_requested", "worker", "tags", "meta",
	"after", "after_any", "batch", "after_batch"}

// jsonNames returns the JSON names of t's fields.
func jsonNames(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// TestDocFieldsCoverJob: every field of jobstore.Job is kept, in a column or
// in the doc, and in one place only. It fails when Job gains a field that
// pgstore would drop.
func TestDocFieldsCoverJob(t *testing.T) {
	kept := append(jsonNames(reflect.TypeFor[docFields]()), columnFields...)
	slices.Sort(kept)
	job := jsonNames(reflect.TypeFor[jobstore.Job]())
	slices.Sort(job)
	require.Equal(t, job, kept)
}

// TestReadsWholeJobDoc: a row written by an earlier version, whose doc
// holds the whole job, reads as the same job; its columns win over the
// doc's copies of them.
func TestReadsWholeJobDoc(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, pgtest.Pool(t, 2), &Options{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	defer s.Close()
	j, _, err := s.Submit(ctx, jobstore.Spec{Kind: "old", MaxAttempts: 5, Timeout: time.Minute})
	require.NoError(t, err)
	old := j
	old.Kind, old.Priority, old.Payload = "stale", 9, json.RawMessage(`{"stale":true}`)
	old.LastError = "an earlier failure"
	whole, err := json.Marshal(old)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE `+s.q.schema+`.jobs SET doc = $2 WHERE id = $1`, j.ID, whole)
	require.NoError(t, err)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	want := j
	want.LastError = "an earlier failure"
	require.Equal(t, want, got)
}
