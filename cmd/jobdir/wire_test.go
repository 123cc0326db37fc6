package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
)

// TestJSONIsTheAPIsJobForm checks that every command that prints a job
// with --json (submit, get, rerun, wait and each element of list) prints
// it as the HTTP API sends it: it decodes strictly into httpapi.Job,
// re-encodes to the same bytes, carries the timeout as "timeout": "30s",
// and equals, once compacted, the body of GET /v1/jobs/ID served from the
// same store. list --format sees the same fields.
func TestJSONIsTheAPIsJobForm(t *testing.T) {
	dir := newStoreDir(t)
	sub := jdOK(t, dir, "submit", "--json", "--timeout", "30s", "--key", "k", "--", "true").stdout
	id := wireJob(t, sub).ID
	rerun := jdOK(t, dir, "rerun", "--json", id).stdout
	rerunID := wireJob(t, rerun).ID
	jdOK(t, dir, "cancel", id)
	wait := jd(t, dir, "wait", "--json", id)
	require.Equal(t, exitCanceled, wait.code, "%s", wait)
	get := jdOK(t, dir, "get", "--json", id).stdout

	var list []json.RawMessage
	decodeStrict(t, jdOK(t, dir, "list", "--json", "--oldest-first").stdout, &list)
	require.Len(t, list, 2)

	outputs := []struct {
		name, id, out string
	}{
		{"submit", id, sub},
		{"rerun", rerunID, rerun},
		{"wait", id, wait.stdout},
		{"get", id, get},
		{"list[0]", id, string(list[0]) + "\n"},
		{"list[1]", rerunID, string(list[1]) + "\n"},
	}
	for _, o := range outputs {
		var w httpapi.Job
		decodeStrict(t, o.out, &w)
		require.Equal(t, o.id, w.ID, o.name)
		require.Equal(t, httpapi.Duration(30*time.Second), w.Timeout, o.name)
		var again bytes.Buffer
		require.NoError(t, writeJSON(&again, w))
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, []byte(o.out), "", "  "))
		require.Equal(t, want.String(), again.String(), "%s: the output is httpapi.Job's encoding, no more", o.name)
		require.Contains(t, o.out, `"timeout": "30s"`, o.name)
	}

	// list --format sees the fields of get --json: TimeoutNS is httpapi.Job's.
	r := jdOK(t, dir, "list", "--oldest-first", "--format", "{{.ID}} {{.Timeout}} {{.TimeoutNS}}")
	require.Equal(t, id+" 30s 30000000000\n"+rerunID+" 30s 30000000000\n", r.stdout)

	// The API serves the same bytes for the job as it is now.
	st, err := filestore.Open(t.Context(), dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	api, err := httpapi.New(st, &httpapi.Options{InsecureNoAuth: true})
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	for _, o := range outputs {
		if o.name == "submit" {
			continue // its job was canceled since
		}
		resp, err := srv.Client().Get(srv.URL + "/v1/jobs/" + o.id)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		var fromAPI, fromCLI bytes.Buffer
		require.NoError(t, json.Compact(&fromAPI, body))
		require.NoError(t, json.Compact(&fromCLI, []byte(o.out)))
		require.Equal(t, fromAPI.String(), fromCLI.String(), "%s --json and GET /v1/jobs/%s", o.name, o.id)
	}
}
