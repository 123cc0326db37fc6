package httpapi

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Defaults of Options.
const (
	// DefaultMaxWait caps the wait long-poll when Options.MaxWait is zero.
	DefaultMaxWait = 60 * time.Second
	// DefaultWait is the wait long-poll's timeout when the request names
	// none (capped at MaxWait).
	DefaultWait = 30 * time.Second
	// BodyOverhead is added to jobstore.DefaultMaxPayload to make the
	// default request body limit: room for the fields around the payload.
	BodyOverhead = 64 << 10
	// DefaultMaxBatchBodyBytes caps the default body limit of a batch
	// submit (see Options.MaxBatchBodyBytes).
	DefaultMaxBatchBodyBytes = 64 << 20
)

// MinTokenLen is the shortest bearer token New accepts, in bytes: a short
// token can be guessed.
const MinTokenLen = 16

// AnyKind, in Options.AllowedKinds, allows every kind except the
// Options.ExplicitKinds (by default ExecKind).
const AnyKind = "*"

// ExecKind is the kind whose jobs run programs (execjob's kind), the
// default of Options.ExplicitKinds: the allow-list refuses it unless it is
// listed by name, because accepting it over HTTP is remote command
// execution. A program that runs jobs of another kind that must not be
// allowed by AnyKind passes its own Options.ExplicitKinds.
const ExecKind = "exec"

// TerminalHeader is the response header of the wait route: "true" when the
// returned job is in a terminal state, "false" when the wait timed out (or
// the server is shutting down) first and the job is returned as it is now.
const TerminalHeader = "Jobdir-Terminal"

