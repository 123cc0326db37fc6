package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/memstore"
)

// TestDependenciesInWords: what get, list and batch status print of
// dependencies and batches, from a store that keeps them (memstore, so
// that the words are tested apart from any one store's files).
func TestDependenciesInWords(t *testing.T) {
	ctx := t.Context()
	store := memstore.New(nil)
	t.Cleanup(func() { _ = store.Close() })
	submitSpec := func(spec jobstore.Spec) jobstore.Job {
		t.Helper()
		j, _, err := store.Submit(ctx, spec)
		require.NoError(t, err)
		return j
	}
	a := submitSpec(jobstore.Spec{Kind: "a", Key: "build-1"})
	b := submitSpec(jobstore.Spec{Kind: "b", Batch: "nightly"})
	c := submitSpec(jobstore.Spec{Kind: "c", After: []string{a.ID, b.ID}})
	cb := submitSpec(jobstore.Spec{Kind: "cb", AfterBatch: "nightly"})
	now := time.Now()

	links, err := readLinks(ctx, store, c)
	require.NoError(t, err)
	require.Equal(t, "waiting for 2 of 2 jobs", links.waiting)
	var out bytes.Buffer
	require.NoError(t, printJob(&out, c, "", links, now))
	require.Regexp(t, `(?m)^State:\s+waiting for 2 of 2 jobs$`, out.String())
	require.Regexp(t, `(?m)^After any:\s+no: canceled if a dependency fails or is canceled$`, out.String())
	require.Contains(t, out.String(), "Dependencies:\n")
	require.Regexp(t, `(?m)^  `+a.ID+`\s+queued\s*$`, out.String())
	require.Regexp(t, `(?m)^  `+b.ID+`\s+queued\s*$`, out.String())
	require.NotContains(t, out.String(), "Dependents:")

	claimed, err := store.Claim(ctx, jobstore.ClaimRequest{Worker: "w", Kinds: []string{"a"}})
	require.NoError(t, err)
	_, err = store.Complete(ctx, claimed.Lease(), jobstore.Succeeded(nil))
	require.NoError(t, err)
	links, err = readLinks(ctx, store, c)
	require.NoError(t, err)
	require.Equal(t, "waiting for 1 of 2 jobs", links.waiting)

	links, err = readLinks(ctx, store, b)
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, printJob(&out, b, "", links, now))
	require.Regexp(t, `(?m)^Batch:\s+nightly \(1 job, 0 ended; closed: its callback was submitted\)$`, out.String())
	require.Contains(t, out.String(), "Dependents:\n")
	require.Regexp(t, `(?m)^  `+c.ID+`\s+waiting\s*$`, out.String())
	require.Regexp(t, `(?m)^  `+cb.ID+`\s+waiting\s*$`, out.String())

	links, err = readLinks(ctx, store, cb)
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, printJob(&out, cb, "", links, now))
	require.Regexp(t, `(?m)^Callback of:\s+batch nightly \(1 job, 0 ended; closed: its callback was submitted\)$`, out.String())
	require.Regexp(t, `(?m)^After any:\s+yes: runs once its dependencies ended, whatever their outcomes$`, out.String())
	require.Regexp(t, `(?m)^State:\s+waiting for 1 job$`, out.String())

	// list: the STATE column of a waiting job says how many are left.
	c, err = store.Get(ctx, c.ID)
	require.NoError(t, err)
	waits, err := waitCounts(ctx, store, []jobstore.Job{c, a, cb})
	require.NoError(t, err)
	require.Equal(t, map[string]string{c.ID: "1/2", cb.ID: "1/1"}, waits)
	out.Reset()
	require.NoError(t, printTable(&out, []jobstore.Job{c, a}, waits, now, false))
	require.Regexp(t, `(?m)^`+c.ID+`\s+waiting \(1/2\)\s+c\s`, out.String())

	// batch status.
	info, err := store.Batch(ctx, "nightly")
	require.NoError(t, err)
	cbNow, err := store.Get(ctx, cb.ID)
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, printBatch(&out, info, []jobstore.Job{cbNow}))
	require.Regexp(t, `(?m)^batch\s+nightly$`, out.String())
	require.Regexp(t, `(?m)^jobs\s+1, 0 of them ended$`, out.String())
	require.Regexp(t, `(?m)^waiting\s+0$`, out.String())
	require.Regexp(t, `(?m)^queued\s+1$`, out.String())
	require.Regexp(t, `(?m)^closed\s+yes: its callback was submitted, no job may join$`, out.String())
	require.Regexp(t, `(?m)^  `+cb.ID+`\s+waiting$`, out.String())
}

