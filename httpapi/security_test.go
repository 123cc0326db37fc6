package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// countingStore counts the calls whose cost grows with the store.
type countingStore struct {
	jobstore.Store
	lists, stats, gets atomic.Int64
	pingErr            error
}

func (c *countingStore) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, opts)
}

func (c *countingStore) Stats(ctx context.Context) (jobstore.Stats, error) {
	c.stats.Add(1)
	return c.Store.Stats(ctx)
}

func (c *countingStore) Get(ctx context.Context, id string) (jobstore.Job, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, id)
}

// pingingStore is a countingStore that is a jobstore.Pinger.
type pingingStore struct {
	*countingStore
	pings atomic.Int64
}

func (p *pingingStore) Ping(ctx context.Context) error {
	p.pings.Add(1)
	return p.pingErr
}

// TestHealthIsCheap: GET /healthz never lists or counts jobs: it asks a
// jobstore.Pinger for Ping, any other store for one job by ID. A failing
// store gives 503 with a message that says nothing of the store (its
// error, paths included, goes to the log); the counts are at the
// authenticated GET /v1/stats.
func TestHealthIsCheap(t *testing.T) {
	newCounting := func(t *testing.T) *countingStore {
		m := memstore.New(nil)
		t.Cleanup(func() { _ = m.Close() })
		for range 50 {
			_, _, err := m.Submit(t.Context(), jobstore.Spec{Kind: "k"})
			require.NoError(t, err)
		}
		return &countingStore{Store: m}
	}
	serveStore := func(t *testing.T, store jobstore.Store, log *bytes.Buffer) *env {
		api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(log, nil))})
		require.NoError(t, err)
		return startEnv(t, api, testToken)
	}

	t.Run("pinger", func(t *testing.T) {
		c := newCounting(t)
		p := &pingingStore{countingStore: c}
		var log bytes.Buffer
		e := serveStore(t, p, &log)
		for range 10 {
			r := e.doWith("GET", "/healthz", "", nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.JSONEq(t, `{"status":"ok"}`, string(r.body))
		}
		require.Equal(t, int64(10), p.pings.Load())
		require.Zero(t, c.lists.Load()+c.stats.Load()+c.gets.Load(), "healthz read the store")

		c.pingErr = fmt.Errorf("filestore: ping: /srv/secret/jobs/tmp/01ARZ: %w", syscall.EROFS)
		r := e.doWith("GET", "/healthz", "", nil)
		r.apiError(t, http.StatusServiceUnavailable, httpapi.CodeUnavailable)
		require.NotContains(t, string(r.body), "/srv", "an unauthenticated answer names a path")
		require.NotContains(t, string(r.body), "read-only", "an unauthenticated answer tells the store's state")
		require.Contains(t, log.String(), "/srv/secret/jobs/tmp/01ARZ: read-only file system", "the log has the details")
	})
	t.Run("any store", func(t *testing.T) {
		c := newCounting(t)
		e := serveStore(t, c, &bytes.Buffer{})
		for range 10 {
			require.Equal(t, http.StatusOK, e.doWith("GET", "/healthz", "", nil).status)
		}
		require.Equal(t, int64(10), c.gets.Load(), "one Get per check")
		require.Zero(t, c.lists.Load()+c.stats.Load())
		r := e.do("GET", "/v1/stats", "")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, string(r.body), `"queued":50`, "the counts are at /v1/stats")
		require.NoError(t, c.Store.Close())
		e.doWith("GET", "/healthz", "", nil).apiError(t, http.StatusServiceUnavailable, httpapi.CodeClosed)
	})
}

