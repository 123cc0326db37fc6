package httpapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
)

// fullJob returns a job with every field set, and fails the test if a
// field of jobstore.Job (or of its history records) is left zero: a field
// added to jobstore.Job must be carried by the wire type too.
func fullJob(t *testing.T) jobstore.Job {
	t.Helper()
	at := func(s int64) time.Time { return time.Unix(1_800_000_000+s, 123456789).UTC() }
	j := jobstore.Job{
		ID: "01M8M7AB6JD9EYQ6QDAWZ282C2", Key: "nightly", Kind: "report.build", Queue: "reports", Partition: "customer-7", Tags: []string{"nightly"}, Meta: map[string]string{"request": "r-42"}, Payload: json.RawMessage(`{"day":"2026-11-29"}`),
		State: jobstore.StateRunning, Attempt: 2, MaxAttempts: 5, Priority: -7, RunAt: at(1), Timeout: 90 * time.Second,
		CreatedAt: at(0), UpdatedAt: at(9), StartedAt: at(5), FinishedAt: at(8), Result: json.RawMessage(`{"rows":3}`),
		LastError: "disk full", CancelRequested: true, Worker: "build-7",
		After: []string{"01M8M7AE87RGTSP8PHCTGNDR77"}, AfterAny: true, Batch: "reports", AfterBatch: "exports",
		History: []jobstore.AttemptRecord{{Attempt: 1, Worker: "build-6", StartedAt: at(2), FinishedAt: at(3),
			End: jobstore.EndTimedOut, Error: "took too long"}},
	}
	for _, v := range []reflect.Value{reflect.ValueOf(j), reflect.ValueOf(j.History[0])} {
		for i := range v.NumField() {
			require.False(t, v.Field(i).IsZero(), "fixture leaves %s.%s zero", v.Type().Name(), v.Type().Field(i).Name)
		}
	}
	return j
}

// jsonKeys returns the names of the members of the JSON object b.
func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	return slices.Sorted(maps.Keys(m))
}

// jsonTags returns the JSON names of the fields of struct type typ.
func jsonTags(typ reflect.Type) []string {
	var names []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// TestWireJobRoundTrip: a job with every field set goes to the wire form
// and back unchanged, through its JSON; the JSON has exactly the
// documented fields, the timeout as a duration string and (deprecated)
// in nanoseconds, and times in RFC 3339.
func TestWireJobRoundTrip(t *testing.T) {
	j := fullJob(t)
	w := httpapi.FromJob(j)
	b, err := json.Marshal(w)
	require.NoError(t, err)
	require.Equal(t, []string{"after", "after_any", "after_batch", "attempt", "batch", "cancel_requested", "created_at", "finished_at", "history", "id", "key", "kind",
		"last_error", "max_attempts", "meta", "partition", "payload", "priority", "queue", "result", "run_at", "started_at", "state", "tags", "timeout",
		"timeout_ns", "updated_at", "worker"}, jsonKeys(t, b))
	require.Contains(t, string(b), `"after":["01M8M7AE87RGTSP8PHCTGNDR77"],"after_any":true,"batch":"reports","after_batch":"exports",`)
	require.Equal(t, jsonTags(reflect.TypeFor[httpapi.Job]()), jsonKeys(t, b), "every field of the wire type is sent")
	require.Contains(t, string(b), `"timeout":"1m30s","timeout_ns":90000000000,`)
	require.Contains(t, string(b), `"run_at":"2027-01-15T08:00:01.123456789Z"`)
	require.Contains(t, string(b), `"history":[{"attempt":1,"worker":"build-6","started_at":"2027-01-15T08:00:02.123456789Z",`+
		`"finished_at":"2027-01-15T08:00:03.123456789Z","end":"timed_out","error":"took too long"}]`)

	var back httpapi.Job
	strictDecode(t, b, &back)
	require.Equal(t, w, back)
	got, err := back.ToJob()
	require.NoError(t, err)
	require.Equal(t, j, got)

	// Empty optional fields are absent.
	b, err = json.Marshal(httpapi.FromJob(jobstore.Job{ID: j.ID, Kind: "k", State: jobstore.StateQueued}))
	require.NoError(t, err)
	require.Equal(t, []string{"attempt", "created_at", "id", "kind", "max_attempts", "priority", "queue", "run_at", "state", "updated_at"}, jsonKeys(t, b))
}

// TestWireJobTimeoutSpellings: ToJob reads the timeout from either
// spelling, as a server of an older version sends only timeout_ns, and
// refuses two that disagree.
func TestWireJobTimeoutSpellings(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want time.Duration
		bad  bool
	}{
		{"timeout", `{"id":"x","timeout":"1m30s"}`, 90 * time.Second, false},
		{"timeout_ns", `{"id":"x","timeout_ns":90000000000}`, 90 * time.Second, false},
		{"both agree", `{"id":"x","timeout":"1m30s","timeout_ns":90000000000}`, 90 * time.Second, false},
		{"neither", `{"id":"x"}`, 0, false},
		{"both disagree", `{"id":"x","timeout":"1m30s","timeout_ns":1000}`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w httpapi.Job
			strictDecode(t, []byte(tc.body), &w)
			j, err := w.ToJob()
			if tc.bad {
				require.ErrorIs(t, err, jobstore.ErrInvalidInput)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, j.Timeout)
		})
	}
}