// Options configures a Server. A nil *Options is the zero value, which New
// refuses: it has neither tokens nor InsecureNoAuth.
type Options struct {
	// Tokens are the accepted bearer tokens; a request must send one of them
	// as "Authorization: Bearer <token>". Several tokens allow rotation.
	// Each must be at least MinTokenLen bytes of printable ASCII (as the
	// header carries them). Empty Tokens requires InsecureNoAuth.
	Tokens []string
	// InsecureNoAuth serves every route without authentication. It is an
	// explicit opt-out for local development; it may not be combined with
	// Tokens. In this mode the server answers only requests whose Host is
	// an IP address or "localhost", which defeats DNS rebinding from a web
	// page in a local browser.
	InsecureNoAuth bool
	// AllowedKinds lists the kinds POST /v1/jobs and POST /v1/jobs/batch
	// accept. The entry AnyKind ("*") allows every kind except the
	// ExplicitKinds (by default ExecKind, "exec"), which are allowed only
	// when listed by name. Empty means []string{AnyKind}: any kind but
	// exec. So {"exec"} allows only exec jobs and {"*", "exec"} allows all.
	AllowedKinds []string
	// ExplicitKinds are the kinds AnyKind does not allow: each is accepted
	// only when AllowedKinds names it, because running its jobs is
	// something only trusted clients may ask for (jobdir serve passes
	// execjob.Kind). Nil means []string{ExecKind}; an empty non-nil slice
	// means none, so that AnyKind allows every kind.
	ExplicitKinds []string
	// Validators check the payload of a kind before a job of that kind is
	// submitted; an error (which should wrap jobstore.ErrInvalidInput) is
	// answered with 422 invalid_spec, so a bad payload is refused at the
	// door rather than failing when a worker runs it. Nil or a missing kind
	// means no check beyond the store's.
	Validators map[string]func(payload json.RawMessage) error
	// MaxBodyBytes limits request bodies; a larger one gets 413. Zero means
	// jobstore.DefaultMaxPayload + BodyOverhead.
	MaxBodyBytes int64
	// MaxBatchBodyBytes limits the body of POST /v1/jobs/batch, which holds
	// up to jobstore.MaxBatch specs; a larger one gets 413. Zero means
	// MaxBodyBytes times jobstore.MaxBatch, capped at
	// DefaultMaxBatchBodyBytes (64 MiB), and never less than MaxBodyBytes.
	// The server holds a batch's body and its decoded specs in memory at
	// once, so this bounds the memory one request can take.
	MaxBatchBodyBytes int64
	// MaxWait caps the timeout of the wait long-poll. Zero means
	// DefaultMaxWait.
	MaxWait time.Duration
	// MaxConcurrent bounds the requests the server serves at once, the
	// wait long-polls and GET /healthz apart; a request past it is
	// answered at once with 503 busy and Retry-After, and nothing is done.
	// Requests without a valid token are refused before they count. Zero
	// means DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxWaits bounds the wait long-polls in progress at once (503 busy
	// past it). A waiting request holds no job in memory, so this is far
	// above MaxConcurrent. Zero means DefaultMaxWaits.
	MaxWaits int
	// MaxBodyBytesInFlight bounds the bytes of request bodies the server
	// reads and decodes at once: a submit or batch submit takes its
	// declared Content-Length (or its route's body limit when no length
	// is declared) from this budget before it reads a byte, and is
	// answered 503 busy if it does not fit. Zero means
	// DefaultMaxBodyBytesInFlight (128 MiB), which lets two of the
	// largest batches in at once. It is raised to MaxBatchBodyBytes if
	// lower, so that any body within the limits can be admitted.
	MaxBodyBytesInFlight int64
	// MaxListBytes bounds a page of GET /v1/jobs by the size of its jobs
	// (jobstore.Job.Size: their payloads, results and errors): past it the
	// page ends early with "byte_limited": true and a cursor. So a page
	// of 1,000 jobs of 1 MiB each is never held in memory at once. Zero
	// means DefaultMaxListBytes (4 MiB).
	MaxListBytes int
	// Registry receives the server's metrics and is what GET /metrics
	// serves. Nil means a private registry that also holds the Go runtime
	// and process collectors.
	Registry *prometheus.Registry
	// Logger receives a line per request (Debug) and per server-side error
	// (Error). Nil means no logging.
	Logger *slog.Logger
	// LogDir is the directory of the exec jobs' logs (execjob's LogDir),
	// which GET /v1/jobs/{id}/log serves. Empty means the route answers
	// 404: this server keeps no logs, unless Logs is set.
	LogDir string
	// Logs, when not nil, is where the route reads the logs instead of
	// LogDir: for example a pgstore.Store's Logs, which every server of a
	// store in PostgreSQL reads, on whatever machine the job ran.
	Logs joblog.Logs
	// SubmitMiddleware wraps the submits of POST /v1/jobs and POST
	// /v1/jobs/batch (see jobstore.WithSubmitMiddleware), SubmitMiddleware[0]
	// outermost, with the request's ctx: a trace span per submit
	// (otelrunner.SubmitMiddleware), a default, a check. The other routes
	// use the store as it is.
	SubmitMiddleware []jobstore.SubmitMiddleware
}

// Server serves the HTTP API on one store. It implements http.Handler and
// is safe for concurrent use. Build it with New.
type Server struct {
	store jobstore.Client
	// submit is store, or store wrapped in Options.SubmitMiddleware.
	submit  jobstore.Client
	handler http.Handler // mux wrapped in cross-origin protection
	mux     *http.ServeMux
	// routes holds the patterns mux serves, as registered.
	routes  []string
	tokens  [][sha256.Size]byte
	noAuth  bool
	anyKind bool
	kinds   map[string]bool
	// explicit holds Options.ExplicitKinds.
	explicit map[string]bool
	validate map[string]func(json.RawMessage) error
	maxBody  int64
	// maxBatchBody is the body limit of the batch submit.
	maxBatchBody int64
	maxWait      time.Duration
	maxListBytes int
	log          *slog.Logger
	registry     *prometheus.Registry
	metrics      *metrics

	// requests, waits and bodies are the budgets of Options.MaxConcurrent,
	// MaxWaits and MaxBodyBytesInFlight (see admit).
	requests, waits, bodies budget
	logs                    joblog.Logs
}

// The routes, as net/http patterns. They are also the route label of the
// HTTP metrics.
const (
	routeSubmit  = "POST /v1/jobs"
	routeBatch   = "POST /v1/jobs/batch"
	routeList    = "GET /v1/jobs"
	routeGet     = "GET /v1/jobs/{id}"
	routeByKey   = "GET /v1/keys/{key...}"
	routeCancel  = "POST /v1/jobs/{id}/cancel"
	routeRetry   = "POST /v1/jobs/{id}/retry"
	routeWait    = "GET /v1/jobs/{id}/wait"
	routeStats   = "GET /v1/stats"
	routeHealth  = "GET /healthz"
	routeMetrics = "GET /metrics"
	routeNone    = "unmatched"
)

