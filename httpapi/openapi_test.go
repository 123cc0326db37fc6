package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// openAPIPath is the API's contract, docs/openapi.yaml.
const openAPIPath = "../docs/openapi.yaml"

// openAPIDoc is docs/openapi.yaml read as JSON values, and a compiler of
// the schemas in it.
type openAPIDoc struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	data, err := os.ReadFile(openAPIPath)
	require.NoError(t, err)
	var y any
	require.NoError(t, yaml.Unmarshal(data, &y))
	js, err := json.Marshal(y)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	require.NoError(t, c.AddResource("mem:///openapi.json", v))
	return &openAPIDoc{doc: v.(map[string]any), compiler: c}
}

// schema compiles the schema at the JSON pointer ptr of the document.
func (d *openAPIDoc) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	sch, err := d.compiler.Compile("mem:///openapi.json#" + ptr)
	require.NoError(t, err, "schema at %s", ptr)
	return sch
}

// resolve follows a $ref (local to the document) until it reaches an
// object without one, and returns it with its JSON pointer.
func (d *openAPIDoc) resolve(v any, ptr string) (map[string]any, string) {
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		ptr = strings.TrimPrefix(ref, "#")
		var cur any = d.doc
		for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m, ptr
}

// pointer escapes the parts of a JSON pointer and joins them.
func pointer(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// operation is one method of one path of the document.
type operation struct {
	method, path string
	op           map[string]any
	ptr          string
}

func (d *openAPIDoc) operations() []operation {
	var ops []operation
	for path, item := range d.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			ops = append(ops, operation{strings.ToUpper(method), path, op.(map[string]any), pointer("paths", path, method)})
		}
	}
	slices.SortFunc(ops, func(a, b operation) int { return strings.Compare(a.path+" "+a.method, b.path+" "+b.method) })
	return ops
}

