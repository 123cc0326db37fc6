package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

func TestNewRefusesUnsafeOptions(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	for name, opts := range map[string]*httpapi.Options{
		"nil options":              nil,
		"no tokens":                {},
		"tokens and no-auth":       {Tokens: []string{testToken}, InsecureNoAuth: true},
		"empty token":              {Tokens: []string{testToken, ""}},
		"short token":              {Tokens: []string{testToken, "fifteen-bytes.."}},
		"token with a space":       {Tokens: []string{"a token with spaces in it"}},
		"token not ASCII":          {Tokens: []string{"tökenwithumlauts-and-more"}},
		"invalid kind in allow":    {Tokens: []string{testToken}, AllowedKinds: []string{"bad kind"}},
		"empty kind in allow-list": {Tokens: []string{testToken}, AllowedKinds: []string{""}},
		"invalid explicit kind":    {Tokens: []string{testToken}, ExplicitKinds: []string{"bad kind"}},
		"negative limit":           {Tokens: []string{testToken}, MaxConcurrent: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := httpapi.New(store, opts)
			require.Error(t, err)
		})
	}
	t.Run("a token of the minimum length", func(t *testing.T) {
		_, err := httpapi.New(store, &httpapi.Options{Tokens: []string{strings.Repeat("x", httpapi.MinTokenLen)}, Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
	})
	t.Run("nil store", func(t *testing.T) {
		_, err := httpapi.New(nil, &httpapi.Options{InsecureNoAuth: true})
		require.Error(t, err)
	})
	t.Run("metrics registered twice", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		_, err := httpapi.New(store, &httpapi.Options{Tokens: []string{testToken}, Registry: reg})
		require.NoError(t, err)
		_, err = httpapi.New(store, &httpapi.Options{Tokens: []string{testToken}, Registry: reg})
		require.Error(t, err)
	})
}

func TestAuth(t *testing.T) {
	e := newEnv(t, &httpapi.Options{Tokens: []string{"the-first-token-0001", "the-second-token-002"}}, nil)
	bearer := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", v) }
	}
	for _, path := range []string{"/v1/jobs", "/v1/stats", "/metrics", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "/no/such/route"} {
		t.Run(path, func(t *testing.T) {
			r := e.doWith("GET", path, "", nil)
			r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
			require.Equal(t, `Bearer realm="jobdir"`, r.header.Get("WWW-Authenticate"))

			r = e.doWith("GET", path, "", bearer("Bearer wrong-token"))
			r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
			require.Contains(t, r.header.Get("WWW-Authenticate"), `error="invalid_token"`)

			r = e.doWith("GET", path, "", bearer("Basic dGhlLWZpcnN0LXRva2VuLTAwMDE="))
			r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
			r = e.doWith("GET", path, "", bearer("Bearer "))
			r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
			r = e.doWith("GET", path, "", bearer("Bearer the-first-token-0001-and-more"))
			r.apiError(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
		})
	}
	t.Run("right tokens", func(t *testing.T) {
		for _, h := range []string{"Bearer the-first-token-0001", "Bearer the-second-token-002", "bearer the-first-token-0001"} {
			r := e.doWith("GET", "/v1/stats", "", bearer(h))
			require.Equal(t, http.StatusOK, r.status, "%s: %s", h, r.body)
		}
	})
	t.Run("healthz needs no token", func(t *testing.T) {
		r := e.doWith("GET", "/healthz", "", nil)
		require.Equal(t, http.StatusOK, r.status)
		require.JSONEq(t, `{"status":"ok"}`, string(r.body))
	})
}

func TestInsecureNoAuthAnswersOnlyLocalHosts(t *testing.T) {
	e := newEnv(t, &httpapi.Options{InsecureNoAuth: true}, nil)
	r := e.do("GET", "/v1/stats", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	for _, host := range []string{"localhost:8080", "127.0.0.1", "[::1]:80"} {
		r = e.doWith("GET", "/v1/stats", "", func(r *http.Request) { r.Host = host })
		require.Equal(t, http.StatusOK, r.status, "%s: %s", host, r.body)
	}
	// A DNS-rebinding page reaches a loopback server under its own name.
	r = e.doWith("GET", "/v1/stats", "", func(r *http.Request) { r.Host = "attacker.example:8080" })
	r.apiError(t, http.StatusForbidden, httpapi.CodeForbidden)
}

func TestCrossOriginBrowserRequestsRefused(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.doWith("POST", "/v1/jobs", `{"kind":"k"}`, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+testToken)
		r.Header.Set("Sec-Fetch-Site", "cross-site")
	})
	r.apiError(t, http.StatusForbidden, httpapi.CodeForbidden)
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Counts[jobstore.StateQueued])
}

