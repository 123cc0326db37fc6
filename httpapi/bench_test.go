package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// benchServer returns the handler on a memstore, called in-process so that
// the figures are the API's own cost (auth, decoding, metrics, encoding),
// not the network's or a disk's.
func benchServer(b *testing.B) (*httpapi.Server, *memstore.Store) {
	b.Helper()
	store := memstore.New(nil)
	b.Cleanup(func() { _ = store.Close() })
	api, err := httpapi.New(store, &httpapi.Options{Tokens: []string{"first-benchmark-token", "second-benchmark-token", testToken}})
	if err != nil {
		b.Fatal(err)
	}
	return api, store
}

func serveOnce(b *testing.B, h http.Handler, method, path, body string, want int) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
}

func BenchmarkSubmit(b *testing.B) {
	api, _ := benchServer(b)
	body := `{"kind":"email.send","payload":{"to":"ada@example.com","template":"welcome"},"priority":5,"timeout":"30s"}`
	for b.Loop() {
		serveOnce(b, api, "POST", "/v1/jobs", body, http.StatusCreated)
	}
}

func BenchmarkGet(b *testing.B) {
	api, store := benchServer(b)
	job, _, err := store.Submit(b.Context(), jobstore.Spec{Kind: "k", Payload: []byte(`{"a":1}`)})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		serveOnce(b, api, "GET", "/v1/jobs/"+job.ID, "", http.StatusOK)
	}
}

func BenchmarkList100(b *testing.B) {
	api, store := benchServer(b)
	for range 200 {
		if _, _, err := store.Submit(b.Context(), jobstore.Spec{Kind: "k"}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		serveOnce(b, api, "GET", "/v1/jobs?limit=100", "", http.StatusOK)
	}
}
