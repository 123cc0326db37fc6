package webui

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Store is the part of a jobstore.Client the dashboard uses: the same
// operations the HTTP API offers people. Every jobstore.Client (so every
// jobstore.Store) is one.
type Store interface {
	// Get returns a job or an error wrapping jobstore.ErrNotFound.
	Get(ctx context.Context, id string) (jobstore.Job, error)
	// List returns a page of jobs; the dashboard pages by its cursor.
	List(ctx context.Context, opts jobstore.ListOptions) (jobstore.Page, error)
	// Stats counts jobs by state.
	Stats(ctx context.Context) (jobstore.Stats, error)
	// Cancel cancels a job (see jobstore.Store).
	Cancel(ctx context.Context, id string) (jobstore.Job, error)
	// Retry queues a failed or canceled job again (see jobstore.Store).
	Retry(ctx context.Context, id string) (jobstore.Job, error)
	// Submit submits a job; the dashboard's re-run submits a copy of one.
	Submit(ctx context.Context, spec jobstore.Spec) (jobstore.Job, bool, error)
}

var _ Store = jobstore.Client(nil)

// Defaults of Options.
const (
	// DefaultSessionTTL is how long a session lasts when
	// Options.SessionTTL is zero.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultPoll is how often the pages update themselves when
	// Options.Poll is zero.
	DefaultPoll = 2 * time.Second
)

// Bounds on the work of one request.
const (
	// PageSize is the number of jobs a page of the table shows.
	PageSize = 50
	// ScanBudget is the most jobs one request of the table reads from the
	// store to fill a page when it filters jobs itself (by key, or by a
	// finished state); past it the page ends early with a link that goes
	// on.
	ScanBudget = 1000
	// MaxBulk is the most jobs one bulk action (or its count) reads, and
	// so the most it touches.
	MaxBulk = 10000
	// OverviewBudget is the most jobs the overview reads for its counts by
	// kind and its chart.
	OverviewBudget = 1000
	// maxSessions bounds the sessions held in memory; the oldest are
	// dropped first.
	maxSessions = 10000
)

// Options configures a Handler. A nil *Options is the zero value, which New
// refuses: it has neither tokens nor InsecureNoAuth.
type Options struct {
	// Tokens are the bearer tokens of the HTTP API; signing in takes one of
	// them. Empty requires InsecureNoAuth.
	Tokens []string
	// InsecureNoAuth serves the pages without sign-in, with a banner that
	// says so. It may not be combined with Tokens. As the API does, the
	// handler then answers only requests whose Host is an IP address or
	// localhost.
	InsecureNoAuth bool
	// AllowedKinds lists the kinds a re-run may submit, with the meaning
	// of httpapi.Options.AllowedKinds: "*" allows every kind but the
	// ExplicitKinds, which must be named; empty means {"*"}.
	AllowedKinds []string
	// ExplicitKinds are the kinds "*" does not allow, as
	// httpapi.Options.ExplicitKinds: nil means {"exec"}, the kind whose
	// jobs run programs; an empty non-nil slice means none. `jobdir serve`
	// passes execjob.Kind.
	ExplicitKinds []string
	// Log, when set, serves a job's log: the handler forwards
	// GET /ui/jobs/{id}/log to GET /v1/jobs/{id}/log?follow=1 on it, with
	// the signed-in session's bearer token. Nil means the pages show no
	// log. `jobdir serve` passes its httpapi.Server.
	Log http.Handler
	// SessionTTL is how long a session lasts after sign-in. Zero means
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// SecureCookie marks the session cookie Secure even on plain HTTP
	// requests, for a server behind a proxy that ends TLS. Over TLS it is
	// always Secure.
	SecureCookie bool
	// Poll is how often the pages update themselves. Zero means
	// DefaultPoll.
	Poll time.Duration
	// Logger receives server-side errors. Nil means no logging.
	Logger *slog.Logger
	// Deleted, when set, is called after the dashboard deleted a finished
	// job (a store that is a jobstore.Deleter), to delete what goes with
	// it elsewhere: `jobdir serve` removes the job's log file. An error it
	// returns is logged; the job stays deleted.
	Deleted func(ctx context.Context, id string) error
}

// Handler serves the dashboard under /ui/. It implements http.Handler and
// is safe for concurrent use. Build it with New.
type Handler struct {
	store   Store
	opts    Options
	tokens  [][sha256.Size]byte
	kinds   map[string]bool
	anyKind bool
	// explicit holds Options.ExplicitKinds.
	explicit map[string]bool
	sessions sessions
	// noAuthCSRF is the CSRF token of every page when there are no
	// sessions (InsecureNoAuth).
	noAuthCSRF string
	pages      map[string]*template.Template
	static     http.Handler
	handler    http.Handler
	log        *slog.Logger

	overviewMu    sync.Mutex
	overviewCache map[string]*overviewData // by chart range
}

//go:embed assets
var assets embed.FS

// Prefix is the path the handler serves under.
const Prefix = "/ui/"