// TestStoreMessagesArePlain: the errors a store returns for a submit or
// retry read without the package, the operation or the sentinel's words.
func TestStoreMessagesArePlain(t *testing.T) {
	for in, want := range map[string]string{
		"filestore: submit: invalid input: after 01M8M7AB6JD9EYQ6QDAWZ282C2: no such job (a dependency must exist when it is named)": "after 01M8M7AB6JD9EYQ6QDAWZ282C2: no such job (a dependency must exist when it is named)",
		`pgstore: submit batch: spec 3: batch closed: batch "b" has its callback already; no job may join it`:                        `spec 3: batch "b" has its callback already; no job may join it`,
		"memstore: submit batch: spec 1: invalid input: after spec 5: a spec can only name an earlier spec of its batch":             "spec 1: after spec 5: a spec can only name an earlier spec of its batch",
	} {
		require.Equal(t, want, storeMessage(fmt.Errorf("%s", in)), in)
	}
}

// TestBatchFileFormat: a batch file is one job a line; lines name earlier
// jobs by index or key; the flags fill what a line leaves out; every
// mistake names its line.
func TestBatchFileFormat(t *testing.T) {
	file := `# a pipeline
{"argv": ["make", "build"], "key": "build-42", "priority": 5}

{"argv": ["make", "test"], "after_specs": [0], "timeout": "10m", "dir": "/srv"}
{"argv": ["make", "lint"], "after_keys": ["build-42"], "after_any": true, "env": ["A=1"]}
{"argv": ["./deploy.sh"], "after_specs": [1, 2], "batch": "release", "tags": ["deploy"]}
`
	base := jobstore.Spec{Queue: "ci", Priority: 1, Tags: []string{"nightly"}}
	specs, lines, err := readBatchFile(strings.NewReader(file), "jobs.jsonl", "/work", base, []string{"B=2"})
	require.NoError(t, err)
	require.Equal(t, []int{2, 4, 5, 6}, lines)
	require.Len(t, specs, 4)
	require.Equal(t, "build-42", specs[0].Key)
	require.Equal(t, 5, specs[0].Priority, "a line's field wins over the flag's")
	require.Equal(t, 1, specs[1].Priority, "the flag fills what a line leaves out")
	require.Equal(t, "ci", specs[3].Queue)
	require.Equal(t, []int{0}, specs[1].AfterSpecs)
	require.Equal(t, 10*time.Minute, specs[1].Timeout)
	require.Equal(t, []string{"build-42"}, specs[2].AfterKeys)
	require.True(t, specs[2].AfterAny)
	require.Equal(t, []int{1, 2}, specs[3].AfterSpecs)
	require.Equal(t, "release", specs[3].Batch)
	require.Equal(t, []string{"deploy"}, specs[3].Tags)
	require.Equal(t, []string{"nightly"}, specs[0].Tags)
	var p struct {
		Argv []string `json:"argv"`
		Dir  string   `json:"dir"`
		Env  []string `json:"env"`
	}
	require.NoError(t, json.Unmarshal(specs[0].Payload, &p))
	require.Equal(t, "/work", p.Dir)
	require.Equal(t, []string{"B=2"}, p.Env)
	require.NoError(t, json.Unmarshal(specs[1].Payload, &p))
	require.Equal(t, "/srv", p.Dir)
	require.NoError(t, json.Unmarshal(specs[2].Payload, &p))
	require.Equal(t, []string{"A=1"}, p.Env)

	for _, tc := range []struct{ name, file, want string }{
		{"a later index", "{\"argv\":[\"a\"]}\n{\"argv\":[\"b\"],\"after_specs\":[1]}\n", "f, line 2: after_specs 1: a job waits only for earlier jobs of the file, 0 (the first) to 0 (the one before it)"},
		{"an index in the first job", `{"argv":["a"],"after_specs":[0]}`, "f, line 1: after_specs 0: the first job of the file has no earlier job to wait for"},
		{"no argv", `{"after_specs":[]}`, `f, line 1: no "argv"`},
		{"unknown field", `{"argv":["a"],"afterspecs":[0]}`, `f, line 1: not a JSON object of a job`},
		{"wrong type", `{"argv":["a"],"after_specs":"0"}`, `f, line 1: after_specs is string, which is not what it takes`},
		{"two values", `{"argv":["a"]} {"argv":["b"]}`, "f, line 1: holds more than one JSON value"},
		{"bad timeout", `{"argv":["a"],"timeout":"soon"}`, `f, line 1: timeout "soon"`},
		{"bad batch", `{"argv":["a"],"batch":"a b"}`, `batch "a b": only letters, digits and ._:/- are allowed`},
		{"empty", "# nothing\n\n", "f holds no job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readBatchFile(strings.NewReader(tc.file), "f", "/", jobstore.Spec{}, nil)
			require.Error(t, err)
			var ue *usageError
			require.ErrorAs(t, err, &ue)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestDependencyCommands: submit --after (IDs and prefixes), --after-key,
// --after-any, --batch-id and --after-batch; list --state waiting and the
// STATE column; get's dependencies, dependents and batch; --json's
// fields; batch status; retry of a dependent whose dependency failed;
// submit --batch FILE; on a file store and in PostgreSQL.
func TestDependencyCommands(t *testing.T) {
	t.Run("file", func(t *testing.T) { testDependencyCommands(t, newStoreDir(t)) })
	t.Run("postgres", func(t *testing.T) { testDependencyCommands(t, pgStore(t)) })
}

func testDependencyCommands(t *testing.T, dir string) {
	t.Chdir(t.TempDir())
	build := submit(t, dir, "--key", "build-1", "--max-attempts", "1", "--", "false")
	other := submit(t, dir, "--", "true")
	// A prefix and a key, combined.
	deploy := submit(t, dir, "--after", strings.ToLower(build[:20]), "--after-key", "build-1", "--after", other, "--", "echo", "deploy")
	notify := submit(t, dir, "--after", deploy, "--after-any", "--", "echo", "notify")

	j := getJob(t, dir, deploy)
	require.Equal(t, jobstore.StateWaiting, j.State)
	require.Equal(t, []string{build, other}, j.After, "an ID named twice is one dependency")
	require.False(t, j.AfterAny)
	require.True(t, getJob(t, dir, notify).AfterAny)

	r := jdOK(t, dir, "list", "--state", "waiting")
	require.Regexp(t, `(?m)^`+deploy+`\s+waiting \(2/2\)\s+exec\s`, r.stdout)
	require.Regexp(t, `(?m)^`+notify+`\s+waiting \(1/1\)\s+exec\s`, r.stdout)
	require.NotContains(t, r.stdout, build)
	require.Regexp(t, `(?m)^`+deploy+`\s+waiting \(2/2\)\s`, jdOK(t, dir, "list", "-o", "wide").stdout)

	r = jdOK(t, dir, "get", deploy)
	require.Regexp(t, `(?m)^State:\s+waiting for 2 of 2 jobs$`, r.stdout)
	require.Regexp(t, `(?m)^  `+build+`\s+queued\s+false$`, r.stdout)
	require.Regexp(t, `(?m)^  `+notify+`\s+waiting\s+echo notify$`, r.stdout, "its dependent")
	r = jdOK(t, dir, "get", "--json", deploy)
	require.Contains(t, r.stdout, `"after": [`)

	// The dependency fails: the dependent is canceled, and says why; the
	// one that runs whatever the outcome is queued once that ended.
	jdOK(t, dir, "work", "--exit-when-idle")
	j = getJob(t, dir, deploy)
	require.Equal(t, jobstore.StateCanceled, j.State)
	require.Equal(t, "dependency "+build+" failed", j.LastError)
	require.Regexp(t, `(?m)^Last error:\n  dependency `+build+` failed$`, jdOK(t, dir, "get", deploy).stdout)
	require.Equal(t, jobstore.StateSucceeded, getJob(t, dir, notify).State)

	// Retried while its dependency is still failed: refused in words.
	r = jd(t, dir, "retry", deploy)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, "jobdir: job "+deploy+": dependency "+build+" failed; retry that job first\n"+
		"Run jobdir retry "+build+", then jobdir retry "+deploy+".\n", r.stderr)
	jdOK(t, dir, "retry", build)
	r = jdOK(t, dir, "retry", deploy)
	require.Contains(t, r.stdout, deploy+" waits for its dependencies again")

	// Refused submits create nothing and say why.
	missing := jobstore.NewID(time.Now())
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--after", missing}, exitError, "jobdir: after " + missing + ": no such job (a dependency must exist when it is named)\n"},
		{[]string{"--after-key", "nope"}, exitError, `jobdir: after key "nope": no job has this key` + "\n"},
		{[]string{"--after", "zzzz"}, exitError, `--after zzzz: "zzzz" is not a job ID`},
		{[]string{"--after-batch", "nope"}, exitError, `"nope"`},
		{[]string{"--batch-id", "a b"}, exitUsage, "--batch-id: batch \"a b\": only letters, digits and ._:/- are allowed"},
		{[]string{"--batch-id", "x", "--after-batch", "x"}, exitUsage, "name the same batch"},
	} {
		r := jd(t, dir, append(append([]string{"submit"}, tc.args...), "--", "true")...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
		require.NotContains(t, r.stderr, "invalid input")
		require.NotContains(t, r.stderr, "filestore:")
		require.NotContains(t, r.stderr, "pgstore:")
	}

	// A batch and its callback.
	p1 := submit(t, dir, "--batch-id", "nightly", "--", "true")
	p2 := submit(t, dir, "--batch-id", "nightly", "--max-attempts", "1", "--", "false")
	merge := submit(t, dir, "--after-batch", "nightly", "--", "echo", "merged")
	require.ElementsMatch(t, []string{p1, p2}, getJob(t, dir, merge).After)
	r = jd(t, dir, "submit", "--batch-id", "nightly", "--", "true")
	require.Equal(t, exitError, r.code)
	require.Equal(t, "jobdir: batch \"nightly\" has its callback already; no job may join it\n"+
		"A batch takes no more jobs once its callback was submitted (see jobdir batch status NAME); use another batch name.\n", r.stderr)
	r = jdOK(t, dir, "batch", "status", "nightly")
	require.Regexp(t, `(?m)^jobs\s+2, 0 of them ended$`, r.stdout)
	require.Regexp(t, `(?m)^queued\s+2$`, r.stdout)
	require.Regexp(t, `(?m)^closed\s+yes`, r.stdout)
	require.Regexp(t, `(?m)^  `+merge+`\s+waiting\s+echo merged$`, r.stdout)
	r = jdOK(t, dir, "get", p1)
	require.Regexp(t, `(?m)^Batch:\s+nightly \(2 jobs, 0 ended; closed: its callback was submitted\)$`, r.stdout)
	jdOK(t, dir, "work", "--exit-when-idle")
	r = jdOK(t, dir, "batch", "status", "nightly", "--json")
	var b map[string]json.RawMessage
	decodeStrict(t, r.stdout, &b)
	require.JSONEq(t, fmt.Sprintf(`{"batch":"nightly","total":2,"states":{"succeeded":1,"failed":1},"closed":true,"callbacks":[%q]}`, merge), r.stdout)
	require.Equal(t, jobstore.StateSucceeded, getJob(t, dir, merge).State, "a callback runs whatever the outcomes")
	r = jd(t, dir, "batch", "status", "nope")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, `jobdir: no batch "nope" in the store`)
	r = jd(t, dir, "batch", "status", "a b")
	require.Equal(t, exitUsage, r.code)

	// A graph from a file.
	file := filepath.Join(t.TempDir(), "pipeline.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"argv": ["true"], "key": "f-build"}
{"argv": ["true"], "after_specs": [0]}
{"argv": ["true"], "after_keys": ["f-build"]}
{"argv": ["echo", "deployed"], "after_specs": [1, 2], "after": ["`+strings.ToLower(other[:22])+`"]}
`), 0o600))
	r = jdOK(t, dir, "submit", "--batch", file, "--batch-id", "pipeline")
	ids := strings.Fields(r.stdout)
	require.Len(t, ids, 4)
	last := getJob(t, dir, ids[3])
	require.Equal(t, []string{other, ids[1], ids[2]}, last.After)
	require.Equal(t, "pipeline", last.Batch, "the flags apply to every job of the file")
	require.Equal(t, []string{ids[0]}, getJob(t, dir, ids[2]).After)
	r = jdOK(t, dir, "submit", "--batch", file, "--json")
	require.Contains(t, r.stderr, "line 1: job "+ids[0]+" already exists for key \"f-build\"")
	require.Len(t, wireJobs(t, r.stdout), 4)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"argv\":[\"true\"]}\n{\"argv\":[\"true\"],\"after_keys\":[\"nope\"]}\n"), 0o600))
	r = jd(t, dir, "submit", "--batch", bad)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Equal(t, "jobdir: "+bad+`, line 2: after key "nope": no job has this key`+"\n", r.stderr)
	r = jd(t, dir, "submit", "--batch", bad, "--", "true")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "a PROGRAM or --batch FILE, not both")

	// Cancel cascades; waiting jobs are canceled by --state waiting.
	w := submit(t, dir, "--after", ids[3], "--", "true")
	require.Regexp(t, `(?m)^`+w+`\s+waiting`, jdOK(t, dir, "list", "--state", "waiting").stdout)
	r = jdOK(t, dir, "cancel", "--state", "waiting", "--yes")
	require.Regexp(t, `^canceled \d+ jobs?\n$`, r.stdout)
	require.Equal(t, jobstore.StateCanceled, getJob(t, dir, w).State)

	// stats counts the waiting jobs.
	require.Regexp(t, regexp.MustCompile(`(?m)^waiting\s+\d+$`), jdOK(t, dir, "stats").stdout)
}