func TestSubmit(t *testing.T) {
	e := newEnv(t, nil, nil)
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	body := fmt.Sprintf(`{"kind":"email.send","key":"order-7","payload":{"to":"a@example.com"},
		"max_attempts":5,"priority":10,"run_at":%q,"timeout":"1m30s"}`, runAt.Format(time.RFC3339))
	r := e.do("POST", "/v1/jobs", body)
	job := r.job(t, http.StatusCreated)
	require.Equal(t, "jobs/"+job.ID, r.header.Get("Location"))
	require.Equal(t, "email.send", job.Kind)
	require.Equal(t, "order-7", job.Key)
	require.JSONEq(t, `{"to":"a@example.com"}`, string(job.Payload))
	require.Equal(t, jobstore.StateQueued, job.State)
	require.Equal(t, 5, job.MaxAttempts)
	require.Equal(t, 10, job.Priority)
	require.True(t, job.RunAt.Equal(runAt), "run_at %s, want %s", job.RunAt, runAt)
	require.Equal(t, 90*time.Second, job.Timeout)

	// The response is the stored job in the wire form: the timeout as a
	// duration string, and in nanoseconds under its deprecated name.
	stored, err := e.store.Get(t.Context(), job.ID)
	require.NoError(t, err)
	want := fmt.Sprintf(`{"id":%q,"key":"order-7","kind":"email.send","queue":"default","payload":{"to":"a@example.com"},"state":"queued",
		"attempt":0,"max_attempts":5,"priority":10,"run_at":%q,"timeout":"1m30s","timeout_ns":90000000000,
		"created_at":%q,"updated_at":%q}`, job.ID, runAt.Format(time.RFC3339Nano),
		stored.CreatedAt.Format(time.RFC3339Nano), stored.UpdatedAt.Format(time.RFC3339Nano))
	require.JSONEq(t, want, string(r.body))

	t.Run("same key returns the existing job with 200", func(t *testing.T) {
		again := e.do("POST", "/v1/jobs", `{"kind":"email.send","key":"order-7"}`).job(t, http.StatusOK)
		require.Equal(t, job.ID, again.ID)
		require.JSONEq(t, `{"to":"a@example.com"}`, string(again.Payload))
	})
	t.Run("payload comes back as sent", func(t *testing.T) {
		r := e.do("POST", "/v1/jobs", `{"kind":"k","payload":{"html":"<b>&amp;</b>","n":1e3}}`)
		j := r.job(t, http.StatusCreated)
		require.Contains(t, string(r.body), `"payload":{"html":"<b>&amp;</b>","n":1e3}`)
		require.JSONEq(t, `{"html":"<b>&amp;</b>","n":1000}`, string(j.Payload))
	})
	t.Run("defaults", func(t *testing.T) {
		j := e.do("POST", "/v1/jobs", `{"kind":"k","payload":null}`).job(t, http.StatusCreated)
		require.Equal(t, jobstore.DefaultMaxAttempts, j.MaxAttempts)
		require.Empty(t, j.Payload)
		require.Zero(t, j.Timeout)
		require.False(t, j.RunAt.After(time.Now()))
	})
}