// New returns a Server for store configured by opts (nil means the zero
// Options). It returns an error if opts has no tokens and not
// InsecureNoAuth, has both, holds a token shorter than MinTokenLen or with
// bytes a header cannot carry, an invalid kind or a negative limit, or if
// the metrics cannot be registered with opts.Registry (for example because
// another Server already registered them there).
func New(store jobstore.Client, opts *Options) (*Server, error) {
	if store == nil {
		return nil, errors.New("httpapi: nil store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Server{
		store:        store,
		noAuth:       o.InsecureNoAuth,
		kinds:        make(map[string]bool),
		validate:     maps.Clone(o.Validators),
		maxBody:      o.MaxBodyBytes,
		maxBatchBody: o.MaxBatchBodyBytes,
		maxWait:      o.MaxWait,
		log:          o.Logger,
		logs:         logsOf(o),
	}
	s.submit = store
	if len(o.SubmitMiddleware) > 0 {
		c, err := jobstore.WithSubmitMiddleware(store, o.SubmitMiddleware...)
		if err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
		s.submit = c
	}
	switch {
	case len(o.Tokens) == 0 && !o.InsecureNoAuth:
		return nil, errors.New("httpapi: no bearer tokens: give at least one token, or set InsecureNoAuth to serve without authentication")
	case len(o.Tokens) > 0 && o.InsecureNoAuth:
		return nil, errors.New("httpapi: tokens and InsecureNoAuth given together: choose one")
	}
	for i, t := range o.Tokens {
		if err := checkToken(t); err != nil {
			return nil, fmt.Errorf("httpapi: token %d: %w", i+1, err)
		}
		s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
	}
	for _, l := range []struct {
		name string
		v    int64
	}{
		{"MaxBodyBytes", o.MaxBodyBytes}, {"MaxBatchBodyBytes", o.MaxBatchBodyBytes}, {"MaxConcurrent", int64(o.MaxConcurrent)},
		{"MaxWaits", int64(o.MaxWaits)}, {"MaxBodyBytesInFlight", o.MaxBodyBytesInFlight}, {"MaxListBytes", int64(o.MaxListBytes)},
	} {
		if l.v < 0 {
			return nil, fmt.Errorf("httpapi: %s is negative", l.name)
		}
	}
	if len(o.AllowedKinds) == 0 {
		s.anyKind = true
	}
	explicit := o.ExplicitKinds
	if explicit == nil {
		explicit = []string{ExecKind}
	}
	s.explicit = make(map[string]bool, len(explicit))
	for _, k := range explicit {
		if err := jobstore.ValidateKind(k); err != nil {
			return nil, fmt.Errorf("httpapi: explicit kind: %w", err)
		}
		s.explicit[k] = true
	}
	for _, k := range o.AllowedKinds {
		if k == AnyKind {
			s.anyKind = true
			continue
		}
		if err := jobstore.ValidateKind(k); err != nil {
			return nil, fmt.Errorf("httpapi: allowed kind: %w", err)
		}
		s.kinds[k] = true
	}
	if s.maxBody <= 0 {
		s.maxBody = jobstore.DefaultMaxPayload + BodyOverhead
	}
	if s.maxBatchBody <= 0 {
		s.maxBatchBody = defaultBatchBody(s.maxBody)
	}
	if s.maxWait <= 0 {
		s.maxWait = DefaultMaxWait
	}
	s.requests.max = int64(cmp.Or(o.MaxConcurrent, DefaultMaxConcurrent))
	s.waits.max = int64(cmp.Or(o.MaxWaits, DefaultMaxWaits))
	s.bodies.max = cmp.Or(o.MaxBodyBytesInFlight, DefaultMaxBodyBytesInFlight)
	s.maxListBytes = cmp.Or(o.MaxListBytes, DefaultMaxListBytes)
	// Else a body of the largest size allowed could never be admitted.
	s.bodies.max = max(s.bodies.max, s.maxBody, s.maxBatchBody)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.registry = o.Registry
	if s.registry == nil {
		s.registry = newDefaultRegistry()
	}
	m, err := newMetrics(s.registry, store)
	if err != nil {
		return nil, fmt.Errorf("httpapi: register metrics: %w", err)
	}
	s.metrics = m
	var allowed []string
	for _, k := range o.AllowedKinds {
		if k != AnyKind {
			allowed = append(allowed, k)
		}
	}
	s.KnownKinds(allowed...)

	s.mux = http.NewServeMux()
	for _, r := range []struct {
		pattern string
		h       http.Handler
	}{
		{routeSubmit, http.HandlerFunc(s.handleSubmit)},
		{routeBatch, http.HandlerFunc(s.handleBatch)},
		{routeList, http.HandlerFunc(s.handleList)},
		{routeGet, http.HandlerFunc(s.handleGet)},
		{routeByKey, http.HandlerFunc(s.handleByKey)},
		{routeCancel, http.HandlerFunc(s.handleCancel)},
		{routeRetry, http.HandlerFunc(s.handleRetry)},
		{routeWait, http.HandlerFunc(s.handleWait)},
		{routeDependents, http.HandlerFunc(s.handleDependents)},
		{routeBatchInfo, http.HandlerFunc(s.handleBatchInfo)},
		{routeLog, http.HandlerFunc(s.handleLog)},
		{routeStats, http.HandlerFunc(s.handleStats)},
		{routeWorkers, http.HandlerFunc(s.handleWorkers)},
		{routeQueues, http.HandlerFunc(s.handleQueues)},
		{routeQueuePause, http.HandlerFunc(s.handleQueuePause)},
		{routeQueueResume, http.HandlerFunc(s.handleQueueResume)},
		{routeQueueLimit, http.HandlerFunc(s.handleQueueLimit)},
		{routeSchedules, http.HandlerFunc(s.handleSchedules)},
		{routeScheduleAdd, http.HandlerFunc(s.handleScheduleAdd)},
		{routeSchedule, http.HandlerFunc(s.handleSchedule)},
		{routeScheduleRemove, http.HandlerFunc(s.handleScheduleRemove)},
		{routeSchedulePause, http.HandlerFunc(s.handleSchedulePause)},
		{routeScheduleResume, http.HandlerFunc(s.handleScheduleResume)},
		{routeScheduleRun, http.HandlerFunc(s.handleScheduleRun)},
		{routeHealth, http.HandlerFunc(s.handleHealth)},
		{routeMetrics, s.metricsHandler()},
	} {
		s.mux.Handle(r.pattern, r.h)
		s.routes = append(s.routes, r.pattern)
	}

	// A browser may send a cross-origin POST without a preflight; refuse
	// those so that a web page cannot submit or cancel jobs through a
	// user's browser.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, newError(http.StatusForbidden, CodeForbidden, "cross-origin request refused"))
	}))
	s.handler = cop.Handler(s.mux)
	return s, nil
}

