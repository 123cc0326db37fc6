package webui_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/memstore"
	"github.com/jobdir/jobdir/webui"
)

// The dashboard beside the HTTP API, as jobdir serve mounts them: the same
// tokens, and the API serves the jobs' logs to the pages.
func Example() {
	store := memstore.New(nil)
	defer store.Close()
	tokens := []string{"a-long-random-token-0123456789"}
	api, err := httpapi.New(store, &httpapi.Options{Tokens: tokens})
	if err != nil {
		log.Fatal(err)
	}
	ui, err := webui.New(store, &webui.Options{Tokens: tokens, Log: api})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(webui.Prefix, ui)
	mux.Handle("/", api)

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/ui/jobs", nil))
	fmt.Println(w.Code, w.Header().Get("Location"))
	// Output: 303 /ui/signin?next=%2Fui%2Fjobs
}
