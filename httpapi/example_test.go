package httpapi_test

import (
	"bytes"
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
			httpapi.Job                // a job's answer
			Error       *httpapi.Error `json:"error"` // or an error's
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

// A Go client encodes an httpapi.SubmitRequest and reads the answer as an
// httpapi.Job: the timeout is a duration string both ways, and times are
// RFC 3339.
func ExampleSubmitRequest() {
	store := memstore.New(nil)
	defer store.Close()
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{"s3cret-example-token"}})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()

	body, err := json.Marshal(httpapi.SubmitRequest{Kind: "report.build", Key: "nightly",
		Payload: json.RawMessage(`{"day":"2026-11-29"}`), Timeout: httpapi.Duration(10 * time.Minute),
		RunAt: time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	req, _ := http.NewRequest("POST", srv.URL+"/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer s3cret-example-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var job httpapi.Job
	if err := json.NewDecoder(resp.Body).Decode(&job); err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, job.State, job.Timeout, job.RunAt.Format(time.RFC3339))
	// Output:
	// {"kind":"report.build","key":"nightly","payload":{"day":"2026-11-29"},"run_at":"2030-01-01T09:00:00Z","timeout":"10m0s"}
	// 201 queued 10m0s 2030-01-01T09:00:00Z
}

// A process that serves the API and runs the jobs: the runner's attempts
// feed the API's metrics, and shutting the server down ends the long-polls.
func ExampleNewHTTPServer() {
	ctx, stop := context.WithCancel(context.Background())
	store := memstore.New(nil)
	defer store.Close()
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{"s3cret-example-token"}})
	if err != nil {
		panic(err)
	}
	r := runner.New(store, &runner.Options{Metrics: api})
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

	call := func(method, path, body string) httpapi.Job {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret-example-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var job httpapi.Job
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
