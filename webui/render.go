package webui

import (
	"bytes"
	"html/template"
	"net/http"
	"strings"
)

// pageData is what every page's layout gets; Body is the page's own data.
type pageData struct {
	Title    string
	Base     string
	Nav      string
	NoAuth   bool
	SignedIn bool
	CSRF     string
	PollMS   int64
	Body     any
}

type errorPage struct {
	Status  int
	Message string
}

// pageNames are the templates under assets/templates, each parsed with
// layout.html.
var pageNames = []string{"overview", "jobs", "job", "workers", "queues", "schedules", "signin", "error"}

var funcs = template.FuncMap{
	"join": strings.Join,
	"short": func(id string) string {
		if len(id) > 10 {
			return id[:10] + "…"
		}
		return id
	},
}

func parsePages() (map[string]*template.Template, error) {
	pages := make(map[string]*template.Template)
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// FragmentHeader, on a GET of a page, asks for its live part alone (the
// template "live" of the page): the pages' script polls with it and swaps
// the part in place.
const FragmentHeader = "Jobdir-Fragment"

// render writes page name with body, or only its live part when the
// request asks for it.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, body any) {
	d := pageData{Title: title, Base: Prefix, Nav: name, NoAuth: h.opts.InsecureNoAuth, CSRF: h.csrfOf(r),
		SignedIn: sessionOf(r) != nil, PollMS: h.opts.Poll.Milliseconds(), Body: body}
	tmpl := "layout"
	if r.Header.Get(FragmentHeader) != "" && h.pages[name].Lookup("live") != nil {
		tmpl = "live"
	}
	var b bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&b, tmpl, d); err != nil {
		h.log.Error("render page", "page", name, "error", err.Error())
		http.Error(w, "the page could not be drawn; the server log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
