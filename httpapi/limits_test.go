package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// blockingStore holds Get and Wait calls until release is closed, and
// says on entered when one arrives.
type blockingStore struct {
	jobstore.Store
	entered chan string
	release chan struct{}
}

func newBlockingStore(t *testing.T) *blockingStore {
	s := memstore.New(nil)
	t.Cleanup(func() { _ = s.Close() })
	return &blockingStore{Store: s, entered: make(chan string, 100), release: make(chan struct{})}
}

func (b *blockingStore) Get(ctx context.Context, id string) (jobstore.Job, error) {
	b.entered <- "get"
	select {
	case <-b.release:
	case <-ctx.Done():
		return jobstore.Job{}, ctx.Err()
	}
	return b.Store.Get(ctx, id)
}

// Ping answers at once: the health check must not wait for the store's
// other calls.
func (b *blockingStore) Ping(context.Context) error { return nil }

func (b *blockingStore) Wait(ctx context.Context, id string) (jobstore.Job, error) {
	b.entered <- "wait"
	select {
	case <-b.release:
	case <-ctx.Done():
		return jobstore.Job{}, ctx.Err()
	}
	return b.Store.Get(ctx, id)
}

// startEnv serves api on a real listener; newEnv's memstore is replaced
// by whatever store api was built on.
func startEnv(t *testing.T, api *httpapi.Server, token string) *env {
	t.Helper()
	_, url := serve(t, api, nil)
	e := &env{t: t, api: api, client: &http.Client{}, token: token}
	e.srv = nil
	e.base = url
	return e
}

// TestConcurrencyCap: past MaxConcurrent requests in progress, a request
// is answered at once with 503 busy and Retry-After, without reaching the
// store; past MaxWaits long-polls the same. GET /healthz is not counted.
// Once requests end, their slots are free again.
func TestConcurrencyCap(t *testing.T) {
	store := newBlockingStore(t)
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{testToken}, MaxConcurrent: 2, MaxWaits: 1})
	require.NoError(t, err)
	e := startEnv(t, api, testToken)
	job, _, err := store.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)

	var wg sync.WaitGroup
	results := make(chan response, 3)
	for _, path := range []string{"/v1/jobs/" + job.ID, "/v1/jobs/" + job.ID, "/v1/jobs/" + job.ID + "/wait?timeout=30s"} {
		wg.Go(func() { results <- e.do("GET", path, "") })
		<-store.entered // each is in the store before the next starts
	}

	r := e.do("GET", "/v1/jobs/"+job.ID, "")
	r.apiError(t, http.StatusServiceUnavailable, httpapi.CodeBusy)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	r = e.do("GET", "/v1/stats", "")
	r.apiError(t, http.StatusServiceUnavailable, httpapi.CodeBusy)
	r = e.do("GET", "/v1/jobs/"+job.ID+"/wait?timeout=30s", "")
	r.apiError(t, http.StatusServiceUnavailable, httpapi.CodeBusy)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Empty(t, store.entered, "a refused request reached the store")

	r = e.do("GET", "/healthz", "")
	require.Equal(t, http.StatusOK, r.status, "healthz is not counted: %s", r.body)
	r = e.doWith("GET", "/v1/stats", "", nil)
	r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized) // refused before it counts

	close(store.release)
	wg.Wait()
	close(results)
	for r := range results {
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	for range 5 {
		require.Equal(t, http.StatusOK, e.do("GET", "/v1/jobs/"+job.ID, "").status, "slots are given back")
	}
}

// rawRequest sends head (a request line and headers, lines ended by
// "\n", without the blank line) and then the bytes of body on a new
// connection to e, and returns the connection.
func rawRequest(t *testing.T, e *env, head, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = io.WriteString(conn, strings.ReplaceAll(strings.TrimSuffix(head, "\n"), "\n", "\r\n")+"\r\n\r\n"+body)
	require.NoError(t, err)
	return conn
}

// readResponse reads one response from conn and, with wantClosed,
// requires the server to close the connection after it. The deadline
// only keeps a broken server from hanging the test.
func readResponse(t *testing.T, conn net.Conn, wantClosed bool) (*http.Response, []byte) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if wantClosed {
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the server kept the connection open, waiting for the body")
	}
	return resp, body
}