// ServeHTTP authenticates the request, routes it, and records its metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	_, pattern := s.mux.Handler(r)
	route := pattern
	if route == "" {
		route = routeNone
	}
	inFlight := s.metrics.httpInFlight.WithLabelValues(route)
	inFlight.Inc()
	defer func() {
		inFlight.Dec()
		status := rec.code()
		s.metrics.observeHTTP(route, status, time.Since(start))
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("route", route), slog.Int("status", status),
			slog.Duration("duration", time.Since(start)))
	}()

	h := rec.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if pattern == routeHealth {
		// No token and no limit: it costs a few system calls.
		s.handler.ServeHTTP(rec, r)
		return
	}
	if e := s.authenticate(r); e != nil {
		s.reject(rec, r, e)
		return
	}
	if pattern == "" {
		// The mux answers by itself (404, 405, or a redirect to a clean
		// path); turn its plain-text errors into JSON ones.
		s.handler.ServeHTTP(&muxErrorWriter{statusRecorder: rec, s: s, r: r}, r)
		return
	}
	release, e := s.admit(r, pattern)
	if e != nil {
		s.reject(rec, r, e)
		return
	}
	defer release()
	s.handler.ServeHTTP(rec, r)
}

// checkToken returns an error if t cannot serve as a bearer token: shorter
// than MinTokenLen, or holding bytes other than printable ASCII.
func checkToken(t string) error {
	if len(t) < MinTokenLen {
		return fmt.Errorf("%d bytes, shorter than the %d bytes a token needs to be hard to guess (make one with: openssl rand -hex 32)", len(t), MinTokenLen)
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return fmt.Errorf("byte %d is not printable ASCII, which an Authorization header cannot carry as it is", i+1)
		}
	}
	return nil
}