// TestWireSubmitRequestRoundTrip: a spec with every field set goes to the
// request form and back unchanged, its JSON names the documented fields,
// and the server reads it as that spec.
func TestWireSubmitRequestRoundTrip(t *testing.T) {
	spec := jobstore.Spec{Kind: "report.build", Key: "nightly", Queue: "reports", Partition: "customer-7", Tags: []string{"nightly", "team=ops"},
		Meta: map[string]string{"request": "r-42"}, Payload: json.RawMessage(`{"day":"2026-11-29"}`),
		MaxAttempts: 5, Priority: -7, RunAt: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), Timeout: 90 * time.Second,
		After: []string{"01M8M7AE87RGTSP8PHCTGNDR77"}, AfterKeys: []string{"build-1"}, AfterSpecs: []int{0}, AfterAny: true, Batch: "reports", AfterBatch: "exports"}
	v := reflect.ValueOf(spec)
	for i := range v.NumField() {
		require.False(t, v.Field(i).IsZero(), "fixture leaves Spec.%s zero", v.Type().Field(i).Name)
	}
	req := httpapi.FromSpec(spec)
	require.Equal(t, spec, req.ToSpec())
	b, err := json.Marshal(req)
	require.NoError(t, err)
	require.Equal(t, []string{"after", "after_any", "after_batch", "after_keys", "after_specs", "batch", "key", "kind", "max_attempts", "meta", "partition", "payload", "priority", "queue", "run_at", "tags", "timeout"}, jsonKeys(t, b))
	require.Contains(t, string(b), `"run_at":"2030-01-02T03:04:05.000000006Z","timeout":"1m30s"`)
	var back httpapi.SubmitRequest
	strictDecode(t, b, &back)
	require.Equal(t, req, back)

	// The server reads it as that spec, but a single submit names no
	// dependency by index, and no batch can be both: without those.
	spec.After, spec.AfterKeys, spec.AfterSpecs, spec.AfterAny, spec.Batch, spec.AfterBatch = nil, nil, nil, false, "", ""
	req = httpapi.FromSpec(spec)
	b, err = json.Marshal(req)
	require.NoError(t, err)
	e := newEnv(t, nil, nil)
	job := e.do("POST", "/v1/jobs", string(b)).job(t, http.StatusCreated)
	require.Equal(t, spec, jobstore.Spec{Kind: job.Kind, Key: job.Key, Queue: job.Queue, Partition: job.Partition, Tags: job.Tags, Meta: job.Meta, Payload: job.Payload, MaxAttempts: job.MaxAttempts,
		Priority: job.Priority, RunAt: job.RunAt, Timeout: job.Timeout})

	b, err = json.Marshal(httpapi.BatchRequest{Jobs: []httpapi.SubmitRequest{req, httpapi.FromSpec(jobstore.Spec{Kind: "k"})}})
	require.NoError(t, err)
	res := e.batch(string(b))
	require.Len(t, res, 2)
	require.Equal(t, job, res[0].Job, "the key named the job")
	require.True(t, res[1].Created)
}

// TestDuration: durations are strings in Go's syntax both ways; a bare
// number is refused.
func TestDuration(t *testing.T) {
	b, err := json.Marshal(httpapi.Duration(90 * time.Second))
	require.NoError(t, err)
	require.Equal(t, `"1m30s"`, string(b))
	for in, want := range map[string]time.Duration{
		`"30s"`: 30 * time.Second, `"1h30m"`: 90 * time.Minute, `"1.5s"`: 1500 * time.Millisecond,
		`"250ms"`: 250 * time.Millisecond, `"0"`: 0, `"-1s"`: -time.Second,
	} {
		var d httpapi.Duration
		require.NoError(t, json.Unmarshal([]byte(in), &d), in)
		require.Equal(t, want, time.Duration(d), in)
	}
	for _, in := range []string{`30`, `"30"`, `"soon"`, `""`, `null`} {
		d := httpapi.Duration(7)
		err := json.Unmarshal([]byte(in), &d)
		if in == `null` {
			require.NoError(t, err) // as for any JSON value: no change
			require.Equal(t, httpapi.Duration(7), d)
			continue
		}
		require.Error(t, err, in)
	}
}

