package webui

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// CookieName is the name of the session cookie.
const CookieName = "jobdir_session"

// CSRFField is the form field, and CSRFHeader the header, that carry a
// session's CSRF token on every POST.
const (
	CSRFField  = "csrf"
	CSRFHeader = "X-CSRF-Token"
)

// session is one signed-in browser.
type session struct {
	// token is the bearer token it signed in with, sent to Options.Log.
	token   string
	csrf    string
	expires time.Time
}

// sessions holds the signed-in sessions by their cookie value.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func (s *sessions) add(token string, ttl time.Duration) (id string, sess *session) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		var oldest string
		for k, v := range s.m {
			if v.expires.Before(now) {
				delete(s.m, k)
			} else if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, oldest)
		}
	}
	id = randomToken()
	sess = &session{token: token, csrf: randomToken(), expires: now.Add(ttl)}
	s.m[id] = sess
	return id, sess
}

// get returns the live session of id, or nil; an expired one is dropped.
func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.m[id]
	if sess != nil && !time.Now().Before(sess.expires) {
		delete(s.m, id)
		return nil
	}
	return sess
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

type sessionKey struct{}

// sessionOf returns the request's session (nil with InsecureNoAuth).
func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

// csrfOf returns the CSRF token the request's pages carry.
func (h *Handler) csrfOf(r *http.Request) string {
	if s := sessionOf(r); s != nil {
		return s.csrf
	}
	return h.noAuthCSRF
}

// authed wraps a handler that needs a session (unless InsecureNoAuth) and,
// for a POST, the session's CSRF token. A page asked without a session
// redirects to the sign-in form; anything else is answered 401.
func (h *Handler) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.opts.InsecureNoAuth {
			c, err := r.Cookie(CookieName)
			var sess *session
			if err == nil {
				sess = h.sessions.get(c.Value)
			}
			if sess == nil {
				if r.Method == http.MethodGet && !wantsJSON(r) {
					http.Redirect(w, r, Prefix+"signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
					return
				}
				h.refuse(w, r, http.StatusUnauthorized, "not signed in, or the session has ended: sign in again")
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
		}
		if r.Method == http.MethodPost {
			got := r.Header.Get(CSRFHeader)
			if got == "" {
				got = r.PostFormValue(CSRFField)
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(h.csrfOf(r))) != 1 {
				h.refuse(w, r, http.StatusForbidden, "this form is out of date or did not come from the dashboard: reload the page and try again")
				return
			}
		}
		next(w, r)
	}
}

// safeNext returns where to go after sign-in: a path of the dashboard,
// never another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

type signInPage struct {
	Next  string
	Error string
}

func (h *Handler) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	if h.opts.InsecureNoAuth {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "signin", "Sign in", signInPage{Next: safeNext(r.URL.Query().Get("next"))})
}

// handleSignIn exchanges a bearer token for a session cookie.
func (h *Handler) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if h.opts.InsecureNoAuth {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	sum := sha256.Sum256([]byte(token))
	match := 0
	for i := range h.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], h.tokens[i][:])
	}
	if match != 1 {
		h.render(w, r, http.StatusUnauthorized, "signin", "Sign in",
			signInPage{Next: next, Error: "That token is not one this server accepts."})
		return
	}
	id, _ := h.sessions.add(token, h.opts.SessionTTL)
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    id,
		Path:     Prefix,
		MaxAge:   int(h.opts.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil || h.opts.SecureCookie,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// handleSignOut ends the session and clears its cookie.
func (h *Handler) handleSignOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		h.sessions.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil || h.opts.SecureCookie, SameSite: http.SameSiteStrictMode})
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]string{"location": Prefix + "signin"})
		return
	}
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}