// authenticate returns nil if r may proceed, or the error to answer with.
func (s *Server) authenticate(r *http.Request) *Error {
	if s.noAuth {
		if !localHost(r.Host) {
			return newError(http.StatusForbidden, CodeForbidden,
				"host %q refused: a server without authentication answers only to an IP address or localhost", truncate(r.Host, 64))
		}
		return nil
	}
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if auth == "" {
		return unauthorized("missing bearer token: send the header Authorization: Bearer <token>", "")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return unauthorized("malformed Authorization header: want Bearer <token>", "invalid_request")
	}
	// Compare digests so that every comparison has the same length, and
	// compare against every token so that the time taken does not say which
	// one (if any) matched.
	sum := sha256.Sum256([]byte(token))
	match := 0
	for i := range s.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], s.tokens[i][:])
	}
	if match != 1 {
		return unauthorized("invalid bearer token", "invalid_token")
	}
	return nil
}

// unauthorized returns a 401 error; bearerErr, if set, is the RFC 6750
// error attribute of the WWW-Authenticate challenge.
func unauthorized(msg, bearerErr string) *Error {
	e := newError(http.StatusUnauthorized, CodeUnauthorized, "%s", msg)
	e.challenge = `Bearer realm="jobdir"`
	if bearerErr != "" {
		e.challenge += `, error="` + bearerErr + `"`
	}
	return e
}

// localHost reports whether a Host header names an IP address or localhost.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil
}

// kindAllowed reports whether the allow-list lets HTTP submit kind.
func (s *Server) kindAllowed(kind string) bool {
	if s.kinds[kind] {
		return true
	}
	return s.anyKind && !s.explicit[kind]
}

// defaultBatchBody returns the default body limit of the batch submit for
// a single-submit limit of maxBody: room for jobstore.MaxBatch bodies,
// capped at DefaultMaxBatchBodyBytes, and never less than maxBody.
func defaultBatchBody(maxBody int64) int64 {
	limit := int64(DefaultMaxBatchBodyBytes)
	if maxBody < limit/jobstore.MaxBatch {
		limit = maxBody * jobstore.MaxBatch
	}
	return max(limit, maxBody)
}

// checkSpec applies the server's own rules to a decoded spec: a valid kind,
// allowed by the allow-list, and a payload that kind's validator accepts.
// It returns nil, or the error to answer with. The store checks the rest.
func (s *Server) checkSpec(spec jobstore.Spec) *Error {
	if err := jobstore.ValidateKind(spec.Kind); err != nil {
		return toError(err, http.StatusUnprocessableEntity, CodeInvalidSpec)
	}
	if !s.kindAllowed(spec.Kind) {
		msg := "this server does not accept jobs of kind %q"
		switch {
		case spec.Kind == ExecKind && s.explicit[spec.Kind]:
			msg += " (exec jobs run programs, so they must be allowed explicitly)"
		case s.explicit[spec.Kind]:
			msg += " (it must be allowed explicitly, by name)"
		}
		return newError(http.StatusForbidden, CodeKindNotAllowed, msg, spec.Kind)
	}
	if v := s.validate[spec.Kind]; v != nil {
		if err := v(spec.Payload); err != nil {
			return newError(http.StatusUnprocessableEntity, CodeInvalidSpec, "invalid payload for kind %q: %v", spec.Kind, err)
		}
	}
	return nil
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
	spec, err := decodeSubmit(r.Body)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	// A reference relative to /v1/jobs, so that it stays right when the
	// handler is mounted under a prefix.
	s.submitOne(w, r, spec, "jobs/")
}

