package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

func TestMain(m *testing.M) {
	testproc.Main(map[string]testproc.Func{"claim-one": claimOneChild})
	// A server that closes a connection after a refused request waits
	// half a second after its last write (net/http's rstAvoidanceDelay)
	// before it lets go: a goroutine that ends by itself.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

const testToken = "s3cret-token-for-tests"

// env is a Server on a memstore behind a real HTTP listener.
type env struct {
	t      *testing.T
	store  *memstore.Store
	api    *httpapi.Server
	srv    *httptest.Server
	base   string // the server's URL, when srv is nil
	client *http.Client
	token  string
}

// newEnv starts a server configured by opts (nil means one test token).
func newEnv(t *testing.T, opts *httpapi.Options, storeOpts *memstore.Options) *env {
	t.Helper()
	if opts == nil {
		opts = &httpapi.Options{Tokens: []string{testToken}}
	}
	store := memstore.New(storeOpts)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(store, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := &env{t: t, store: store, api: api, srv: srv, base: srv.URL, client: srv.Client()}
	if len(opts.Tokens) > 0 {
		e.token = opts.Tokens[0]
	}
	return e
}

// response is one HTTP answer, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with the env's token and reads the response.
func (e *env) do(method, path, body string) response {
	e.t.Helper()
	return e.doWith(method, path, body, func(r *http.Request) {
		if e.token != "" {
			r.Header.Set("Authorization", "Bearer "+e.token)
		}
	})
}

// doWith sends a request prepared by prep (which sets any auth) and reads
// the response.
func (e *env) doWith(method, path, body string, prep func(*http.Request)) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	base := e.base
	if e.srv != nil {
		base = e.srv.URL
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, base+path, rd)
	require.NoError(e.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if prep != nil {
		prep(req)
	}
	resp, err := e.client.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// job decodes the response as a job, requiring status: strictly into the
// wire type (every field known), then as the jobstore.Job it describes.
func (r response) job(t *testing.T, status int) jobstore.Job {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var w httpapi.Job
	strictDecode(t, r.body, &w)
	j, err := w.ToJob()
	require.NoError(t, err)
	return j
}

// strictDecode decodes the one JSON value of body into v, refusing fields
// v does not have.
func strictDecode(t *testing.T, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "body: %s", body)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "body: %s", body)
}

// apiError decodes the response as an error, requiring status and code.
func (r response) apiError(t *testing.T, status int, code string) httpapi.Error {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var body struct {
		Error *httpapi.Error `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), "body: %s", r.body)
	require.NotNil(t, body.Error, "body: %s", r.body)
	require.Equal(t, code, body.Error.Code, "body: %s", r.body)
	require.NotEmpty(t, body.Error.Message)
	return *body.Error
}

// submit submits a job of kind with the given key through the API.
func (e *env) submit(kind, key string) jobstore.Job {
	e.t.Helper()
	b, err := json.Marshal(map[string]any{"kind": kind, "key": key})
	require.NoError(e.t, err)
	return e.do("POST", "/v1/jobs", string(b)).job(e.t, http.StatusCreated)
}