// TestInvalidUTF8IsRefused: bytes that are not UTF-8, and escapes of half
// a surrogate pair, in keys, kinds or any other string of a request are
// answered 400 and create nothing: two different keys never become one
// job. A key written as U+FFFD, or as a full surrogate pair, is kept as
// written.
func TestInvalidUTF8IsRefused(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, body := range []string{
		"{\"kind\":\"k\",\"key\":\"order-\xff\"}",
		"{\"kind\":\"k\",\"key\":\"order-\xfe\"}",
		"{\"kind\":\"k\",\"key\":\"order-\xe2\x82\"}", // a truncated character
		"{\"kind\":\"k\xff\"}",
		"{\"kind\":\"k\",\"payload\":\"\xff\"}",
		`{"kind":"k","key":"order-\ud800"}`,
		`{"kind":"k","key":"order-\udfff"}`,
		`{"kind":"k","key":"order-\ud800\u0041"}`,
		`{"kind":"k\ud800"}`,
		`{"kind":"k","timeout":"1s\udc00"}`,
	} {
		for _, path := range []string{"/v1/jobs", "/v1/jobs/batch"} {
			b := body
			if path == "/v1/jobs/batch" {
				b = `{"jobs":[{"kind":"k"},` + body + `]}`
			}
			r := e.do("POST", path, b)
			r.apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
		}
	}
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Counts[jobstore.StateQueued], "a refused request created a job")

	j := e.do("POST", "/v1/jobs", `{"kind":"k","key":"order-\ufffd"}`).job(t, http.StatusCreated)
	require.Equal(t, "order-\uFFFD", j.Key)
	j = e.do("POST", "/v1/jobs", `{"kind":"k","key":"order-\ud83d\ude00"}`).job(t, http.StatusCreated)
	require.Equal(t, "order-😀", j.Key)
	j = e.do("POST", "/v1/jobs", `{"kind":"k","key":"order-😀"}`).job(t, http.StatusOK)
	require.Equal(t, "order-😀", j.Key, "the escaped and the raw form are one key")

	for _, path := range []string{"/v1/jobs?kind=%FF", "/v1/jobs?cursor=%FF", "/v1/jobs?state=queued%FF", "/v1/jobs/%FF%FE", "/v1/jobs/%FF/wait"} {
		e.do("GET", path, "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	}
}

// pathStore fails with errors that name files, as a file store's do.
type pathStore struct{ jobstore.Store }

const secretDir = "/srv/secret-store-dir"

func (pathStore) Get(context.Context, string) (jobstore.Job, error) {
	return jobstore.Job{}, fmt.Errorf("filestore: get: %w", &fs.PathError{Op: "open", Path: secretDir + "/done/01ARZ3NDEKTSV4RRFFQ69G5FAV.json", Err: syscall.EIO})
}

func (pathStore) Stats(context.Context) (jobstore.Stats, error) {
	return jobstore.Stats{}, fmt.Errorf("filestore: stats: %w", &filestore.CorruptError{Path: secretDir + "/queued/x.json", Reason: "bad"})
}

// TestErrorBodiesCarryNoPaths: errors from the store that name files reach
// the client with each path cut to its last element, and the log with the
// paths; also the names of records a list skipped.
func TestErrorBodiesCarryNoPaths(t *testing.T) {
	t.Run("store errors", func(t *testing.T) {
		m := memstore.New(nil)
		t.Cleanup(func() { _ = m.Close() })
		var log bytes.Buffer
		api, err := httpapi.New(pathStore{m}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		require.NoError(t, err)
		e := startEnv(t, api, testToken)
		r := e.do("GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "")
		apiErr := r.apiError(t, http.StatusInternalServerError, httpapi.CodeInternal)
		require.NotContains(t, string(r.body), secretDir)
		require.Contains(t, apiErr.Message, "01ARZ3NDEKTSV4RRFFQ69G5FAV.json: input/output error", "the message still says what failed")
		r = e.do("GET", "/v1/stats", "")
		r.apiError(t, http.StatusInternalServerError, httpapi.CodeCorrupt)
		require.NotContains(t, string(r.body), secretDir)
		require.Contains(t, log.String(), secretDir+"/done/01ARZ3NDEKTSV4RRFFQ69G5FAV.json", "the log keeps the path")
		require.Contains(t, log.String(), secretDir+"/queued/x.json")
	})
	t.Run("filestore", func(t *testing.T) {
		dir := t.TempDir()
		st, err := filestore.Open(t.Context(), dir, &filestore.Options{NoSync: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		api, err := httpapi.New(st, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
		e := startEnv(t, api, testToken)
		j := e.submit("k", "")
		good := e.submit("k", "")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "queued", j.ID+".json"), []byte("{not json"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "queued", "stray-file"), nil, 0o600))

		r := e.do("GET", "/v1/jobs/"+j.ID, "")
		r.apiError(t, http.StatusInternalServerError, httpapi.CodeCorrupt)
		require.NotContains(t, string(r.body), dir)
		require.Contains(t, string(r.body), j.ID+".json")
		r = e.do("GET", "/v1/jobs", "")
		require.Equal(t, http.StatusOK, r.status)
		require.NotContains(t, string(r.body), dir)
		var page httpapi.ListResponse
		strictDecode(t, r.body, &page)
		require.Len(t, page.Jobs, 1)
		require.Equal(t, good.ID, page.Jobs[0].ID)
		require.Len(t, page.Skipped, 2)
		require.Contains(t, strings.Join(page.Skipped, "\n"), j.ID+".json")
		require.Contains(t, strings.Join(page.Skipped, "\n"), "stray-file")
	})
}