// submitOne submits spec, if the server's rules accept it, and answers
// with the job: 201 Created, with a Location of location and the job's
// ID when location is not empty, for a new job; 200 for the job its key
// named already.
func (s *Server) submitOne(w http.ResponseWriter, r *http.Request, spec jobstore.Spec, location string) {
	if e := s.checkSpec(spec); e != nil {
		s.writeError(w, r, e)
		return
	}
	job, created, err := s.submit.Submit(r.Context(), spec)
	if err != nil {
		s.fail(w, r, err, http.StatusUnprocessableEntity, CodeInvalidSpec)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.metrics.submitted.WithLabelValues(s.metrics.kind(job.Kind)).Inc()
		if location != "" {
			w.Header().Set("Location", location+job.ID)
		}
	}
	s.writeJSON(w, status, FromJob(job))
}

// noPayloadLimit stands for the payload limit when the server checks a
// spec: the store, which knows its limit, checks the size.
const noPayloadLimit = math.MaxInt

// handleBatch submits several jobs at once. Every spec is checked as the
// single submit checks it before any is submitted, so that a refused batch
// creates nothing; the first bad spec is answered as the single submit
// would answer it, with its index in the message.
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBatchBody)
	specs, err := decodeBatch(r.Body)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	for i, spec := range specs {
		e := s.checkSpec(spec)
		if e == nil {
			// What the store would refuse in the single submit, refused
			// here so that the message names the index.
			if err := spec.Validate(noPayloadLimit); err != nil {
				e = toError(err, http.StatusUnprocessableEntity, CodeInvalidSpec)
			}
		}
		if e == nil {
			e = checkAfterSpecs(i, spec)
		}
		if e != nil {
			e.Message = fmt.Sprintf("jobs[%d]: %s", i, e.Message)
			s.writeError(w, r, e)
			return
		}
	}
	if len(specs) == 0 {
		s.writeJSON(w, http.StatusOK, BatchResponse{Results: []BatchResult{}})
		return
	}
	subs, err := s.submit.SubmitBatch(r.Context(), specs)
	if err != nil {
		e := batchError(err)
		if e.Status >= 500 {
			s.logError(r, e, err.Error())
			e.logged = true
		}
		s.writeError(w, r, e)
		return
	}
	if len(subs) != len(specs) {
		s.writeError(w, r, newError(http.StatusInternalServerError, CodeInternal,
			"store returned %d results for %d specs", len(subs), len(specs)))
		return
	}
	created := make(map[string]float64)
	for _, sub := range subs {
		if sub.Created {
			created[sub.Job.Kind]++
		}
	}
	for kind, n := range created {
		s.metrics.submitted.WithLabelValues(s.metrics.kind(kind)).Add(n)
	}
	s.writeBatch(w, subs)
}

// writeBatch writes the answer of a batch submit, a BatchResponse, a
// result at a time: it echoes every job with its payload, so buffering it
// whole would hold the batch in memory once more. Each result written is
// let go.
func (s *Server) writeBatch(w http.ResponseWriter, results []jobstore.Submitted) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_, _ = bw.WriteString(`{"results":[`)
	for i := range results {
		buf.Reset()
		if err := enc.Encode(BatchResult{Job: FromJob(results[i].Job), Created: results[i].Created}); err != nil {
			// Only a bug gets here; the client sees a truncated body.
			s.log.Error("encode response", slog.String("error", err.Error()))
			return
		}
		results[i] = jobstore.Submitted{}
		if i > 0 {
			_ = bw.WriteByte(',')
		}
		if _, err := bw.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); err != nil {
			return // the client went away
		}
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush()
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	job, err := s.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, FromJob(job))
}