// TestRefusedBodiesAreNotRead: a request with a body that is refused
// before its handler (no token, over a limit) is answered at once and its
// connection closed, without waiting for the body: a client that trickles
// a body, or declares a huge one, costs nothing.
func TestRefusedBodiesAreNotRead(t *testing.T) {
	api, err := httpapi.New(memstore.New(nil), &httpapi.Options{Tokens: []string{testToken}, MaxBodyBytes: 1000})
	require.NoError(t, err)
	e := startEnv(t, api, testToken)
	for name, tc := range map[string]struct {
		head, body string
		status     int
	}{
		"no token, chunked body trickled": {"POST /v1/jobs HTTP/1.1\nHost: localhost\nTransfer-Encoding: chunked", "1\r\n{\r\n", 401},
		"no token, large declared body":   {"POST /v1/jobs/batch HTTP/1.1\nHost: localhost\nContent-Length: 60000000", `{"jobs":[`, 401},
		"wrong token, body":               {"POST /v1/jobs HTTP/1.1\nHost: localhost\nAuthorization: Bearer wrong-token-0123456789\nContent-Length: 500", "{", 401},
		"declared body over the limit":    {"POST /v1/jobs HTTP/1.1\nHost: localhost\nAuthorization: Bearer " + testToken + "\nContent-Length: 1001", "{", 413},
	} {
		t.Run(name, func(t *testing.T) {
			conn := rawRequest(t, e, tc.head, tc.body)
			resp, body := readResponse(t, conn, true)
			require.Equal(t, tc.status, resp.StatusCode, "%s", body)
		})
	}
	t.Run("a small complete body without a token keeps nothing waiting either", func(t *testing.T) {
		conn := rawRequest(t, e, "POST /v1/jobs HTTP/1.1\nHost: localhost\nContent-Length: 12", `{"kind":"k"}`)
		resp, _ := readResponse(t, conn, true)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}

// TestBodyBudget: bodies being received take their declared length (or
// the route's limit, when undeclared) from MaxBodyBytesInFlight; a body
// that does not fit is refused with 503 busy before a byte of it is read,
// and smaller ones still fit.
func TestBodyBudget(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{testToken}, MaxBodyBytes: 60_000, MaxBatchBodyBytes: 90_000, MaxBodyBytesInFlight: 100_000})
	require.NoError(t, err)
	e := startEnv(t, api, testToken)
	auth := "Authorization: Bearer " + testToken
	body := `{"kind":"k","payload":"` + strings.Repeat("x", 59_000) + `"}`
	head := func(path string, n int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\nHost: localhost\n%s\nContent-Length: %d", path, auth, n)
	}

	// One submit is in, its body arriving slowly: half of it sent.
	slow := rawRequest(t, e, head("/v1/jobs", len(body)), body[:len(body)/2])
	require.Eventually(t, func() bool { return api.BodyBytesInFlight() == int64(len(body)) }, 30*time.Second, time.Millisecond)

	// Another of the same size does not fit: refused at once.
	conn := rawRequest(t, e, head("/v1/jobs", len(body)), "")
	resp, msg := readResponse(t, conn, true)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", msg)
	require.Contains(t, string(msg), `"busy"`)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	// A batch of undeclared length would take its whole limit: refused.
	conn = rawRequest(t, e, fmt.Sprintf("POST /v1/jobs/batch HTTP/1.1\nHost: localhost\n%s\nTransfer-Encoding: chunked", auth), "")
	resp, msg = readResponse(t, conn, true)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", msg)
	// A small one fits beside it.
	r := e.do("POST", "/v1/jobs", `{"kind":"small"}`)
	r.job(t, http.StatusCreated)

	// The slow one completes, and gives its bytes back.
	_, err = io.WriteString(slow, body[len(body)/2:])
	require.NoError(t, err)
	resp, msg = readResponse(t, slow, false)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", msg)
	require.Zero(t, api.BodyBytesInFlight())
	e.do("POST", "/v1/jobs", body).job(t, http.StatusCreated)
}

// TestListByteBudget: a page of GET /v1/jobs stops at MaxListBytes of
// jobs, says so with byte_limited and a cursor, and the cursor reads the
// rest; the server cuts the page itself if its store does not.
func TestListByteBudget(t *testing.T) {
	for name, wrap := range map[string]func(jobstore.Store) jobstore.Store{
		"store honours the budget": func(s jobstore.Store) jobstore.Store { return s },
		"store ignores the budget": func(s jobstore.Store) jobstore.Store { return budgetBlindStore{s} },
	} {
		t.Run(name, func(t *testing.T) {
			mem := memstore.New(nil)
			t.Cleanup(func() { _ = mem.Close() })
			api, err := httpapi.New(wrap(mem), &httpapi.Options{Tokens: []string{testToken}, MaxListBytes: 250_000})
			require.NoError(t, err)
			e := startEnv(t, api, testToken)
			payload := json.RawMessage(`"` + strings.Repeat("p", 100_000) + `"`)
			var want []string
			for range 5 {
				j, _, err := mem.Submit(t.Context(), jobstore.Spec{Kind: "k", Payload: payload})
				require.NoError(t, err)
				want = append(want, j.ID)
			}
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 10)
				r := e.do("GET", "/v1/jobs?order=oldest&limit=1000&cursor="+cursor, "")
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				require.Less(t, len(r.body), 250_000+2_000, "a response over the budget")
				var page httpapi.ListResponse
				strictDecode(t, r.body, &page)
				for _, j := range page.Jobs {
					got = append(got, j.ID)
				}
				if page.Next == "" {
					require.False(t, page.ByteLimited)
					break
				}
				require.True(t, page.ByteLimited, "a page cut by the budget says so")
				require.Len(t, page.Jobs, 2)
				cursor = page.Next
			}
			require.Equal(t, want, got)
		})
	}
}

// budgetBlindStore lists without the byte budget, as a store that does
// not know it would.
type budgetBlindStore struct{ jobstore.Store }

func (b budgetBlindStore) List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error) {
	opts.MaxBytes = 0
	return b.Store.List(ctx, opts)
}
