package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/runner"
)

// A harness mounts the API on its own mux, here under /api.
func ExampleNew() {
	store := memstore.New(nil)
	defer store.Close()
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{"s3cret-example-token"}})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", http.StripPrefix("/api", api))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	call := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret-example-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var out struct {
			State string
			Key   string
			Error *httpapi.Error
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if out.Error != nil {
			fmt.Println(resp.StatusCode, out.Error.Code)
			return
		}
		fmt.Println(resp.StatusCode, out.State, out.Key)
	}
	call("POST", "/api/v1/jobs", `{"kind":"email.send","key":"welcome-42","payload":{"to":"ada@example.com"}}`)
	call("POST", "/api/v1/jobs", `{"kind":"email.send","key":"welcome-42"}`) // same key: the same job
	call("POST", "/api/v1/jobs", `{"kind":"exec","payload":["rm","-rf","/"]}`)
	call("GET", "/api/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "")
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// 201 queued welcome-42
	// 200 queued welcome-42
	// 403 kind_not_allowed
	// 404 not_found
}

// A process that serves the API and runs the jobs: the runner's events feed
// the API's metrics, and shutting the server down ends the long-polls.
func ExampleNewHTTPServer() {
	ctx, stop := context.WithCancel(context.Background())
	store := memstore.New(nil)
	defer store.Close()
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{"s3cret-example-token"}})
	if err != nil {
		panic(err)
	}
	r := runner.New(store, &runner.Options{OnEvent: runner.FeedMetrics(api)})
	r.Handle("greet", runner.HandlerFunc(func(ctx context.Context, job jobstore.Job) (json.RawMessage, error) {
		return json.RawMessage(`"hello"`), nil
	}))
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()

	srv := httpapi.NewHTTPServer("127.0.0.1:0", api)
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	call := func(method, path, body string) jobstore.Job {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret-example-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var job jobstore.Job
		if err := json.Unmarshal(b, &job); err != nil {
			panic(err)
		}
		return job
	}
	job := call("POST", "/v1/jobs", `{"kind":"greet"}`)
	job = call("GET", "/v1/jobs/"+job.ID+"/wait?timeout=30s", "")
	fmt.Println(job.State, string(job.Result))

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	fmt.Println("serve:", errors.Is(<-served, http.ErrServerClosed))
	stop()
	fmt.Println("run:", <-ran)
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// succeeded "hello"
	// serve: true
	// run: <nil>
}