// TestSubmitTimeoutSpellings: a submit takes the timeout as a duration
// string or, deprecated, as timeout_ns in nanoseconds, or both when they
// agree; both disagreeing is a 400 that says so, in a single submit and in
// a batch.
func TestSubmitTimeoutSpellings(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, tc := range []struct {
		name, fields string
		want         time.Duration
	}{
		{"timeout", `"timeout":"1m30s"`, 90 * time.Second},
		{"timeout_ns", `"timeout_ns":90000000000`, 90 * time.Second},
		{"both agree", `"timeout":"1m30s","timeout_ns":90000000000`, 90 * time.Second},
		{"timeout_ns zero", `"timeout_ns":0`, 0},
		{"timeout_ns null", `"timeout_ns":null`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := e.do("POST", "/v1/jobs", `{"kind":"k",`+tc.fields+`}`).job(t, http.StatusCreated)
			require.Equal(t, tc.want, job.Timeout)
			stored, err := e.store.Get(t.Context(), job.ID)
			require.NoError(t, err)
			require.Equal(t, tc.want, stored.Timeout)
			res := e.batch(batchOf(`{"kind":"k",` + tc.fields + `}`))
			require.Equal(t, tc.want, res[0].Job.Timeout)
		})
	}
	for _, tc := range []struct {
		name, fields string
		status       int
		code, msg    string
	}{
		{"both disagree", `"timeout":"90s","timeout_ns":1000`, http.StatusBadRequest, httpapi.CodeInvalidInput, `timeout "90s" (1m30s) and timeout_ns 1000 (1µs) disagree`},
		{"zero and not", `"timeout":"0s","timeout_ns":1000`, http.StatusBadRequest, httpapi.CodeInvalidInput, "disagree"},
		{"timeout a number", `"timeout":30`, http.StatusBadRequest, httpapi.CodeInvalidInput, `timeout 30 is not a string: send a duration such as "30s"`},
		{"timeout_ns a string", `"timeout_ns":"30s"`, http.StatusBadRequest, httpapi.CodeInvalidInput, "timeout_ns"},
		{"timeout_ns a fraction", `"timeout_ns":1.5`, http.StatusBadRequest, httpapi.CodeInvalidInput, "timeout_ns"},
		{"timeout_ns negative", `"timeout_ns":-1`, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec, "negative timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := e.do("POST", "/v1/jobs", `{"kind":"k",`+tc.fields+`}`).apiError(t, tc.status, tc.code)
			require.Contains(t, ae.Message, tc.msg)
			ae = e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"k"}`, `{"kind":"k",`+tc.fields+`}`)).apiError(t, tc.status, tc.code)
			require.True(t, strings.HasPrefix(ae.Message, "jobs[1]: "), ae.Message)
			require.Contains(t, ae.Message, tc.msg)
		})
	}
}

// TestSubmitWrongTypeNamesTheField sends, for each field of a submit, a
// JSON value of the wrong type (a bare number for run_at, a string for
// max_attempts, ...), alone and as the second job of a batch, and requires
// a 400 whose message names the field and the form to send, in plain words
// (no Go type names).
func TestSubmitWrongTypeNamesTheField(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, tc := range []struct {
		name, fields, msg string
	}{
		{"run_at a number", `"run_at":1700000000`, `run_at is the number 1700000000, not a string: send an RFC 3339 time such as "2026-01-02T15:04:05Z"`},
		{"run_at a boolean", `"run_at":true`, `run_at is a boolean, not a string: send an RFC 3339 time`},
		{"run_at an object", `"run_at":{"unix":1}`, `run_at is an object, not a string: send an RFC 3339 time`},
		{"max_attempts a string", `"max_attempts":"3"`, `max_attempts is a string, not an integer: send a whole number such as 3, without quotes`},
		{"max_attempts a fraction", `"max_attempts":1.5`, `max_attempts is the number 1.5, not an integer within range: send a whole number`},
		{"max_attempts too big", `"max_attempts":1e30`, `max_attempts is the number 1e30, not an integer within range`},
		{"max_attempts a boolean", `"max_attempts":true`, `max_attempts is a boolean, not an integer`},
		{"priority a string", `"priority":"high"`, `priority is a string, not an integer: send a whole number such as 10, without quotes`},
		{"priority an array", `"priority":[1]`, `priority is an array, not an integer`},
		{"kind a number", `"kind":7`, `kind is the number 7, not a string: send a kind such as "email.send"`},
		{"key an object", `"key":{"id":1}`, `key is an object, not a string: send a key such as "invoice-1001"`},
		{"timeout a number", `"timeout":30`, `timeout 30 is not a string: send a duration such as "30s"`},
		{"timeout_ns a string", `"timeout_ns":"30s"`, `timeout_ns is a string, not an integer: send timeout, a duration such as "30s"`},
		{"tags a string", `"tags":"nightly"`, `tags is a string, not a list of strings: send a list such as ["nightly", "team=billing"]`},
		{"a tag a number", `"tags":["a",7]`, `a tag is a number, not a string: send each tag as a string, such as "nightly"`},
		{"meta a list", `"meta":["a"]`, `meta is an array, not an object of strings: send an object such as {"request": "r-42"}`},
		{"a meta value a number", `"meta":{"attempt":3}`, `a value of meta is the number 3, not a string: send each value of meta as a string, such as {"attempt": "3"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"kind":"k",` + tc.fields + `}`
			if strings.HasPrefix(tc.fields, `"kind"`) {
				body = `{` + tc.fields + `}`
			}
			ae := e.do("POST", "/v1/jobs", body).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
			require.Contains(t, ae.Message, tc.msg)
			require.NotContains(t, ae.Message, "Go ")
			require.NotContains(t, ae.Message, "json:")
			ae = e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"k"}`, body)).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
			require.True(t, strings.HasPrefix(ae.Message, "jobs[1]: "), ae.Message)
			require.Contains(t, ae.Message, tc.msg)
			require.NotContains(t, ae.Message, "Go ")
		})
	}
	t.Run("body not an object", func(t *testing.T) {
		ae := e.do("POST", "/v1/jobs", `["k"]`).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
		require.Contains(t, ae.Message, `request body is an array; want a JSON object such as {"kind": "email.send"}`)
		ae = e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"k"}`, `7`)).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
		require.True(t, strings.HasPrefix(ae.Message, "jobs[1]: "), ae.Message)
		require.Contains(t, ae.Message, `the job is a number; want a JSON object`)
	})
}

// TestEveryJobRouteAnswersTheWireType decodes the answer of every route
// that returns jobs (submit, batch, get, list, wait, cancel, retry)
// strictly into the wire types, over a job's whole life; requires each job
// in them to be exactly FromJob's JSON of the job it describes; and
// requires the answers together to use every field of httpapi.Job. A
// route that sent another form (such as jobstore.Job's, without
// "timeout"), or a field the wire type lacks, fails.
func TestEveryJobRouteAnswersTheWireType(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := t.Context()
	seen := map[string]bool{}
	// wireForm requires raw to be the wire form of a job, and notes its
	// fields.
	wireForm := func(raw []byte) {
		t.Helper()
		var w httpapi.Job
		strictDecode(t, raw, &w)
		j, err := w.ToJob()
		require.NoError(t, err)
		want, err := json.Marshal(httpapi.FromJob(j))
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(raw))
		for _, k := range jsonKeys(t, raw) {
			seen[k] = true
		}
	}
	// job decodes one route's answer as a job.
	job := func(r response, status int) jobstore.Job {
		t.Helper()
		j := r.job(t, status)
		wireForm(r.body)
		return j
	}

	runAt := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	a := job(e.do("POST", "/v1/jobs", fmt.Sprintf(`{"kind":"a","key":"a1","partition":"p1","tags":["t"],"meta":{"m":"v"},"payload":{"n":1},"max_attempts":1,"priority":3,"run_at":%q,"timeout":"1m"}`, runAt)), http.StatusCreated)
	require.Equal(t, time.Minute, a.Timeout)

	r := e.do("POST", "/v1/jobs/batch", batchOf(`{"kind":"b"}`, `{"kind":"a","key":"a1"}`))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var batch httpapi.BatchResponse
	strictDecode(t, r.body, &batch)
	require.Len(t, batch.Results, 2)
	var rawBatch struct {
		Results []struct{ Job json.RawMessage }
	}
	require.NoError(t, json.Unmarshal(r.body, &rawBatch))
	for _, res := range rawBatch.Results {
		wireForm(res.Job)
	}
	require.Equal(t, a.ID, batch.Results[1].Job.ID)
	b := batch.Results[0].Job

	// a fails for good, is retried, runs again and is canceled while it
	// runs; b succeeds.
	claimed, err := e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w1", Kinds: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, "w1", job(e.do("GET", "/v1/jobs/"+a.ID, ""), http.StatusOK).Worker)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Outcome{Error: "boom"})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateFailed, job(e.do("GET", "/v1/jobs/"+a.ID+"/wait?timeout=0s", ""), http.StatusOK).State)
	require.Equal(t, jobstore.StateQueued, job(e.do("POST", "/v1/jobs/"+a.ID+"/retry", ""), http.StatusOK).State)
	claimed, err = e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w2", Kinds: []string{"a"}})
	require.NoError(t, err)
	canceled := job(e.do("POST", "/v1/jobs/"+a.ID+"/cancel", ""), http.StatusOK)
	require.True(t, canceled.CancelRequested)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Outcome{Error: "stopped"})
	require.NoError(t, err)
	claimed, err = e.store.Claim(ctx, jobstore.ClaimRequest{Worker: "w3", Kinds: []string{"b"}})
	require.NoError(t, err)
	require.Equal(t, b.ID, claimed.ID)
	_, err = e.store.Complete(ctx, claimed.Lease(), jobstore.Succeeded(json.RawMessage(`{"ok":true}`)))
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, job(e.do("GET", "/v1/jobs/"+a.ID+"/wait?timeout=5s", ""), http.StatusOK).State)

	r = e.do("GET", "/v1/jobs?order=oldest", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var page httpapi.ListResponse
	strictDecode(t, r.body, &page)
	require.Len(t, page.Jobs, 2)
	require.NotEmpty(t, page.Jobs[0].History)
	var raw struct{ Jobs []json.RawMessage }
	require.NoError(t, json.Unmarshal(r.body, &raw))
	for _, j := range raw.Jobs {
		wireForm(j)
	}

	// A job of a batch, and the batch's callback, which waits for it.
	m := job(e.do("POST", "/v1/jobs", `{"kind":"m","batch":"g"}`), http.StatusCreated)
	cb := job(e.do("POST", "/v1/jobs", `{"kind":"cb","after_batch":"g"}`), http.StatusCreated)
	require.Equal(t, []string{m.ID}, cb.After)
	r = e.do("GET", "/v1/jobs/"+m.ID+"/dependents", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NoError(t, json.Unmarshal(r.body, &raw))
	require.Len(t, raw.Jobs, 1)
	wireForm(raw.Jobs[0])
	require.Equal(t, jsonTags(reflect.TypeFor[httpapi.Job]()), slices.Sorted(maps.Keys(seen)),
		"the answers use every field of the wire type")
}

// TestTagsAndMeta: a submit's tags and metadata come back with the job,
// GET /v1/jobs?tag= keeps the jobs with a tag, and bad ones are refused
// in words and create nothing.
func TestTagsAndMeta(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.do("POST", "/v1/jobs", `{"kind":"k","tags":["nightly","team=ops"],"meta":{"request":"r-1"}}`).job(t, http.StatusCreated)
	require.Equal(t, []string{"nightly", "team=ops"}, a.Tags)
	require.Equal(t, map[string]string{"request": "r-1"}, a.Meta)
	e.do("POST", "/v1/jobs", `{"kind":"k","tags":["team=ops"]}`).job(t, http.StatusCreated)

	var page httpapi.ListResponse
	r := e.do("GET", "/v1/jobs?tag=nightly", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	strictDecode(t, r.body, &page)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, a.ID, page.Jobs[0].ID)
	require.Equal(t, map[string]string{"request": "r-1"}, page.Jobs[0].Meta)
	strictDecode(t, e.do("GET", "/v1/jobs?tag=team%3Dops", "").body, &page)
	require.Len(t, page.Jobs, 2)
	e.do("GET", "/v1/jobs?tag=bad%20tag", "").apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)

	ae := e.do("POST", "/v1/jobs", `{"kind":"k","tags":["a b"]}`).apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
	require.Contains(t, ae.Message, `tag "a b": only letters, digits and ._:/-= are allowed`)
	ae = e.do("POST", "/v1/jobs", `{"kind":"k","meta":{"a b":"v"}}`).apiError(t, http.StatusUnprocessableEntity, httpapi.CodeInvalidSpec)
	require.Contains(t, ae.Message, `meta key "a b"`)
	e.do("POST", "/v1/jobs", `{"kind":"k","meta":{"m":"\ud800"}}`).apiError(t, http.StatusBadRequest, httpapi.CodeInvalidInput)
	st, err := e.store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, st.Counts[jobstore.StateQueued], "a refused submit creates nothing")
}