// handleByKey returns the job whose idempotency key is the rest of the
// path (percent-encoded as a URL path: a key may hold "/" or "?").
func (s *Server) handleByKey(w http.ResponseWriter, r *http.Request) {
	job, err := s.store.GetByKey(r.Context(), r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, FromJob(job))
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: query: %s", jobstore.ErrInvalidInput, err.Error()), http.StatusBadRequest, CodeInvalidInput)
		return
	}
	opts, err := parseListQuery(q)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	opts.MaxBytes = s.maxListBytes
	page, err := s.store.List(r.Context(), opts)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	page = enforceByteBudget(page, opts)
	resp := ListResponse{Jobs: make([]Job, len(page.Jobs)), Next: page.Next, ByteLimited: page.ByteLimited}
	for i, j := range page.Jobs {
		resp.Jobs[i] = FromJob(j)
	}
	for _, e := range page.Errors {
		resp.Skipped = append(resp.Skipped, scrubPaths(e.Error()))
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "list skipped a record", slog.String("error", e.Error()))
	}
	s.writeJSON(w, http.StatusOK, resp)
}

// enforceByteBudget cuts page as opts.MaxBytes says, in case the store
// does not: the budget then bounds the response, if not the store's own
// memory.
func enforceByteBudget(page jobstore.Page, opts jobstore.ListOptions) jobstore.Page {
	b := storekit.NewPageBuilder(jobstore.ListOptions{MaxBytes: opts.MaxBytes})
	for _, j := range page.Jobs {
		if !b.Add(j) {
			cut := b.Page()
			cut.Errors = page.Errors
			return cut
		}
	}
	return page
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	job, err := s.store.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.metrics.canceled.WithLabelValues(s.metrics.kind(job.Kind), "http").Inc()
	s.writeJSON(w, http.StatusOK, FromJob(job))
}

func (s *Server) handleRetry(w http.ResponseWriter, r *http.Request) {
	job, err := s.store.Retry(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, FromJob(job))
}

// handleWait long-polls until the job is terminal, the timeout passes, or
// the server shuts down. In the last two cases it answers 200 with the job
// as it is now and TerminalHeader "false": a timeout is an expected outcome
// of a long-poll, not an error, and the client simply asks again.
func (s *Server) handleWait(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: query: %s", jobstore.ErrInvalidInput, err.Error()), http.StatusBadRequest, CodeInvalidInput)
		return
	}
	d, err := parseWaitTimeout(q, min(DefaultWait, s.maxWait), s.maxWait)
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.wait(w, r, d)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request, d time.Duration) {
	// The server's ReadTimeout and WriteTimeout may be shorter than the
	// wait: extend both for this request, or the connection's read
	// deadline would cancel the request context mid-wait. A writer that
	// does not support deadlines has none to extend.
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d + writeSlack)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	if drain, ok := r.Context().Value(drainKey{}).(context.Context); ok {
		stop := context.AfterFunc(drain, cancel)
		defer stop()
	}
	id := r.PathValue("id")
	job, err := s.store.Wait(ctx, id)
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil &&
		(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		// Our own timeout (or shutdown), not the client's: answer with the
		// job as it is now.
		job, err = s.store.Get(r.Context(), id)
	}
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	w.Header().Set(TerminalHeader, fmt.Sprint(job.State.Terminal()))
	s.writeJSON(w, http.StatusOK, FromJob(job))
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.store.Stats(r.Context())
	if err != nil {
		s.fail(w, r, err, http.StatusBadRequest, CodeInvalidInput)
		return
	}
	s.writeJSON(w, http.StatusOK, st)
}

// healthTimeout bounds the store call of the health check.
const healthTimeout = 5 * time.Second

// healthProbeID is the job the health check of a store that is not a
// jobstore.Pinger asks for: a valid ID that no job has, whose lookup costs
// the same whatever the store holds.
const healthProbeID = "00000000000000000000000000"