// New returns a Handler on store configured by opts. It returns an error
// if opts has no tokens and not InsecureNoAuth, or has both.
func New(store Store, opts *Options) (*Handler, error) {
	if store == nil {
		return nil, errors.New("webui: nil store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case len(o.Tokens) == 0 && !o.InsecureNoAuth:
		return nil, errors.New("webui: no bearer tokens: give at least one token, or set InsecureNoAuth to serve without sign-in")
	case len(o.Tokens) > 0 && o.InsecureNoAuth:
		return nil, errors.New("webui: tokens and InsecureNoAuth given together: choose one")
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	h := &Handler{store: store, opts: o, kinds: map[string]bool{}, log: o.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	for _, t := range o.Tokens {
		h.tokens = append(h.tokens, sha256.Sum256([]byte(t)))
	}
	if len(o.AllowedKinds) == 0 {
		h.anyKind = true
	}
	explicit := o.ExplicitKinds
	if explicit == nil {
		explicit = []string{"exec"}
	}
	h.explicit = make(map[string]bool, len(explicit))
	for _, k := range explicit {
		h.explicit[k] = true
	}
	for _, k := range o.AllowedKinds {
		if k == "*" {
			h.anyKind = true
		} else {
			h.kinds[k] = true
		}
	}
	h.sessions.m = make(map[string]*session)
	h.noAuthCSRF = randomToken()
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("webui: %w", err)
	}
	h.pages = pages
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("webui: %w", err)
	}
	h.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(static))

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"{$}", h.authed(h.handleOverview))
	mux.HandleFunc("GET "+Prefix+"signin", h.handleSignInPage)
	mux.HandleFunc("POST "+Prefix+"signin", h.handleSignIn)
	mux.HandleFunc("POST "+Prefix+"signout", h.authed(h.handleSignOut))
	mux.HandleFunc("GET "+Prefix+"jobs", h.authed(h.handleJobs))
	mux.HandleFunc("GET "+Prefix+"jobs/{id}", h.authed(h.handleJob))
	mux.HandleFunc("GET "+Prefix+"jobs/{id}/log", h.authed(h.handleLog))
	mux.HandleFunc("POST "+Prefix+"jobs/{id}/{action}", h.authed(h.handleAction))
	mux.HandleFunc("GET "+Prefix+"workers", h.authed(h.handleWorkers))
	mux.HandleFunc("GET "+Prefix+"queues", h.authed(h.handleQueues))
	mux.HandleFunc("POST "+Prefix+"queues/{queue}/{action}", h.authed(h.handleQueueAction))
	mux.HandleFunc("GET "+Prefix+"schedules", h.authed(h.handleSchedules))
	mux.HandleFunc("POST "+Prefix+"schedules/{name}/{action}", h.authed(h.handleScheduleAction))
	mux.HandleFunc("GET "+Prefix+"bulk", h.authed(h.handleBulkCount))
	mux.HandleFunc("POST "+Prefix+"bulk", h.authed(h.handleBulk))
	mux.HandleFunc("GET "+Prefix+"static/", h.static.ServeHTTP)

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.refuse(w, r, http.StatusForbidden, "cross-site request refused: act from the dashboard's own pages")
	}))
	h.handler = cop.Handler(mux)
	return h, nil
}

// ServeHTTP serves the dashboard's pages, data and static files.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	if !strings.HasPrefix(r.URL.Path, Prefix+"static/") {
		hd.Set("Cache-Control", "no-store")
	}
	if h.opts.InsecureNoAuth && !localHost(r.Host) {
		h.refuse(w, r, http.StatusForbidden, "a dashboard without sign-in answers only to an IP address or localhost")
		return
	}
	h.handler.ServeHTTP(w, r)
}

// localHost reports whether a Host header names an IP address or localhost.
func localHost(host string) bool {
	if hst, _, err := net.SplitHostPort(host); err == nil {
		host = hst
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil
}

// kindAllowed reports whether a re-run may submit a job of kind.
func (h *Handler) kindAllowed(kind string) bool {
	return h.kinds[kind] || h.anyKind && !h.explicit[kind]
}

// wantsJSON reports whether the request comes from the pages' script,
// which asks for JSON answers and live fragments.
func wantsJSON(r *http.Request) bool {
	return r.Header.Get("Jobdir-UI") != ""
}

// refuse answers an error: JSON to the pages' script, a plain page
// otherwise.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if wantsJSON(r) {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = h.pages["error"].ExecuteTemplate(w, "layout", pageData{Title: http.StatusText(status), NoAuth: h.opts.InsecureNoAuth,
		Base: Prefix, Body: errorPage{Status: status, Message: msg}})
}

// storeError answers a store error in plain words.
func (h *Handler) storeError(w http.ResponseWriter, r *http.Request, err error) {
	var te *jobstore.TransitionError
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		h.refuse(w, r, http.StatusNotFound, "no job has that ID (it may have been pruned)")
	case errors.Is(err, jobstore.ErrInvalidID):
		h.refuse(w, r, http.StatusBadRequest, "that is not a job ID")
	case errors.Is(err, jobstore.ErrDependencyFailed):
		msg := "a job it depends on failed or was canceled, and is still so: retry that job first"
		var de *jobstore.DependencyError
		if errors.As(err, &de) {
			msg = "it cannot be retried yet: " + de.Error()
		}
		h.refuse(w, r, http.StatusConflict, msg)
	case errors.Is(err, jobstore.ErrDependedOn):
		msg := "a waiting job depends on it, so it is kept until that job no longer waits"
		var de *jobstore.DependencyError
		if errors.As(err, &de) {
			msg += " (" + de.Detail + ")"
		}
		h.refuse(w, r, http.StatusConflict, msg)
	case errors.As(err, &te):
		h.refuse(w, r, http.StatusConflict, fmt.Sprintf("the job is %s, so it cannot become %s", te.From, te.To))
	case errors.Is(err, jobstore.ErrInvalidInput):
		h.refuse(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		h.refuse(w, r, http.StatusServiceUnavailable, "the request ended before the store answered")
	default:
		h.log.LogAttrs(r.Context(), slog.LevelError, "dashboard request failed",
			slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		h.refuse(w, r, http.StatusInternalServerError, "the store failed; the server log says why")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// randomToken returns 32 random bytes, base64url-encoded.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}