func TestSubmitErrors(t *testing.T) {
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, MaxBodyBytes: 4096},
		&memstore.Options{MaxPayload: 1024})
	big := `{"kind":"k","payload":"` + strings.Repeat("x", 2000) + `"}`
	huge := `{"kind":"k","payload":"` + strings.Repeat("x", 5000) + `"}`
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"empty body", "", http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"not JSON", "kind=k", http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"not an object", `["k"]`, http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"unknown field", `{"kind":"k","kinds":"x"}`, http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"trailing value", `{"kind":"k"} {"kind":"k"}`, http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"wrong type", `{"kind":"k","priority":"high"}`, http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"bad run_at", `{"kind":"k","run_at":"tomorrow"}`, http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"bad timeout", `{"kind":"k","timeout":"30"}`, http.StatusBadRequest, httpapi.CodeInvalidInput},
		{"no kind", `{"payload":1}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec},
		{"bad kind", `{"kind":"a b"}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec},
		{"priority out of range", `{"kind":"k","priority":5000}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec},
		{"negative timeout", `{"kind":"k","timeout":"-1s"}`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec},
		{"exec refused by default", `{"kind":"exec","payload":{"argv":["rm","-rf","/"]}}`, http.StatusForbidden, httpapi.CodeKindNotAllowed},
		{"payload over the store limit", big, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge},
		{"body over MaxBodyBytes", huge, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.do("POST", "/v1/jobs", tc.body).apiError(t, tc.status, tc.code)
		})
	}
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Counts[jobstore.StateQueued], "a refused request created a job")
}

// TestKindAllowList: AnyKind allows every kind but the explicit kinds
// (exec unless Options.ExplicitKinds says otherwise), which are allowed
// only by name; a refused explicit kind is told why.
func TestKindAllowList(t *testing.T) {
	for _, tc := range []struct {
		name     string
		allowed  []string
		explicit []string
		ok       []string
		refused  []string
	}{
		{"empty: any but exec", nil, nil, []string{"a", "email.send"}, []string{"exec"}},
		{"star: any but exec", []string{"*"}, nil, []string{"a"}, []string{"exec"}},
		{"exec only", []string{"exec"}, nil, []string{"exec"}, []string{"a"}},
		{"star and exec", []string{"*", "exec"}, nil, []string{"a", "exec"}, nil},
		{"named kinds", []string{"a", "b"}, nil, []string{"a", "b"}, []string{"c", "exec"}},
		{"explicit kinds replace exec", []string{"*"}, []string{"deploy", "shell"}, []string{"a", "exec"}, []string{"deploy", "shell"}},
		{"explicit kind named", []string{"*", "deploy"}, []string{"deploy", "shell"}, []string{"a", "deploy"}, []string{"shell"}},
		{"no explicit kinds", []string{"*"}, []string{}, []string{"a", "exec"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, &httpapi.Options{Tokens: []string{testToken}, AllowedKinds: tc.allowed, ExplicitKinds: tc.explicit}, nil)
			for _, k := range tc.ok {
				e.submit(k, "")
			}
			for _, k := range tc.refused {
				ae := e.do("POST", "/v1/jobs", fmt.Sprintf(`{"kind":%q}`, k)).
					apiError(t, http.StatusForbidden, httpapi.CodeKindNotAllowed)
				switch {
				case k == "exec" && tc.explicit == nil:
					require.Contains(t, ae.Message, "exec jobs run programs, so they must be allowed explicitly")
				case slices.Contains(tc.explicit, k):
					require.Contains(t, ae.Message, "it must be allowed explicitly, by name")
				}
			}
		})
	}
}

func TestGet(t *testing.T) {
	e := newEnv(t, nil, nil)
	job := e.submit("k", "")
	got := e.do("GET", "/v1/jobs/"+job.ID, "").job(t, http.StatusOK)
	require.Equal(t, job.ID, got.ID)
	require.Equal(t, jobstore.StateQueued, got.State)

	missing := jobstore.NewID(time.Now())
	ae := e.do("GET", "/v1/jobs/"+missing, "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	require.NotRegexp(t, `^[a-z]+store:`, ae.Message, "a message for people, without the package")
	require.Contains(t, ae.Message, missing)
	e.do("GET", "/v1/jobs/not-an-id", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	e.do("GET", "/v1/jobs/"+strings.ToLower(job.ID), "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
}

// TestGetByKey: GET /v1/keys/{key} returns the job of the key, a key
// with a slash, a space or a question mark included (percent-encoded);
// an unknown key is 404 and an empty one 400.
func TestGetByKey(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, key := range []string{"nightly-2026-12-02", "reports/2026 q4?", "ünïcode ✓"} {
		job := e.submit("k", key)
		got := e.do("GET", "/v1/keys/"+url.PathEscape(key), "").job(t, http.StatusOK)
		require.Equal(t, job.ID, got.ID, key)
		require.Equal(t, key, got.Key)
	}
	got := e.do("GET", "/v1/keys/reports/2026%20q4%3F", "").job(t, http.StatusOK)
	require.Equal(t, "reports/2026 q4?", got.Key, "a slash may stay as it is")
	ae := e.do("GET", "/v1/keys/nosuch", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	require.Contains(t, ae.Message, `no job with key "nosuch"`)
	require.NotRegexp(t, `^[a-z]+store:`, ae.Message)
	e.do("GET", "/v1/keys/", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	e.do("GET", "/v1/keys/a%01b", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
}

// listBody is a page of GET /v1/jobs, its jobs as the jobstore.Jobs they
// describe.
type listBody struct {
	Jobs []jobstore.Job
	Next string
}

// list gets a page of jobs and decodes it strictly into
// httpapi.ListResponse.
func (e *env) list(query string) listBody {
	e.t.Helper()
	r := e.do("GET", "/v1/jobs"+query, "")
	require.Equal(e.t, http.StatusOK, r.status, "%s", r.body)
	var page httpapi.ListResponse
	strictDecode(e.t, r.body, &page)
	require.NotNil(e.t, page.Jobs, "jobs must be an array, never null")
	b := listBody{Jobs: make([]jobstore.Job, len(page.Jobs)), Next: page.Next}
	for i, w := range page.Jobs {
		j, err := w.ToJob()
		require.NoError(e.t, err)
		b.Jobs[i] = j
	}
	return b
}

func TestListPagination(t *testing.T) {
	e := newEnv(t, nil, nil)
	var ids []string
	for i := range 25 {
		kind := "even"
		if i%2 == 1 {
			kind = "odd"
		}
		ids = append(ids, e.submit(kind, "").ID)
	}

	walk := func(query string) []string {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10, "cursor does not advance")
			q := query
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			b := e.list(q)
			require.LessOrEqual(t, len(b.Jobs), 10)
			for _, j := range b.Jobs {
				got = append(got, j.ID)
			}
			if b.Next == "" {
				return got
			}
			cursor = b.Next
		}
	}
	t.Run("oldest first", func(t *testing.T) {
		require.Equal(t, ids, walk("?limit=10&order=oldest"))
	})
	t.Run("newest first by default", func(t *testing.T) {
		got := walk("?limit=10")
		require.Len(t, got, len(ids))
		for i, id := range got {
			require.Equal(t, ids[len(ids)-1-i], id)
		}
	})
	t.Run("kind filter", func(t *testing.T) {
		got := walk("?limit=10&kind=odd&order=oldest")
		require.Len(t, got, 12)
		for i, id := range got {
			require.Equal(t, ids[2*i+1], id)
		}
	})
	t.Run("state filter repeated or comma-separated", func(t *testing.T) {
		_, err := e.store.Cancel(t.Context(), ids[0])
		require.NoError(t, err)
		_, err = e.store.Cancel(t.Context(), ids[1])
		require.NoError(t, err)
		require.Len(t, e.list("?state=canceled").Jobs, 2)
		require.Len(t, e.list("?state=canceled,succeeded").Jobs, 2)
		require.Len(t, e.list("?state=canceled&state=queued&limit=1000").Jobs, 25)
		require.Len(t, e.list("?state=queued&limit=1000").Jobs, 23)
		require.Empty(t, e.list("?state=running").Jobs)
	})
	t.Run("bad queries", func(t *testing.T) {
		for _, q := range []string{
			"?state=done", "?limit=-1", "?limit=ten", "?limit=0", "?order=sideways",
			"?cursor=nope", "?kind=a%20b", "?status=queued", "?kind=a&kind=b", "?state=%zz",
		} {
			e.do("GET", "/v1/jobs"+q, "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
		}
	})
}

func TestCancelAndRetry(t *testing.T) {
	e := newEnv(t, nil, nil)
	job := e.submit("k", "")

	canceled := e.do("POST", "/v1/jobs/"+job.ID+"/cancel", "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateCanceled, canceled.State)
	again := e.do("POST", "/v1/jobs/"+job.ID+"/cancel", "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateCanceled, again.State)

	retried := e.do("POST", "/v1/jobs/"+job.ID+"/retry", "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateQueued, retried.State)

	ae := e.do("POST", "/v1/jobs/"+job.ID+"/retry", "").apiError(t, http.StatusConflict, httpapi.CodeInvalidTransition)
	require.Equal(t, job.ID, ae.ID)
	require.Equal(t, jobstore.StateQueued, ae.From)
	require.Equal(t, jobstore.StateQueued, ae.To)

	// A running job gets CancelRequested; its worker finishes it.
	claimed, err := e.store.Claim(t.Context(), jobstore.ClaimRequest{Worker: "w1"})
	require.NoError(t, err)
	running := e.do("POST", "/v1/jobs/"+job.ID+"/cancel", "").job(t, http.StatusOK)
	require.Equal(t, jobstore.StateRunning, running.State)
	require.True(t, running.CancelRequested)
	_, err = e.store.Complete(t.Context(), claimed.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)

	ae = e.do("POST", "/v1/jobs/"+job.ID+"/cancel", "").apiError(t, http.StatusConflict, httpapi.CodeInvalidTransition)
	require.Equal(t, jobstore.StateSucceeded, ae.From)
	require.Equal(t, jobstore.StateCanceled, ae.To)
	e.do("POST", "/v1/jobs/"+job.ID+"/retry", "").apiError(t, http.StatusConflict, httpapi.CodeInvalidTransition)

	missing := jobstore.NewID(time.Now())
	e.do("POST", "/v1/jobs/"+missing+"/cancel", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("POST", "/v1/jobs/"+missing+"/retry", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("POST", "/v1/jobs/x/cancel", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
}

func TestStatsAndHealth(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.submit("k", "")
	e.submit("k", "")
	r := e.do("GET", "/v1/stats", "")
	require.Equal(t, http.StatusOK, r.status)
	var st jobstore.Stats
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, 2, st.Counts[jobstore.StateQueued])
	for _, s := range jobstore.States() {
		require.Contains(t, st.Counts, s)
	}
	require.False(t, st.OldestQueuedAt.IsZero())

	require.Equal(t, http.StatusOK, e.do("GET", "/healthz", "").status)
	require.NoError(t, e.store.Close())
	e.doWith("GET", "/healthz", "", nil).apiError(t, http.StatusServiceUnavailable, httpapi.CodeClosed)
	e.do("GET", "/v1/stats", "").apiError(t, http.StatusServiceUnavailable, httpapi.CodeClosed)
	e.do("POST", "/v1/jobs", `{"kind":"k"}`).apiError(t, http.StatusServiceUnavailable, httpapi.CodeClosed)
}

func TestMuxErrorsAreJSON(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("DELETE", "/v1/jobs", "")
	r.apiError(t, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed)
	require.Contains(t, r.header.Get("Allow"), "POST")
	require.Contains(t, r.header.Get("Allow"), "GET")
	e.do("GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", "").
		apiError(t, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed)
	e.do("GET", "/v2/jobs", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.do("GET", "/", "").apiError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func TestSubmitValidators(t *testing.T) {
	mustHaveTo := func(p json.RawMessage) error {
		var v struct{ To string }
		if err := json.Unmarshal(p, &v); err != nil || v.To == "" {
			return fmt.Errorf("%w: payload needs a \"to\"", jobstore.ErrInvalidInput)
		}
		return nil
	}
	e := newEnv(t, &httpapi.Options{Tokens: []string{testToken},
		Validators: map[string]func(json.RawMessage) error{"email.send": mustHaveTo}}, nil)
	r := e.do("POST", "/v1/jobs", `{"kind":"email.send","payload":{"subject":"hi"}}`)
	apiErr := r.apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
	require.Contains(t, apiErr.Message, `needs a "to"`)
	require.Equal(t, http.StatusCreated, e.do("POST", "/v1/jobs", `{"kind":"email.send","payload":{"to":"a@example.com"}}`).status)
	require.Equal(t, http.StatusCreated, e.do("POST", "/v1/jobs", `{"kind":"other","payload":{}}`).status, "kinds without a validator are not checked")
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, st.Counts[jobstore.StateQueued], "the refused request created no job")
}

// clientOnly hides every method of a store but the client role's.
type clientOnly struct{ jobstore.Client }

// TestClientRoleSuffices: New takes a jobstore.Client, and a value with
// only that role's methods serves every job route, the stats, the health
// check (by a Get, as it is no jobstore.Pinger) and the metrics.
func TestClientRoleSuffices(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(clientOnly{store}, &httpapi.Options{Tokens: []string{testToken}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	e := startEnv(t, api, testToken)

	j := e.submit("k", "")
	require.Equal(t, j.ID, e.do("GET", "/v1/jobs/"+j.ID, "").job(t, http.StatusOK).ID)
	r := e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"k"}]}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"created":true`)
	r = e.do("GET", "/v1/jobs", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var page httpapi.ListResponse
	strictDecode(t, r.body, &page)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, jobstore.StateCanceled, e.do("POST", "/v1/jobs/"+j.ID+"/cancel", "").job(t, http.StatusOK).State)
	require.Equal(t, jobstore.StateQueued, e.do("POST", "/v1/jobs/"+j.ID+"/retry", "").job(t, http.StatusOK).State)
	require.Equal(t, jobstore.StateCanceled, e.do("POST", "/v1/jobs/"+j.ID+"/cancel", "").job(t, http.StatusOK).State)
	require.Equal(t, jobstore.StateCanceled, e.do("GET", "/v1/jobs/"+j.ID+"/wait", "").job(t, http.StatusOK).State)
	r = e.do("GET", "/v1/stats", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"queued":1`)
	require.Equal(t, http.StatusOK, e.doWith("GET", "/healthz", "", nil).status)
	r = e.do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `jobdir_jobs{state="canceled"} 1`)
}