// handleHealth answers 200 {"status":"ok"} when the store says, within
// healthTimeout, that it can serve (jobstore.Pinger, or else a Get of an ID
// no job has), and 503 otherwise. It needs no token, says nothing about
// the jobs, and its cost does not grow with the store: the counts are at
// the authenticated GET /v1/stats.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	var err error
	if p, ok := s.store.(jobstore.Pinger); ok {
		err = p.Ping(ctx)
	} else if _, err = s.store.Get(ctx, healthProbeID); errors.Is(err, jobstore.ErrNotFound) {
		err = nil
	}
	if err != nil {
		// The details are for the log: this route answers anyone.
		s.log.LogAttrs(r.Context(), slog.LevelError, "health check failed", slog.String("error", err.Error()))
		e := newError(http.StatusServiceUnavailable, CodeUnavailable, "the store is not available; the server log says why")
		if errors.Is(err, jobstore.ErrClosed) {
			e = newError(http.StatusServiceUnavailable, CodeClosed, "the store is closed: the server is shutting down")
		}
		e.logged = true
		s.writeError(w, r, e)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// fail answers with the Error that err maps to; invalidStatus and
// invalidCode apply to jobstore.ErrInvalidInput (see toError). A server
// error is logged with err in full; the client gets its message without
// paths.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error, invalidStatus int, invalidCode string) {
	e := toError(err, invalidStatus, invalidCode)
	if e.Status >= 500 && !e.logged {
		s.logError(r, e, err.Error())
		e.logged = true
	}
	s.writeError(w, r, e)
}

// logError logs a server error answered with e; detail is the error in
// full.
func (s *Server) logError(r *http.Request, e *Error, detail string) {
	s.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("error", detail))
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, e *Error) {
	if e.Status >= 500 && !e.logged && e.Code != CodeBusy {
		s.logError(r, e, e.Message)
	}
	if e.challenge != "" {
		w.Header().Set("WWW-Authenticate", e.challenge)
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterValue(e.retryAfter))
	}
	s.writeJSON(w, e.Status, errorResponse{Error: e})
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	// Without HTML escaping, a payload comes back byte for byte as the
	// store keeps it (json.Marshal would rewrite <, > and & in it).
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a bug (an unencodable value) gets here.
		s.log.Error("encode response", slog.String("error", err.Error()))
		status = http.StatusInternalServerError
		body.Reset()
		body.WriteString(`{"error":{"code":"internal","message":"cannot encode the response"}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(body.Bytes())
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// code is the status written, or 200 if the handler wrote none (net/http
// sends 200 then).
func (w *statusRecorder) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// muxErrorWriter replaces the plain-text 404 and 405 the mux writes by the
// JSON errors of this API, keeping the mux's headers (such as Allow).
type muxErrorWriter struct {
	*statusRecorder
	s        *Server
	r        *http.Request
	wrote    bool
	swallows bool
}

func (w *muxErrorWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	var e *Error
	switch status {
	case http.StatusNotFound:
		e = newError(status, CodeNotFound, "no route for %s %s", w.r.Method, truncate(w.r.URL.Path, 200))
	case http.StatusMethodNotAllowed:
		e = newError(status, CodeMethodNotAllowed, "method %s is not allowed on %s (allowed: %s)",
			w.r.Method, truncate(w.r.URL.Path, 200), w.Header().Get("Allow"))
	default:
		w.statusRecorder.WriteHeader(status)
		return
	}
	w.swallows = true
	w.s.writeJSON(w.statusRecorder, status, errorResponse{Error: e})
}

func (w *muxErrorWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.swallows {
		return len(b), nil
	}
	return w.statusRecorder.Write(b)
}

// drainKey is the context key of the context NewHTTPServer cancels when
// the server shuts down, which ends wait long-polls early.
type drainKey struct{}

// writeSlack is how much longer than a long-poll the write deadline lasts.
const writeSlack = 30 * time.Second

// NewHTTPServer returns an *http.Server that serves h on addr with the
// timeouts a server exposed to a network needs: 10 s to read the headers,
// 1 min to read the body, 1 min to write the response (the wait route
// extends its own deadline), 2 min for an idle keep-alive connection, and
// 64 KiB of headers. Its Shutdown also ends the wait long-polls in progress
// (they answer with the job as it is), so that shutting down does not wait
// for them.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	drain, cancel := context.WithCancel(context.Background())
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), drainKey{}, drain)
		},
	}
	srv.RegisterOnShutdown(cancel)
	return srv
}

// logsOf returns where the server reads logs: o.Logs, else o.LogDir's
// files, else nil.
func logsOf(o Options) joblog.Logs {
	switch {
	case o.Logs != nil:
		return o.Logs
	case o.LogDir != "":
		return joblog.Dir{Path: o.LogDir}
	}
	return nil
}
