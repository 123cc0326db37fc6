// Package httpapi serves a jobstore.Client (every jobstore.Store is one)
// over HTTP as JSON: submit (one job or a batch), get, list, cancel, retry
// and wait on jobs, read (and follow) an exec job's log, store statistics,
// a health check and Prometheus metrics. A *Server is an http.Handler, so a
// harness can mount it on its own mux, and NewHTTPServer wraps it in an
// *http.Server with the timeouts a server exposed to a network needs.
//
// The file docs/http-api.md in the jobdir repository describes every route
// with examples, the error codes and the limits.
//
// # Guarantees
//
// Every route except GET /healthz requires an Authorization: Bearer token
// that matches one of Options.Tokens (compared in constant time; at least
// MinTokenLen bytes), unless the server was built with
// Options.InsecureNoAuth. A request refused before its handler (no token,
// over a limit) is answered without reading its body, and its connection
// closed. Request bodies are limited to Options.MaxBodyBytes (a batch
// submit's to Options.MaxBatchBodyBytes), must be UTF-8, and unknown JSON
// fields are rejected.
//
// The cost of requests is bounded per request and in total: at most
// Options.MaxConcurrent requests are served at once (Options.MaxWaits wait
// long-polls), at most Options.MaxBodyBytesInFlight bytes of bodies are
// read at once, and a list page holds at most Options.MaxListBytes of jobs;
// past a limit the answer is 503 busy with Retry-After. GET /healthz reads
// no job (jobstore.Pinger). Error messages carry no absolute paths: the
// server logs them. A batch submit checks every spec
// before it submits any, so a refused batch creates no job. Every error is
// a JSON object {"error":{"code":...,"message":...}} whose code is one of
// the Code constants, with the HTTP status that code documents. A job
// goes out in the API's own form, Job (durations as strings such as
// "1m30s", times in RFC 3339), from every route that returns jobs; it
// does not follow jobstore.Job's on-disk JSON. Until a future version, a
// job also carries the deprecated timeout_ns (nanoseconds) next to
// timeout, and a submit takes it in place of timeout.
//
// The server keeps no job state of its own: every answer comes from the
// store, so two servers on one shared filestore answer alike for every job.
//
// # Security
//
// Accepting jobs of kind "exec" over HTTP is remote command execution: whoever
// holds a token can run any program as the worker's user. The kind
// allow-list (Options.AllowedKinds) therefore refuses "exec" unless it is
// listed by name. Serve on loopback or a Unix socket, or behind TLS, and
// keep tokens secret. docs/http-api.md in the repository has the whole
// security model.
//
// The server also refuses browsers' cross-origin requests that change
// state (http.CrossOriginProtection), so a web page cannot act through a
// user's browser, and without authentication it answers only to a Host
// that is an IP address or localhost, which defeats DNS rebinding.
//
// # Caveats
//
// The metrics counters and histograms count what this process saw (its own
// HTTP submissions, its own runner's claims); the jobs-by-state gauge reads
// the whole store at scrape time. With several replicas, sum the counters.
package httpapi