// TestOpenAPIDescribesTheServer checks docs/openapi.yaml against the
// server: the routes it describes are exactly the routes served, and each
// example request it holds (each operation's request body examples and
// x-invalid-examples, with the examples of its parameters) is answered with a status the
// operation documents, in its media type, with its required headers, and
// with a JSON body that its schema accepts. The documented response
// examples are checked against their schemas too. The store holds, under
// the example IDs and key, the jobs the examples need: a queued keyed
// job of the batch nightly-export, a queued job to cancel, a failed job
// to retry, and the batch's callback, which waits for the keyed job and
// closed the batch.
func TestOpenAPIDescribesTheServer(t *testing.T) {
	d := loadOpenAPI(t)

	// Routes: those the document describes, and those the server serves.
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	const token = "openapi-test-token-0123456789"
	s, err := New(store, &Options{Tokens: []string{token}, LogDir: t.TempDir(), MaxWait: 2 * time.Second})
	require.NoError(t, err)
	var served, described []string
	for _, p := range s.routes {
		served = append(served, strings.ReplaceAll(p, "...}", "}"))
	}
	for _, o := range d.operations() {
		described = append(described, o.method+" "+o.path)
	}
	slices.Sort(served)
	slices.Sort(described)
	require.Equal(t, served, described, "the routes of docs/openapi.yaml")

	// The jobs the examples name.
	now := time.Now().UTC().Truncate(time.Second)
	seed := func(id, key string, state jobstore.State) jobstore.Job {
		j := jobstore.NewJob(jobstore.Spec{Kind: "report.build", Key: key, Payload: json.RawMessage(`{"day":"2026-11-29"}`)}, now)
		j.ID = id
		if state == jobstore.StateFailed {
			j.State, j.Attempt, j.FinishedAt, j.LastError = state, 3, now, "exit status 1"
			j.StartedAt, j.Worker = now, "w"
			j.History = []jobstore.AttemptRecord{{Attempt: 3, Worker: "w", StartedAt: now, FinishedAt: now, End: jobstore.EndFailed, Error: "exit status 1"}}
		}
		return j
	}
	keyed := seed("01M8M7AB6JD9EYQ6QDAWZ282C2", "nightly-2026-11-29", jobstore.StateQueued)
	keyed.Batch = "nightly-export"
	callback := seed("01M8M7B3ZP5XW8C1DKQ4R7T2EH", "", jobstore.StateQueued)
	callback.Kind, callback.AfterBatch, callback.AfterAny = "report.publish", "nightly-export", true
	callback.SetAfter([]string{keyed.ID})
	n, err := store.Import(t.Context(), []jobstore.Job{
		keyed,
		seed("01M8M7AE87RGTSP8PHCTGNDR77", "", jobstore.StateQueued),
		seed("01M8M7B0Q3V1ZK6Y1HS0FQX9TA", "", jobstore.StateFailed),
		callback,
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)

	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	requests := 0
	for _, o := range d.operations() {
		path, query := o.path, url.Values{}
		params, _ := o.op["parameters"].([]any)
		for k, p := range params {
			pm, _ := d.resolve(p, fmt.Sprintf("%s/parameters/%d", o.ptr, k))
			ex, ok := pm["example"]
			if !ok {
				require.NotEqual(t, true, pm["required"], "%s %s: parameter %s is required and has no example", o.method, o.path, pm["name"])
				continue
			}
			name := pm["name"].(string)
			val := fmt.Sprint(ex)
			if list, ok := ex.([]any); ok {
				var parts []string
				for _, v := range list {
					parts = append(parts, fmt.Sprint(v))
				}
				val = strings.Join(parts, ",")
			}
			switch pm["in"] {
			case "path":
				path = strings.ReplaceAll(path, "{"+name+"}", url.PathEscape(val))
			case "query":
				query.Set(name, val)
			}
		}
		target := srv.URL + path
		if len(query) > 0 {
			target += "?" + query.Encode()
		}
		bodies := map[string]map[string]any{"": nil}
		if rb, ok := o.op["requestBody"].(map[string]any); ok {
			bodies = map[string]map[string]any{}
			media := rb["content"].(map[string]any)["application/json"].(map[string]any)
			examples, _ := media["examples"].(map[string]any)
			require.NotEmpty(t, examples, "%s %s: a request body without examples", o.method, o.path)
			invalid, _ := media["x-invalid-examples"].(map[string]any)
			for name, ex := range examples {
				bodies[name] = ex.(map[string]any)
			}
			for name, ex := range invalid {
				bodies[name] = ex.(map[string]any)
			}
		}
		_, secured := o.op["security"]
		for name, ex := range bodies {
			what := strings.TrimSpace(o.method + " " + o.path + " " + name)
			body := ex["value"]
			var rd io.Reader
			if body != nil {
				b, err := json.Marshal(body)
				require.NoError(t, err)
				rd = bytes.NewReader(b)
			}
			req, err := http.NewRequestWithContext(t.Context(), o.method, target, rd)
			require.NoError(t, err)
			if !secured {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			requests++
			if want, ok := ex["x-status"]; ok {
				assert.Equal(t, fmt.Sprint(want), fmt.Sprint(resp.StatusCode), "%s: x-status (body %s)", what, data)
			}
			checkResponse(t, d, o, what, resp, data)
		}
	}
	require.GreaterOrEqual(t, requests, 28, "example requests run")

	// Every documented response example fits its schema.
	for name, r := range d.doc["components"].(map[string]any)["responses"].(map[string]any) {
		content, _ := r.(map[string]any)["content"].(map[string]any)
		for mt, c := range content {
			ex, ok := c.(map[string]any)["example"]
			if !ok {
				continue
			}
			sch := d.schema(t, pointer("components", "responses", name, "content", mt, "schema"))
			assert.NoError(t, sch.Validate(ex), "the example of response %s", name)
		}
	}
}

// checkResponse checks resp (with body data), the answer to an example
// request of o, against what o documents.
func checkResponse(t *testing.T, d *openAPIDoc, o operation, what string, resp *http.Response, data []byte) {
	t.Helper()
	status := fmt.Sprint(resp.StatusCode)
	responses := o.op["responses"].(map[string]any)
	r, ok := responses[status]
	if !assert.True(t, ok, "%s: status %s is not documented (body %s)", what, status, data) {
		return
	}
	rm, ptr := d.resolve(r, pointer("paths", o.path, strings.ToLower(o.method), "responses", status))
	headers, _ := rm["headers"].(map[string]any)
	for h, hv := range headers {
		if hm, _ := hv.(map[string]any); hm["required"] == true {
			assert.NotEmpty(t, resp.Header.Get(h), "%s: header %s", what, h)
		}
	}
	content, _ := rm["content"].(map[string]any)
	if len(content) == 0 {
		return
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	require.NoError(t, err, "%s: Content-Type %q", what, resp.Header.Get("Content-Type"))
	if !assert.Contains(t, content, mt, "%s: media type %s", what, mt) || mt != "application/json" {
		return
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(t, err, "%s: %s", what, data)
	sch := d.schema(t, ptr+pointer("content", mt, "schema"))
	assert.NoError(t, sch.Validate(v), "%s: the answer %s", what, data)
}
