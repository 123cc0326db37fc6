package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// allocBound is the most one request may make the server allocate in
// FuzzServeHTTP: 6 MiB, plus 16 bytes per byte of the request (its body
// is decoded, copied into the job, stored and sent back). The server
// there has a list budget of 512 KiB over a store of 5 MiB of payloads;
// without the budget a list alone allocates several times the bound.
func allocBound(request int) uint64 { return 6<<20 + 16*uint64(request) }

// fuzzServer is the server of FuzzServeHTTP: a memstore holding twenty
// jobs of 256 KiB and a few small ones, in every state, served with
// small limits. It is built once per process: fuzzing a fresh server per
// input would measure its construction.
var fuzzServer = sync.OnceValues(func() (*httpapi.Server, []string) {
	store := memstore.New(nil)
	ctx := contextForever()
	big := json.RawMessage(`"` + strings.Repeat("b", 256<<10) + `"`)
	var ids []string
	for i := range 20 {
		j, _, err := store.Submit(ctx, jobstore.Spec{Kind: "big", Key: fmt.Sprintf("big-%d", i), Payload: big})
		if err != nil {
			panic(err)
		}
		ids = append(ids, j.ID)
	}
	for _, kind := range []string{"done", "failed", "canceled", "running"} {
		j, _, err := store.Submit(ctx, jobstore.Spec{Kind: kind, MaxAttempts: 1})
		if err != nil {
			panic(err)
		}
		ids = append(ids, j.ID)
		switch kind {
		case "canceled":
			_, err = store.Cancel(ctx, j.ID)
		default:
			var c jobstore.Job
			c, err = store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{kind}})
			if err == nil && kind == "done" {
				_, err = store.Complete(ctx, c.Lease(), jobstore.Succeeded(json.RawMessage(`{"ok":true}`)))
			} else if err == nil && kind == "failed" {
				_, err = store.Complete(ctx, c.Lease(), jobstore.Outcome{Error: "boom"})
			}
		}
		if err != nil {
			panic(err)
		}
	}
	api, err := httpapi.New(store, &httpapi.Options{
		Tokens: []string{testToken}, MaxBodyBytes: 300 << 10, MaxBatchBodyBytes: 1 << 20,
		MaxListBytes: 512 << 10, MaxWait: time.Millisecond, Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		panic(err)
	}
	return api, ids
})

// FuzzServeHTTP sends the server whole HTTP requests (method, path,
// query, headers, token, body, chunked or not) and checks that none makes
// it allocate more than allocBound, panic, or answer with an error that is
// not the JSON of one of its codes.
func FuzzServeHTTP(f *testing.F) {
	_, ids := fuzzServer()
	auth := "Authorization: Bearer " + testToken + "\r\n"
	req := func(method, target, headers, body string) []byte {
		if body != "" && !strings.Contains(headers, "Transfer-Encoding") {
			headers += fmt.Sprintf("Content-Length: %d\r\n", len(body))
		}
		return []byte(method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n" + headers + "\r\n" + body)
	}
	payload := strings.Repeat("p", 250<<10)
	for _, target := range []string{"/v1/jobs?limit=1000", "/v1/jobs?limit=1000&order=oldest", "/v1/jobs?kind=big&limit=1000",
		"/v1/jobs?state=succeeded,failed", "/v1/jobs/" + ids[0], "/v1/jobs/" + ids[20] + "/wait?timeout=1s",
		"/v1/stats", "/metrics", "/healthz", "/v1/jobs?kind=%FF", "/nope", "/v1/jobs/..%2f..%2fetc"} {
		f.Add(req("GET", target, auth, ""))
	}
	f.Add(req("GET", "/v1/jobs?limit=1000", "", ""))
	f.Add(req("GET", "/v1/jobs?limit=1000", "Authorization: Bearer wrong\r\n", ""))
	f.Add(req("POST", "/v1/jobs", auth, `{"kind":"k","key":"a","payload":{"x":[1,2,3]},"priority":5,"timeout":"1s"}`))
	f.Add(req("POST", "/v1/jobs", auth, `{"kind":"k","payload":"`+payload+`"}`))
	f.Add(req("POST", "/v1/jobs", auth, "{\"kind\":\"k\",\"key\":\"\xff\"}"))
	f.Add(req("POST", "/v1/jobs/batch", auth, `{"jobs":[{"kind":"k","payload":"`+payload+`"},{"kind":"k","payload":"`+payload+`"},{"kind":"k","payload":"`+payload+`"}]}`))
	f.Add(req("POST", "/v1/jobs/batch", auth+"Transfer-Encoding: chunked\r\n", "d\r\n{\"jobs\":[{\"k\r\n0\r\n\r\n"))
	f.Add(req("POST", "/v1/jobs/"+ids[1]+"/cancel", auth, ""))
	f.Add(req("POST", "/v1/jobs/"+ids[22]+"/retry", auth, ""))
	f.Add(req("DELETE", "/v1/jobs", auth, ""))
	f.Add(req("POST", "/v1/jobs", "Content-Length: 99999999\r\n", "{"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		api, _ := fuzzServer()
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http refuses it before any handler
		}
		rec := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		api.ServeHTTP(rec, r)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		require.LessOrEqual(t, alloc, allocBound(len(raw)), "%s %s (%d bytes) allocated %d bytes", r.Method, r.URL, len(raw), alloc)

		if rec.Code >= 400 {
			var body struct {
				Error *httpapi.Error `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "error body %q", rec.Body.String())
			require.NotNil(t, body.Error)
			require.NotEmpty(t, body.Error.Code)
		}
	})
}

// contextForever is the context of work done outside any test.
func contextForever() context.Context { return context.Background() }
